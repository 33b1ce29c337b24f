"""Anisotropic token features x ~ N(0, Σ) (``model.feature_covariance``, symattn/features.py, docs/theory.md §1).

Each check compares the whitened, Σ-preconditioned machinery with something computed without it:
1. Φ at the Σ-weighted order parameters against Monte Carlo over real tokens x ~ N(0, Σ) at d = 400 (the
   original, unwhitened matrices and an explicit Σ), and the exact finite-d Φ_d likewise;
2. one SGD step of the package (whitened factors, preconditioned gradient) against plain SGD on the
   original factors with x = Σ^{½}z on the same batches, NumPy and torch;
3. the default theory against SGD at d = 50, 100 and 200 (slow: the finite-size gap at d ≤ 100 is as large as the
   change; see the test), within the allowance of the isotropic comparison, the gap shrinking with d;
4. the free-probability start φ(ΣSΣT) = φ(Σ²)φ(S)φ(T) against a large realisation;
5. bad laws refused in one line naming the key; the hierarchy refused for words whose Σ-moments the law lacks
   (and an untied one below M = 3);
6. the moment hierarchy with the letter Σ (symbolic/metric.py): its free start against the Wick engine (Σ
   itself a Wishart law, exact) and sampled matrices; its noise terms against the even part of one exact
   preconditioned SGD step; its trajectory against the matrix-level flow inside its window.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import pytest

from symattn import load_spec
from symattn.cli import main
from symattn.initial import draw_initial, initial_order_parameters
from symattn.symbolic.loss import build_loss

POWER = '{law="power",exponent=0.2}'
TWO = '{law="two_level",ratio=3.0,weight=0.25}'


def spec_with(name, law, *more):
    return load_spec(name, [f"model.feature_covariance={law}", *more])


def _original(spec, d, seed):
    """The unwhitened matrices S_k of seed ``seed`` (the kinds' plain draws) and Σ's diagonal."""
    from symattn.initial import INITIAL, stream
    lam = spec.features.eigenvalues(d)
    mats = []
    for k, ix in enumerate(spec.indices):
        st = ix.kind.draw(ix, d, stream(seed, d, INITIAL, k))
        mats.append(np.asarray(ix.kind.matrix(st), dtype=float))
    return mats, lam


def _mc_real_tokens(spec, mats, lam, n, seed=11, chunk=5000):
    """Mean and s.e. of the per-sample loss with x_i = Σ^{½}z_i (token covariance C ⊗ Σ), G centred by
    C_ij Tr(SΣ) — no whitening anywhere."""
    d, L, K = len(lam), spec.tokens, spec.K
    R = np.linalg.cholesky(np.asarray(spec.covariance, dtype=float))
    f = build_loss(spec).compile_gradient()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n // chunk):
        X = np.einsum("ij,njd->nid", R, rng.standard_normal((chunk, L, d))) * np.sqrt(lam)
        G = np.empty((chunk, L, L, K))
        for k, S in enumerate(mats):
            B = (X @ S) @ X.transpose(0, 2, 1)                  # x_iᵀ S x_j, through BLAS
            if spec.indices[k].centred:
                B = B - np.asarray(spec.covariance)[None] * np.trace(S * lam[:, None])
            G[..., k] = B / np.sqrt(d)
        out.append(f(G, None)[0])
    v = np.concatenate(out)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v)))


def _weighted_theta(spec, P, mats, lam):
    """Φ's order parameters from the original matrices: q_kl = Tr(ΣS_kΣS_l)/d (q1 with S_lᵀ)."""
    d = len(lam)
    Sig = np.diag(lam)
    vals = {}
    for name in P.names:
        kind, *pair = name.split("_")
        a, b = (spec.names.index(n) for n in pair)
        Y = mats[b].T if kind == "q1" else mats[b]
        vals[name] = float(np.trace(Sig @ mats[a] @ Sig @ Y)) / d
    return vals


@pytest.mark.parametrize("law", [POWER, TWO])
def test_limit_potential_equals_monte_carlo_over_real_tokens_d400(law):
    """Softmax L = 2 (a quadrature Φ): Φ at the Σ-weighted order parameters of the original matrices against
    the loss averaged over 4e4 real token pairs at d = 400; 3 s.e. plus the O(1/d) finite-size term of the
    limit (measured for the isotropic softmax: |Φ_d − Φ| ≈ 0.1/d, here 2.5e-4 ≪ the s.e.)."""
    from symattn.derivation.potential import Potential
    spec = spec_with("tied_softmax_L2", law)
    mats, lam = _original(spec, 400, 2)
    P = Potential(spec)
    phi = P.value(_weighted_theta(spec, P, mats, lam))
    mc, se = _mc_real_tokens(spec, mats, lam, n=40_000)
    print(f"softmax L=2 {law}: Φ {phi:.5f}, MC over x {mc:.5f} ± {se:.5f} ({(phi - mc) / se:+.2f} s.e.)")
    assert abs(phi - mc) <= 3 * se + 0.1 / 400


@pytest.mark.parametrize("law", [POWER, TWO])
def test_exact_finite_d_loss_equals_monte_carlo_over_real_tokens_d400(law):
    """h2: the exact Φ_d of the whitened matrices (derivation.finite_d) against real tokens, 3 s.e. (exact:
    no finite-size allowance)."""
    from symattn.derivation.finite_d import FiniteDPotential, dense_matrices
    spec = spec_with("tied_h2_L1_small", law)
    mats, lam = _original(spec, 400, 4)
    exact = FiniteDPotential(spec).value(dense_matrices(spec, draw_initial(spec, 400, 4)))
    mc, se = _mc_real_tokens(spec, mats, lam, n=40_000)
    print(f"h2 {law}: Φ_d {exact:.6f}, MC over x {mc:.6f} ± {se:.6f} ({(exact - mc) / se:+.2f} s.e.)")
    assert abs(exact - mc) <= 3 * se


def _plain_sgd_steps(spec, W, T, lam, Z, a):
    """Plain SGD on the original factor W (tied h2 student, tied teacher T) with x = Σ^{½}z."""
    d = len(lam)
    root, Sig = np.sqrt(lam), np.diag(lam)
    h2 = lambda z: (z * z - 1) / np.sqrt(2)      # noqa: E731
    for Zb in Z:
        x = Zb[:, 0, :] * root[None, :]
        S, St = W @ W.T, T @ T.T
        Gs = (np.einsum("ba,ac,bc->b", x, S, x) - np.trace(S @ Sig)) / np.sqrt(d)
        Gt = (np.einsum("ba,ac,bc->b", x, St, x) - np.trace(St @ Sig)) / np.sqrt(d)
        e = (h2(Gs) - h2(Gt)) * np.sqrt(2) * Gs
        grad = (2 * np.einsum("b,ba,bc->ac", e, x, x) @ W / len(e) - 2 * e.mean() * Sig @ W) / np.sqrt(d)
        W = W - a * grad
    return W


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_whitened_preconditioned_sgd_is_plain_sgd_on_the_original_factors(backend):
    spec = spec_with("tied_h2_L1_small", TWO)
    d, steps = 24, 6
    rng = np.random.default_rng(3)
    Z = [rng.standard_normal((spec.batch_size, 1, d)) for _ in range(steps)]
    lam = spec.features.eigenvalues(d)
    states = draw_initial(spec, d, 1)                       # whitened: W̃ = Σ^{½}W
    root = np.sqrt(lam)
    W0, Tw = states[0]["W"] / root[:, None], states[1]["W"] / root[:, None]
    if backend == "numpy":
        from symattn.simulation.sgd import Model
        m = Model(spec, d)
        m.set_state(states)
        for Zb in Z:
            m.step(Zb)
        got = m.state[0]["W"]
    else:
        torch = pytest.importorskip("torch")
        from symattn.simulation.torch_backend import TorchModel
        m = TorchModel(spec, d, seeds=1, device="cpu", dtype="float64")
        m.set_state([states])
        for Zb in Z:
            m.step(torch.as_tensor(Zb)[None])
        got = m.state[0]["W"][0].numpy()
    want = root[:, None] * _plain_sgd_steps(spec, W0, Tw, lam, Z, spec.step_size(d))
    assert np.max(np.abs(got - want)) < 1e-12 * max(1.0, np.max(np.abs(want)))


def test_free_start_order_parameters_against_a_large_realisation():
    spec = spec_with("tied_h2_L1", POWER)
    free = initial_order_parameters(spec)
    d = 1500
    mats, lam = _original(spec, d, 0)
    from symattn.derivation.potential import Potential
    sample = _weighted_theta(spec, Potential(spec), mats, lam)
    for n, v in free.items():
        assert sample[n] == pytest.approx(v, rel=0.05), (n, sample[n], v)      # O(d^{−(1−2a)}) finite-size
    iso = initial_order_parameters(load_spec("tied_h2_L1"))
    m2 = spec.features.second_moment                                          # (1 − a)²/(1 − 2a) = 16/15
    assert m2 == pytest.approx(0.64 / 0.6)
    # φ(S) = κσ² = 1, φ(T) = 0.5: q_ss = φ(S²) + (m2 − 1)φ(S)², q_st = m2 φ(S)φ(T)
    assert free["q_student_student"] == pytest.approx(iso["q_student_student"] + (m2 - 1.0))
    assert free["q_student_teacher"] == pytest.approx(m2 * 0.5) and iso["q_student_teacher"] == pytest.approx(0.5)


def _theory_vs_sgd(law, dims, seeds, T=0.06, points=13):
    from symattn import simulate
    from symattn.spectral import solve_spectral
    spec = spec_with("tied_h2_L1", law, "training.noise_ratio=0.002")
    th = solve_spectral(spec, time=T, points=points, size=128, rotations=4, epsilon=spec.epsilon(), spectra=False)
    out = {}
    for d, s in zip(dims, seeds):
        sim = simulate(spec, dim=d, seeds=s, time=T, points=points, progress=False).table
        for c in ("tr_student", "q_student_student", "p_student_student", "q_student_teacher",
                  "p_student_teacher", "loss"):
            v, dev = th.table[c], np.abs(th.table[c] - sim[c])
            allow = 12.0 if c == "loss" else 5.0        # tests/test_spectral_vs_sgd.py, h2 (ALLOW_D, ALLOW_EPS)
            tol = 4 * sim[c + "_sem"] + th.table[c + "_err"] + (allow / d + 0.01) * (1 + np.abs(v))
            out[d, c] = (float(dev.max()), float(np.max(dev / tol)))
            print(f"{law} d={d} {c:18s} max|dev| {dev.max():.4f}  dev/tol {np.max(dev / tol):.2f}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("law", [POWER, TWO])
def test_theory_follows_sgd_with_anisotropic_features(law):
    """Tied h2 (σ = 1, ε = 0.002, τ ≤ 0.06), d = 50 and 100, 4 seeds: within the isotropic allowance
    4·sem + err + (5/d + 0.01)(1 + |v|) (loss 12/d). Measured dev/tol ≤ 0.68 — but that allowance is as large as
    the columns' change (q_st: 0.25 against 0.18–0.27), so this is ``slow``. The gap is the finite-size gap of the
    flow itself, not SGD: the exact finite-d flow from seed 0's matrices against the limit flow from the same
    matrices (no noise) differs in q_st by 0.104 / 0.087 / 0.049 at d = 50 / 100 / 200 (power law; two-level 0.098
    / 0.086 / 0.055), ≈ d^{−0.6}, the power law's O(d^{−(1−2a)}) correction; SGD follows that finite-d flow within
    3 s.e. of the paired difference. The default run holds the same claim's fast, independent parts: Φ with Σ
    against Monte Carlo over real tokens (d = 400), the preconditioned step against plain SGD on the original
    factors, the exact finite-d flow with Σ against SGD (paired) and the Σ-hierarchy against the matrix level."""
    out = _theory_vs_sgd(law, (50, 100), (4, 4))
    assert all(r <= 1.0 for _, r in out.values())


@pytest.mark.slow
@pytest.mark.parametrize("law", [POWER, TWO])
def test_theory_gap_shrinks_with_d(law):
    """d = 100 and 200, 4 seeds: within the allowance, and the gap of q_ss, q_st shrinks (measured
    d = 200/100: 0.50/0.48 power law, 0.60/0.58 two-level)."""
    out = _theory_vs_sgd(law, (100, 200), (4, 4))
    assert all(r <= 1.0 for _, r in out.values())
    for c in ("q_student_student", "q_student_teacher"):
        assert out[200, c][0] < 0.75 * out[100, c][0]


@pytest.mark.parametrize("raw, key", [
    ('{law="gauss"}', "model.feature_covariance.law"),
    ('{law="power"}', "model.feature_covariance.exponent"),
    ('{law="power",exponent=0.5}', "model.feature_covariance.exponent"),
    ('{law="power",exponent=0.2,ratio=2}', "model.feature_covariance.ratio"),
    ('{law="two_level",ratio=0,weight=0.5}', "model.feature_covariance.ratio"),
    ('{law="two_level",ratio=2,weight=1}', "model.feature_covariance.weight"),
    ('{law="file",path="/nonexistent/eigs.txt"}', "model.feature_covariance.path"),
    ('"diagonal"', "model.feature_covariance")])
def test_bad_laws_are_refused_in_one_line(raw, key, capsys):
    code = main(["potential", "tied_h2_L1_small", "--set", f"model.feature_covariance={raw}", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and key in err[0], err


def test_file_law_and_refusals(tmp_path, capsys):
    eig = tmp_path / "eigs.txt"
    eig.write_text(" ".join(str(x) for x in [0.5] * 30 + [2.0] * 10))
    spec = spec_with("tied_h2_L1_small", f'{{law="file",path="{eig}"}}')
    lam = spec.features.eigenvalues(80)
    assert lam.mean() == pytest.approx(1.0) and np.sum(lam > 1.5) == 20
    assert spec.features.second_moment == pytest.approx(np.mean((np.r_[[0.5] * 30 + [2.0] * 10] / 0.875) ** 2))
    for argv in (["theory", "tied_h2_L1_small", "--method", "moments", "--time", "0.01"],
                 ["derive", "tied_h2_L1_small"]):               # M = 8 needs φ(Σ^8), infinite from n = 5 at a = 0.2
        code = main(argv + ["--set", f"model.feature_covariance={POWER}", "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "model.feature_covariance" in err[0] and "φ(Σ^n)" in err[0], err
    code = main(["theory", "untied_h2_L1", "--method", "moments", "--truncation", "2", "--time", "0.01", "--set",
                 f"model.feature_covariance={TWO}", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "theory.truncation" in err[0] and "ΣM_lB_k" in err[0], err
    code = main(["potential", "riccati", "--set", f"model.feature_covariance={POWER}", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "identity" in err[0], err


def test_exact_finite_d_flow_with_features_follows_sgd():
    """The exact expected-gradient flow (derivation.finite_d, preconditioned by Σ on whitened factors) from each
    seed's own matrices against SGD at d = 50, ε = 5e-4 (SGD noise negligible), 4 seeds: within 3 s.e. of the
    paired difference (measured 0.00037 against 0.00034 on q_ss)."""
    from symattn import simulate
    from symattn.derivation.finite_d import FiniteDPotential, solve_finite_d
    spec = spec_with("tied_h2_L1_small", TWO, "training.noise_ratio=0.0005")
    sim = simulate(spec, dim=50, seeds=4, time=0.05, points=6, progress=False)
    F = FiniteDPotential(spec)
    for c in ("tr_student", "q_student_student", "q_student_teacher"):
        diff = np.array([sim.per_seed[c][k] - solve_finite_d(spec, 50, time=0.05, points=6, seed=k, potential=F)[c]
                         for k in range(4)])
        mean, sem = np.abs(diff.mean(0)), diff.std(0, ddof=1) / 2
        assert np.all(mean <= 3 * sem + 1e-6), (c, mean, sem)


# ------------------------------------------------------------------ 6. the moment hierarchy with the letter Σ
def test_whitened_free_moments_equal_the_wick_engine():
    """Σ given the law of a third free Wishart matrix: φ of every whitened word (S̃ = Σ^{½}SΣ^{½}, letters
    S̃_s, S̃_t, Σ) by the non-crossing / Kreweras formula equals the Wick engine's value of the same word
    written in S and Σ (each S̃ → SΣ cyclically), exactly up to rounding — words up to length 6."""
    from symattn.symbolic.freeprob import GOE, Wishart, free_moment
    from symattn.symbolic.metric import WhitenedMoments
    from symattn.symbolic.words import Alphabet
    laws = [Wishart(1, 1), GOE(0.7)]
    sigma = Wishart(2, 0.8)
    phi = WhitenedMoments(laws, lambda n: float(free_moment(((0, "S"),) * n, [sigma])))
    worst, K = 0.0, 2
    for w in Alphabet([True] * 3).words(6):
        at = [i for i, (k, _) in enumerate(w) if k < K]
        if not at:
            plain = ((K, "S"),) * len(w)
        else:
            plain = ()
            for letter in w[at[0]:] + w[:at[0]]:
                plain += (letter, (K, "S")) if letter[0] < K else ((K, "S"),)
        want = float(free_moment(plain, laws + [sigma]))
        worst = max(worst, abs(phi(w) - want) / (1 + abs(want)))
    assert worst < 1e-12


def test_whitened_free_moments_against_sampled_matrices():
    """The free start of the Σ hierarchy against the moments of simulate's whitened matrices at d = 1000 (4
    seeds averaged; O(1/d) finite size and O(d^-½) spread of the words up to length 4: within 3 %)."""
    from symattn.derivation import derive
    from symattn.initial import free_moments, sample_moments
    spec = spec_with("tied_h2_L1_small", TWO)
    system = derive(spec, 4)
    free = free_moments(spec, system.words)
    sample = np.mean([sample_moments(spec, system.words, 1000, s) for s in range(4)], axis=0)
    assert len(system.words) > 40 and any(w and w[0][0] == spec.K for w in system.words)     # Σ letters present
    assert np.all(np.abs(sample - free) <= 0.03 * (np.abs(free) + 0.01)), np.max(np.abs(sample - free))


@pytest.mark.parametrize("case", ["tied", "direct"])
def test_one_step_noise_with_features(case):
    """The hierarchy's noise terms with Σ (the preconditioned forms of kinds.tied / kinds.direct) against the
    even part of one exact preconditioned SGD step at the sampled start (tests/test_noise.py: ratio → 1 like
    1/d; measured two levels r = 3, w = ¼: tied 1.20–1.32 at d = 100, 1.11–1.18 at d = 200, 1.05–1.08 at
    d = 400; direct 1.01, 1.04)."""
    from test_noise import check_one_step_ratios, make
    kw = dict(B=4, eps=0.1) if case == "tied" else dict(student="direct", sigma=0.5, B=2, eps=0.1)
    check_one_step_ratios(case, make(**kw, features={"law": "two_level", "ratio": 3.0, "weight": 0.25}))


def test_hierarchy_with_features_follows_the_matrix_level_in_its_window():
    """Tied h2 (σ = ½), two levels r = 3, w = ¼, ε = 0: the Σ hierarchy at M = 8 inside its certified window
    (the M/M−2 gap below 1e-3 to τ ≈ 0.016) against the matrix-level flow (N = 256, 4 rotations), an
    independent computation on matrices: within the latter's <col>_err (measured |dev| ≤ 4e-4, err ≥ 7e-4)."""
    import warnings

    from symattn.derivation import derive
    from symattn.integration import integrate
    from symattn.spectral import solve_spectral
    spec = spec_with("tied_h2_L1_small", TWO)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = integrate(derive(spec, 8), time=0.015, points=4, epsilon=0.0)
    assert r.valid_until is None
    th = solve_spectral(spec, time=0.015, points=4, size=256, rotations=4, epsilon=None, spectra=False)
    moved = 0.0
    for c in ("tr_student", "q_student_student", "p_student_student", "q_student_teacher", "loss"):
        dev = np.abs(r.table[c] - th.table[c])
        moved = max(moved, abs(r.table[c][-1] - r.table[c][0]))
        assert np.all(dev <= th.table[c + "_err"] + 1e-4), (c, dev, th.table[c + "_err"])
    assert moved > 0.01                              # the window is long enough for the flow to move


def _untied_start(law=TWO):
    from symattn.derivation import derive
    from symattn.derivation import state as R
    spec = spec_with("untied_h2_L1", law)
    system = derive(spec, 4)
    y0 = R.initial(system, "free")
    return spec, system, R.rhs(system, 0, y0, R.params(system, 0.0, y0))


def test_untied_hierarchy_with_features_initial_slope_closed_form():
    """Untied h2, two levels r = 3, w = ¼, free start (m = 0, β = 0, GΩ = 1 at q1 = 1, the teacher terms zero
    by freeness): dμ(Ã)/dτ = −4 GΩ μ(ΣM̃M̃ᵀ) = −4φ(Σ²) from the whitened flows −β(ΣB + AΣ) − 2(ΣXB + AXΣ);
    without Σ −4."""
    spec, system, slope = _untied_start()
    assert slope[system.index(((0, "A"),))] == pytest.approx(-4.0 * spec.features.second_moment, rel=1e-9)
    iso, isys, islope = _untied_start('"identity"')
    assert islope[isys.index(((0, "A"),))] == pytest.approx(-4.0, rel=1e-9)


@pytest.mark.slow
def test_untied_hierarchy_with_features_starts_as_the_matrix_level():
    """The same start: the Σ hierarchy's initial slopes of trA, q1, q2 against the matrix-level flow at
    N = 1024 (4 rotations) over τ ≤ 2·10⁻⁴. Measured 0.3–0.4 %; the untied realisations scatter by up to 3 %
    at N = 512, hence 2 % (33 s)."""
    import warnings

    from symattn.spectral import solve_spectral
    spec, system, slope = _untied_start()
    h = 2e-4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        th = solve_spectral(spec, time=h, points=2, size=1024, rotations=4, epsilon=None, spectra=False,
                            error_estimate=False)
    for c, w in (("trA_student", ((0, "A"),)), ("q1_student_student", ((0, "S"), (0, "T"))),
                 ("q2_student_student", ((0, "S"), (0, "S")))):
        assert (th.table[c][1] - th.table[c][0]) / h == pytest.approx(slope[system.index(w)], rel=0.02), c


def test_matrix_level_runs_where_the_hierarchy_cannot(capsys):
    """Untied h2 with a power law a = 0.4 (φ(Σ³) = ∞): the hierarchy is refused at every truncation (it needs
    M ≥ 3), the default matrix-level theory runs (its compiled Φ does not need the words' moments)."""
    law = '{law="power",exponent=0.4}'
    code = main(["theory", "untied_h2_L1", "--method", "moments", "--time", "0.01", "--quiet", "--set",
                 f"model.feature_covariance={law}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "φ(Σ^n)" in err[0], err
    code = main(["theory", "untied_h2_L1", "--time", "0.002", "--points", "2", "--size", "16", "--quiet", "--set",
                 f"model.feature_covariance={law}"])
    out = capsys.readouterr().out
    assert code == 0 and "overlap_student_teacher" in out.splitlines()[0]
