"""SGD noise in the spectral solver (``solve_spectral(..., epsilon=ε)``): the matrix-level
Gaussian-equivalent stochastic flow against the noise-corrected moment hierarchy (docs/theory.md §5, §7).

1. Generator at t = 0: the drift of tr_student, q_student_student, q_student_teacher of one step
   of the stochastic flow (deterministic part exact, noise part the even part of ±dΞ pairs of the
   solver's own noise map) equals ``compiled(derive(spec)).rhs(0, μ, params(ε))`` at the solver's
   own initial moments μ, to within sampling error plus the O(1/N) finite-size terms
   (e.g. E[dΞ S dΞ] = εν dt (tr S·I + S/N)).
2. Short horizon inside the truncation window (tied linear, ε = 0.1): spectral-with-noise agrees with
   the hierarchy with noise, and both differ from their noise-free versions by the same amount.
"""
from __future__ import annotations

import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pytest

from symattn import load_spec
from symattn.codegen.systems import compiled
from symattn.derivation import derive
from symattn.derivation import state as R
from symattn.derivation.noise import nu_expectations
from symattn.integration import integrate
from symattn.spectral import initial_realisation, solve_spectral
from symattn.spectral.field import Flow
from symattn.spectral.noise import Noise


def make(act="linear", sigma=1.0, sigma_t=1.0, M=4, eps=0.1, kind="tied", teacher=None, width=1.0):
    from symattn.kinds import KINDS

    def index(name, role, k, scale, width):
        ix = {"name": name, "role": role, "parameterization": k, "init_scale": scale}
        if KINDS[k].uses_width:
            ix["width"] = width
        return ix

    teacher = teacher or kind
    return load_spec({"name": "spectral_noise", "model": {"tokens": 1, "activation": act},
                      "indices": [index("student", "student", kind, sigma, width),
                                  index("teacher", "teacher", teacher, sigma_t, 0.5 if teacher == "tied" else 1.0)],
                      "training": {"batch_size": 64, "noise_ratio": eps}, "theory": {"truncation": M}})


def letter_matrices(mats, N):
    """Dense N×N matrix of every hierarchy letter: S (= M), T = Mᵀ, and for a pair A = UUᵀ, B = VVᵀ."""
    out = {}
    for k, m in enumerate(mats):
        D = m.dense(N)
        out[k, "S"], out[k, "T"] = D, D.T
        if m.form == "pair":
            U, V = m.value
            out[k, "A"], out[k, "B"] = U @ U.T, V @ V.T
    return out


def moments_of(system, mats, N):
    """μ_w = Tr(X_{w1} ⋯ X_{wn})/N of every word of the hierarchy, on the solver's matrices (the
    untied means, after the words, stay 0: the free-law start)."""
    D = letter_matrices(mats, N)
    mu = np.zeros(system.size)
    mu[0] = 1.0
    for i, w in enumerate(system.words[1:], 1):
        A = D[w[0]]
        for letter in w[1:]:
            A = A @ D[letter]
        mu[i] = np.trace(A) / N
    return mu


def columns(spec):
    """Observed traces: column name -> word (q1 = Tr(M_a M_bᵀ)/N, q2 = Tr(M_a M_b)/N for a pair of
    non-symmetric indices, q = Tr(S_a S_b)/N otherwise)."""
    sym = [ix.symmetric for ix in spec.indices]
    out = {"tr_student": ((0, "S"),)}
    for b, name in ((0, "student_student"), (1, "student_teacher")):
        if sym[0] or sym[b]:
            out[f"q_{name}"] = ((0, "S"), (b, "S"))
        else:
            out[f"q1_{name}"], out[f"q2_{name}"] = ((0, "S"), (b, "T")), ((0, "S"), (b, "S"))
    return out


def measure(mats, cols, N):
    D = letter_matrices(mats, N)
    out = {}
    for c, w in cols.items():
        A = D[w[0]]
        for letter in w[1:]:
            A = A @ D[letter]
        out[c] = np.trace(A) / N
    return out


COLS = columns(make())


@pytest.mark.parametrize("kind,teacher,act,sigma,N,width", [
    ("tied", "tied", "linear", 1.0, 300, 1.0), ("tied", "tied", "h2", 0.5, 300, 1.0),
    ("tied", "tied", "h2", 0.7, 200, 0.5),             # a narrow tied student: the factor form W
    ("untied", "untied", "linear", 1.0, 200, 1.0),
    pytest.param("untied", "untied", "h3", 0.7, 200, 1.0, marks=pytest.mark.slow),      # the untied path: linear above
    ("general", "tied", "h2", 0.7, 200, 1.0), ("untied", "tied", "linear", 1.0, 150, 1.0),
    ("tied", "untied", "h2", 0.7, 150, 1.0)])
def test_generator_matches_noisy_hierarchy(kind, teacher, act, sigma, N, width):
    """Every kind's matrix-level vector field and noise map against its hierarchy (docstring above);
    a tied student of width 1 is integrated as the dense S, of width 0.5 as its factor W."""
    eps, h, pairs = 0.1, 1e-3, 80
    spec = make(act, sigma, sigma, kind=kind, teacher=teacher, width=width)
    system = derive(spec)
    mats = initial_realisation(load_spec(spec), N, seed=0)
    if kind == "tied":
        assert mats[0].form == ("dense" if width > 0.618 else "factor")
    mu = moments_of(system, mats, N)
    mod = compiled(system)
    r_eps, r_0 = mod.rhs(0.0, mu, R.params(system, eps)), mod.rhs(0.0, mu, R.params(system, 0.0))
    cols = columns(spec)

    flow = Flow(spec, mats, N, system.potential)             # a batch of one realisation
    noise = Noise(flow, nu_expectations(system.potential), eps, np.random.default_rng(7))

    def first(batch):                                         # realisation 0 of batched matrices
        return [m.take(0) for m in batch]

    # deterministic part: exact d/dt of the traces along the solver's flow (central difference of
    # the polynomial traces along the velocity; its O(δ²) error is < 1e-10 here)
    y0, F = flow.pack(), flow.rhs(0.0, flow.pack())
    delta = 1e-5
    up, dn = (measure(first(flow.unpack(y0 + delta * F)), cols, N),
              measure(first(flow.unpack(y0 - delta * F)), cols, N))
    det = {c: (up[c] - dn[c]) / (2 * delta) for c in cols}
    # noise part: even part of the solver's noise map under ±dΞ (the odd part has mean zero)
    Vs, Va = noise.nu_matrices(flow.theta(flow.mats, 0.0)[0])
    Cs, Ca = noise.factor(Vs), noise.factor(Va)
    m0 = measure(mats, cols, N)
    samples = {c: [] for c in cols}
    for _ in range(pairs):
        dXi = noise.increments(Cs, Ca, h, N)
        ev = [measure(first(noise.apply(flow.mats, [sgn * x for x in dXi])), cols, N) for sgn in (1.0, -1.0)]
        for c in cols:
            samples[c].append(((ev[0][c] + ev[1][c]) / 2 - m0[c]) / h)
    resolved = []
    for c, w in cols.items():
        i = system.index(w)
        meas_noise, sem = np.mean(samples[c]), np.std(samples[c], ddof=1) / np.sqrt(pairs)
        hier_noise = r_eps[i] - r_0[i]
        total = det[c] + meas_noise
        tol = 4 * sem + 4.0 / N * abs(hier_noise) + 1e-8 * (1 + abs(r_0[i]))
        print(f"{kind} {act:6s} {c:18s} drift: stochastic flow {total:+.6f} ± {sem:.1e}  hierarchy(ε) {r_eps[i]:+.6f}  "
              f"hierarchy(0) {r_0[i]:+.6f} | noise part {meas_noise:+.6f} vs {hier_noise:+.6f}")
        assert abs(det[c] - r_0[i]) < 1e-7 * (1 + abs(r_0[i]))          # same deterministic drift
        assert abs(total - r_eps[i]) < tol, (c, total, r_eps[i], tol)
        if c != "tr_student" or kind == "tied":          # untied: the trace has no O(ε) term
            resolved.append(abs(hier_noise) > 20 * tol)                     # the test resolves the noise term
    assert sum(resolved) >= 2, resolved


def test_epsilon_zero_is_the_deterministic_solver():
    spec = make("h2", 0.5, 0.5)
    kw = dict(time=0.02, points=3, size=40, error_estimate=False)
    a, b, c = solve_spectral(load_spec(spec), **kw), solve_spectral(load_spec(spec), epsilon=0.0, **kw), solve_spectral(load_spec(spec), epsilon=None, **kw)
    for col in a.table:
        assert np.array_equal(a.table[col], b.table[col]) and np.array_equal(a.table[col], c.table[col])
    assert "epsilon" not in a.info


def test_short_horizon_matches_noisy_hierarchy():
    """Tied linear, ε = 0.1, σ = σ* = 0.5 on [0, 0.05] (M = 8 and M = 6 agree to < 1e-3 there)."""
    eps, T, N, R, pts = 0.1, 0.05, 200, 6, 6
    spec = make("linear", 0.5, 0.5, M=8)
    system = derive(spec)
    mu = moments_of(system, initial_realisation(load_spec(spec), N, seed=0), N)
    hn = integrate(system, time=T, points=pts, init=mu, epsilon=eps)
    h0 = integrate(system, time=T, points=pts, init=mu, epsilon=0.0)
    assert hn.valid_until is None and h0.valid_until is None        # inside the truncation window
    t0 = time.perf_counter()
    s0 = solve_spectral(load_spec(spec), time=T, points=pts, size=N, error_estimate=False)
    t1 = time.perf_counter()
    sn = solve_spectral(load_spec(spec), time=T, points=pts, size=N, error_estimate=False, epsilon=eps,
                        noise_realisations=R, noise_antithetic=True, noise_seed=3)
    t2 = time.perf_counter()
    print(f"timing: deterministic {t1 - t0:.2f}s, stochastic {t2 - t1:.2f}s "
          f"({R} paths × {sn.info['noise_steps'] // R} steps, N = {N})")
    assert sn.info["epsilon"] == eps and sn.info["noise_steps"] >= R * 3      # adaptive steps
    for c in COLS:
        eff_h = hn.table[c][1:] - h0.table[c][1:]            # noise effect, hierarchy
        eff_s = sn.table[c][1:] - s0.table[c][1:]            # noise effect, spectral (common initial matrices)
        sem = sn.info["noise_sem"][c][1:]
        gap = sn.table[c][1:] - hn.table[c][1:]
        print(f"{c:18s} t={T}: spectral(ε) {sn.table[c][-1]:.6f} ± {sem[-1]:.1e}  hierarchy(ε) {hn.table[c][-1]:.6f}  "
              f"spectral(0) {s0.table[c][-1]:.6f}  hierarchy(0) {h0.table[c][-1]:.6f} | noise effect "
              f"{eff_s[-1]:+.3e} vs {eff_h[-1]:+.3e}; |spectral(ε) − hierarchy(ε)| = {abs(gap[-1]):.1e}")
        assert np.all(np.abs(eff_s - eff_h) < 4 * sem + 0.08 * np.abs(eff_h) + 1e-7), (c, eff_s, eff_h, sem)
        assert np.all(np.abs(gap) < 0.2 * np.abs(eff_h)), (c, gap, eff_h)             # agrees with hierarchy(ε)
        assert np.all(np.abs(sn.table[c][1:] - h0.table[c][1:]) > 0.7 * np.abs(eff_h))  # differs from both ε = 0
        assert np.all(np.abs(eff_s) > 0.7 * np.abs(eff_h)) and np.all(np.sign(eff_s) == np.sign(eff_h))


@pytest.mark.parametrize("name, T", [("tied_softmax_L2_small", 0.25), ("tied_h3_L1_small", 1.0)])
def test_knots_interpolate_the_outputs_they_pass(name, T):
    """A noise path whose steps pass over output times (spectra=False) against the same path landing on
    every output (spectra=True), ε → 0 so that only the stepping differs: the outputs agree to 1e-4 of each
    column's scale (measured ≤ 5e-5; the pass test allows 3e-3 of a scale per pass), with fewer steps."""
    kw = dict(time=T, points=51, size=32, epsilon=1e-9, error_estimate=False)
    landed = solve_spectral(load_spec(name), spectra=True, **kw)
    passed = solve_spectral(load_spec(name), spectra=False, **kw)
    assert passed.info["noise_steps"] < landed.info["noise_steps"]
    for c, v in landed.table.items():
        scale = max(1e-3, float(np.max(np.abs(v))))
        assert np.max(np.abs(passed.table[c] - v)) <= 1e-4 * scale, c


def test_student_t_quantiles():
    """The 97.5 % Student t of the realisations' error bar, against SciPy's."""
    from scipy import stats

    from symattn.spectral.estimate import t975
    for dof in range(1, 41):
        assert t975(dof) == pytest.approx(stats.t.ppf(0.975, min(dof, 30)), abs=5e-4)



@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_pair_increments_have_the_gaussian_pair_moments(sign):
    """``spectral.noise.pair_sum`` draws (G ± Gᵀ)/√2 as its upper triangle, written into a given array: the second
    moments E[Z_ab Z_cd] = δ_ac δ_bd + sign·δ_ad δ_bc (all the O(ε) limit reads) over 20 000 draws of a
    4 × 4 matrix (standard error of each moment ≤ √6/√20 000 = 0.017; tolerance 0.07), exactly (anti)symmetric,
    and the same draws, scaled, whether written into a given array or a new one."""
    from symattn.spectral.noise import pair_sum
    n, draws = 4, 20_000
    rng = np.random.default_rng(11)
    Z = np.array([pair_sum(rng, n, sign) for _ in range(draws)])
    assert np.array_equal(Z, sign * Z.swapaxes(1, 2))
    moments = np.einsum("sab,scd->abcd", Z, Z) / draws
    eye = np.eye(n)
    expected = np.einsum("ac,bd->abcd", eye, eye) + sign * np.einsum("ad,bc->abcd", eye, eye)
    assert np.max(np.abs(moments - expected)) < 0.07
    out = np.full((n, n), np.nan)
    a = pair_sum(np.random.default_rng(3), n, sign, scale=0.5, out=out)
    assert a is out and np.array_equal(a, 0.5 * pair_sum(np.random.default_rng(3), n, sign))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_box_mullernormals(dtype):
    """``spectral.noise.normals`` (Box–Muller on uniforms in the flow's precision) against N(0, scale²): 400 000 draws,
    Kolmogorov–Smirnov p > 10⁻³ for the standardised draws (a fixed seed; a wrong law gives p ≈ 0), mean, variance
    and fourth moment within 5 standard errors (σ/√n = 0.0016, √2/√n = 0.0022, √96/√n = 0.015), an odd count."""
    from scipy import stats

    from symattn.spectral.noise import normals
    n, scale = 400_001, 0.3
    z = normals(np.random.default_rng(5), n, dtype, scale)
    assert z.shape == (n,) and z.dtype == dtype
    x = z.astype(np.float64) / scale
    assert stats.kstest(x, "norm").pvalue > 1e-3
    assert abs(x.mean()) < 5 * 0.0016 and abs(x.var() - 1.0) < 5 * 0.0022 and abs(np.mean(x ** 4) - 3.0) < 5 * 0.015


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_tied_flow_keeps_s_exactly_symmetric(dtype):
    """The antisymmetric part of a dense tied S is unstable under its flow (docs/theory.md §5, "Precision":
    9·10⁻⁹ grows to O(1) by τ = 0.5), so the vector field (a SYRK, and terms symmetric entry by entry) and the
    noise map must each keep S exactly symmetric: on two realisations of tied h2 at N = 100, every one of 20
    Cash–Karp drift steps and every noise map after them leaves S bit-for-bit symmetric (a GEMM S·S in the
    vector field fails at the first drift step: at N = 100 OpenBLAS's product is not symmetric to the bit)."""
    from symattn.codegen.potential import compiled_potential
    from symattn.spectral.noise import Noise
    from symattn.spectral.realisation import start
    from symattn.stepping import CashKarp
    spec = load_spec("tied_h2_L1")
    P = compiled_potential(load_spec(spec))
    flow = start(spec, P, 100, [0, 1], "free")
    assert flow.mats[0].form == "dense"
    flow.to_dtype(dtype)
    noise = Noise(flow, P.nu, 0.05, [np.random.default_rng(1), np.random.default_rng(2)])
    y, t, h = flow.pack(), 0.0, 2e-3
    stages = np.empty((6, y.size), dtype=y.dtype)

    def symmetric(y):
        S = flow.unpack(y)[0].value
        return np.abs(S).max() > 0.1 and np.array_equal(S, S.swapaxes(-1, -2))

    for _ in range(20):
        y, _ = CashKarp.step(flow.rhs, t, y, h, flow.rhs(t, y), stages)
        t += h
        assert symmetric(y), "drift step"
        Vs, Va = noise.nu_matrices(flow.theta(flow.unpack(y), t)[0])
        flow.mats = noise.apply(flow.unpack(y), noise.increments(noise.factor(Vs), noise.factor(Va), h, 100))
        y = flow.pack()
        assert symmetric(y), "noise map"
