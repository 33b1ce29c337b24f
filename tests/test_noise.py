"""SGD-noise corrections of the limit equations (docs/theory.md §7, derive/noise.py) against SGD — issue 8.

Two kinds of evidence, both at d = 100 and 200 (finite-size corrections are O(1/d)):

1. The one-step generator at the sampled initial state. One tied step is exactly
   S' = (I − 2αĜ)S(I − 2αĜ) (direct: S − αĜ), so the increment of a moment is a polynomial in α;
   its even part, (d/α)·E[(Δ(α) + Δ(−α))/2], is the second-order (noise) drift and is compared
   with the generated RHS(ε) − RHS(0) at the very same moments. This isolates the normalisation
   (factors 2, 4, the batch 1/B, C ≠ I, label noise Δ, cross terms of several students).
   Measured: ratio = 1 + c/d with c ≈ 13 (tied linear, L = 1) … 28 (L = 2, C ≠ I), limit 1.00(2).
2. Short SGD trajectories (B = 1, several ε) from each seed's initial matrices against the theory
   integrated from the same sampled moments (`init='sample'`), with and without the noise terms.

Slow (`-m slow`) versions use more seeds, d = 400 and the h2 cases whose finite-size constant is
large (≈ 200/d on the noise term, see `test_h2_noise_finite_size_slow`).
"""
from __future__ import annotations

import time as _time
import warnings

import numpy as np
import pytest

from symattn import load_spec
from symattn.derivation import derive
from symattn.derivation import state as R
from symattn.integration import integrate
from symattn.simulation import Model, draw_initial, simulate

COLS = ("tr_student", "q_student_student", "q_student_teacher")


def make(act="linear", B=1, eps=0.1, student="tied", kappa=1.0, sigma=1.0, kappa_t=0.5, sigma_t=1.0, L=1,
         cov=None, label_noise=0.0, M=4, beta=1.0, students=None, features=None):
    model = {"tokens": L, "activation": act, "label_noise": label_noise}
    if features is not None:
        model["feature_covariance"] = features
    if act == "softmax":
        model["beta"] = beta
    if cov is not None:
        model["token_covariance"] = cov
    if students is None:
        st = {"name": "student", "role": "student", "parameterization": student, "init_scale": sigma}
        if student == "tied":
            st["width"] = kappa
        students = [st]
    te = {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": kappa_t, "init_scale": sigma_t}
    return load_spec({"name": "noise_test", "model": model, "indices": [*students, te],
                      "training": {"batch_size": B, "noise_ratio": eps}, "theory": {"truncation": M}})


# ---------------------------------------------------------------------------- 1. one-step generator
def _dense(model):
    return [(s["W"] @ s["W"].T) if ix.parameterization == "tied" else np.array(s["S"])
            for s, ix in zip(model.state, model.spec.indices)]


def _ghat(model, X, xi):
    """Batch-mean symmetrised ∂𝓛/∂S_k (the matrix Ĝ_k of derive/noise.py) of every student."""
    B, L, d = X.shape
    G, _ = model.forward(X)
    _, e = model.loss_grad(G, xi)
    out = {}
    for k in model.spec.students:
        s = 0.5 * (e[..., k] + e[..., k].transpose(0, 2, 1))
        g = np.einsum("bij,bid,bje->de", s, X, X, optimize=True) / (B * np.sqrt(d))
        g[np.diag_indices(d)] -= np.einsum("bij,ij->", s, model.C) / B / np.sqrt(d)
        out[k] = g
    return out


def _moments(spec, Ss, d):
    out = {}
    for k in range(spec.K):
        out[f"tr_{spec.names[k]}"] = np.trace(Ss[k]) / d
        for l in range(k, spec.K):
            out[f"q_{spec.names[k]}_{spec.names[l]}"] = np.sum(Ss[k] * Ss[l]) / d
    return out


def one_step_noise(spec, d, seeds=4, batches=600):
    """{column: (measured even-part drift, its sem, theory noise term)} summed over seeds. With a feature
    covariance the matrices are the whitened ones, the tokens whitened, and the step preconditioned by Σ
    (tied S̃' = (I − 2αΣĜ)S̃(I − 2αĜΣ), direct S̃ − αΣĜΣ; docs/theory.md §1)."""
    system = derive(spec, 4)
    alpha, eps = spec.step_size(d), spec.epsilon(d)
    lam = np.ones(d) if spec.features.identity else spec.features.eigenvalues(d)
    meas, var, theo = {}, {}, {}
    for s in range(seeds):
        model = Model(spec, d)
        model.set_state(draw_initial(spec, d, s))          # the matrices of init="sample", seed s
        Ss = _dense(model)
        m0 = _moments(spec, Ss, d)
        rng = np.random.default_rng([s, 4242])
        even = {c: [] for c in m0}
        for _ in range(batches):
            X, xi = model.sample(rng)
            Gh = _ghat(model, X, xi)
            moved = []
            for a in (alpha, -alpha):
                new = list(Ss)
                for k, g in Gh.items():
                    if model.spec.indices[k].parameterization == "tied":
                        A = np.eye(d) - 2 * a * lam[:, None] * g
                        new[k] = A @ Ss[k] @ A.T
                    else:
                        new[k] = Ss[k] - a * lam[:, None] * g * lam[None, :]
                moved.append(_moments(spec, new, d))
            for c in m0:
                even[c].append(((moved[0][c] + moved[1][c]) / 2 - m0[c]) * d / alpha)
        y0 = R.initial(system, "sample", dim=d, seed=s)
        r = R.rhs(system, 0, y0, R.params(system, eps, y0)) - R.rhs(system, 0, y0, R.params(system, 0.0))
        for c in m0:
            parts = c.split("_")
            k = [spec.names.index(p) for p in parts[1:]]
            word = tuple((i, "S") for i in k)
            meas[c] = meas.get(c, 0.0) + np.mean(even[c]) / seeds
            var[c] = var.get(c, 0.0) + np.var(even[c]) / batches / seeds**2
            theo[c] = theo.get(c, 0.0) + r[system.index(word)] / seeds
    return {c: (meas[c], np.sqrt(var[c]), theo[c]) for c in meas}


ONE_STEP_CASES = {
    "tied_linear_B4": dict(B=4, eps=0.1),
    "direct_linear_label_noise": dict(student="direct", sigma=0.5, label_noise=0.3, B=2, eps=0.1),  # 8 seeds
    "tied_linear_L2_C": dict(L=2, cov=[[1.0, 0.4], [0.4, 1.0]], B=4, eps=0.1),
    "two_students_tied_direct_L2": dict(L=2, cov=[[1.0, -0.3], [-0.3, 0.8]], B=4, eps=0.1, students=[
        {"name": "student", "role": "student", "parameterization": "tied", "width": 1.0, "init_scale": 0.8},
        {"name": "s2", "role": "student", "parameterization": "direct", "init_scale": 0.6}]),
    "two_tied_students_label_noise": dict(B=4, eps=0.1, label_noise=0.2, students=[
        {"name": "student", "role": "student", "parameterization": "tied", "width": 1.0, "init_scale": 0.8},
        {"name": "s2", "role": "student", "parameterization": "tied", "width": 0.5, "init_scale": 0.6}]),
}


@pytest.mark.parametrize("case", list(ONE_STEP_CASES))
def test_one_step_noise_normalisation(case):
    """Even (second-order) part of the exact one-step drift / generated noise term → 1 as 1/d → 0."""
    check_one_step_ratios(case, make(**ONE_STEP_CASES[case]))


def check_one_step_ratios(label, spec):
    """Measured even part / generated noise term at d = 100 and 200 (4 seeds × 600 batches each): an O(1/d)
    excess (≈ 13/d … 30/d) shrinking with d, and its 1/d extrapolation within 3 se + 0.05 of 1, that allowance at
    most a quarter of the noise term. 0.05 bounds the O(1/d²) remainder: with 6 seeds × 600 batches the
    extrapolation came within 0.02 of 1 in every column of two cases (two tied students with label noise;
    L = 2, C ≠ I), whose 1/d excess is 0.10–0.28 at d = 100. With 3 × 150 batches (the heavy-tailed even part
    needs many) the earlier version's errors were ≈ 0.1 and its allowance 0.3–0.5."""
    seeds = 8 if label.startswith("direct") else 4        # direct: one column, cheap; 4 seeds left 3 se at 0.2
    res = {d: one_step_noise(spec, d, seeds=seeds) for d in (100, 200)}
    checked = 0
    for c, (m1, s1, t1) in res[100].items():
        if c.endswith("teacher_teacher") or c == "tr_teacher" or abs(t1) < 1e-12:
            assert abs(m1) < 1e-9 if abs(t1) < 1e-12 else True      # no noise term ⇔ none measured
            continue
        m2, s2, t2 = res[200][c]
        r1, r2 = m1 / t1, m2 / t2
        e1, e2 = s1 / abs(t1), s2 / abs(t2)
        ext, ext_err = 2 * r2 - r1, np.hypot(2 * e2, e1)
        allow = 3 * ext_err + 0.05
        print(f"{label:32s} {c:22s} ratio d=100 {r1:.3f}±{e1:.3f}  d=200 {r2:.3f}±{e2:.3f}  1/d→0 {ext:.3f}±{ext_err:.3f}"
              f"  (allowance {allow:.3f})")
        assert 0.9 < r1 < 1.5 and 0.9 < r2 < 1.25, (c, r1, r2)
        assert allow <= 0.25, (c, ext_err)
        assert abs(ext - 1.0) <= allow, (c, ext, ext_err)
        checked += 1
    assert checked >= 1


# ---------------------------------------------------------------------------- 2. SGD trajectories
def trajectories(spec, d, seeds, T, M=4, points=2, seed0=0):
    """Per observable at time T: sim − theory(ε) and sim − theory(0), per seed (sampled init)."""
    system = derive(spec, M)
    t0 = _time.time()
    sim = simulate(spec, dim=d, seeds=seeds, time=T, points=points, progress=False, workers=1, test_samples=0,
                   potential=False, seed0=seed0)
    elapsed = _time.time() - t0
    th = {0: [], 1: []}
    valid = None
    for s in range(seed0, seed0 + seeds):
        for j, eps in enumerate((0.0, spec.epsilon(d))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = integrate(system, time=T, points=points, init="sample", dim=d, seed=s, epsilon=eps,
                              check_truncation=(s == seed0 and j == 1 and M > 2))
            if s == seed0 and j == 1:
                valid = r.valid_until
            th[j].append(r.table)
    out = {}
    for c in COLS:
        x = sim.per_seed[c][:, -1]
        t_eps = np.array([t[c][-1] for t in th[1]])
        t_0 = np.array([t[c][-1] for t in th[0]])
        out[c] = {"dev_eps": x - t_eps, "dev_0": x - t_0, "noise": t_eps - t_0,
                  "change": x - sim.per_seed[c][:, 0]}
    return out, elapsed, valid


C_ALLOW = 26.0
"""The O(1/d) allowance, relative to the noise term, of a theory-vs-SGD deviation: C_ALLOW/d. Twice the measured
finite-size constant of the tied linear noise term (one-step ratio 1 + c/d with c ≈ 13, 4 seeds × 600 batches at
d = 100 and 200). Measured on the trajectories at d = 200 against the M = 8 hierarchy (three stream sets each):
q_student_student +0.08 / +0.10 / +0.12 of the noise term at ε = 0.25 (8 seeds) and +0.08 / +0.10 / +0.12 at ε = 0.1
(24 seeds), i.e. c ≈ 20; tr_student +0.05 … +0.17. (Against the M = 4 hierarchy q_student_student read −0.15 at
ε = 0.1: M = 4 is 0.0116 off the converged q_ss at τ = 0.006, a quarter of that noise term.)"""


def check_against_sgd(label, spec, T, dims=(100, 200), seeds=3, M=4, c_allow=C_ALLOW, min_miss=4.0,
                      require_miss=True):
    """Noise-corrected theory against SGD, per column, where the check can resolve the noise term ν·εT:

    - at the larger d: |sim − theory_ε| ≤ 3 sem + (c_allow/d)·|noise term| (sampling and the O(1/d) gap), asserted
      where that allowance is at most a quarter of the noise term;
    - the 1/d extrapolation of the deviation (exact theory: 0 in the limit): |ext| ≤ 3 se, asserted where 3 se is at
      most a quarter of the noise term.

    Every case asserts at least one column. The noise-free theory misses by ≈ the noise term wherever the seeds
    resolve it (``require_miss``: at least one column must)."""
    res = {}
    for d in dims:
        out, el, valid = trajectories(spec, d, seeds, T, M=M)
        # valid_until is the first output time at which M and its companion disagree: at T itself it is invalid
        assert valid is None or valid > T, f"{label}: truncation M={M} invalid from τ = {valid} ≤ {T}"
        res[d] = out
        print(f"{label} d={d} seeds={seeds} T={T} ε={spec.epsilon(d)} B={spec.batch_size} ({el:.1f} s)")
    d1, d2 = dims[0], dims[-1]
    resolved, tested = [], []
    for c in COLS:
        stats = {}
        for d in dims:
            o = res[d][c]
            n = len(o["dev_eps"])
            stats[d] = (o["dev_eps"].mean(), o["dev_eps"].std(ddof=1) / np.sqrt(n), o["dev_0"].mean(),
                        o["noise"].mean(), o["change"].mean())
        (a1, s1, z1, _n1, _ch1), (a2, s2, z2, n2, ch2) = stats[d1], stats[d2]
        x = 1.0 / np.array([d1, d2])
        ext = (a2 * x[0] - a1 * x[1]) / (x[0] - x[1])
        ext_err = np.hypot(s2 * x[0], s1 * x[1]) / (x[0] - x[1])
        ext0 = (z2 * x[0] - z1 * x[1]) / (x[0] - x[1])
        noise = abs(n2)
        if noise < 1e-12:                                   # no noise term in this column (direct: tr, q_st)
            continue
        allow2, allow_ext = 3 * s2 + c_allow / d2 * noise, 3 * ext_err
        print(f"  {c:20s} Δ(T) {ch2:+.4g}  noise term {n2:+.4g} | sim−theory_ε: d={d1} {a1:+.3g}±{s1:.2g}, "
              f"d={d2} {a2:+.3g}±{s2:.2g} (allowance {allow2 / noise:.0%} of the noise term), 1/d→0 {ext:+.3g}"
              f"±{ext_err:.2g} ({allow_ext / noise:.0%}) | sim−theory_0: d={d1} {z1:+.3g}, d={d2} {z2:+.3g}, "
              f"1/d→0 {ext0:+.3g}")
        if allow2 <= 0.25 * noise:
            assert abs(a2) <= allow2, (label, c, a2, s2, noise)
        if allow_ext <= 0.25 * noise:
            assert abs(ext) <= allow_ext, (label, c, ext, ext_err, noise)
        if min(allow2, allow_ext) <= 0.25 * noise:
            tested.append(c)
        # the noise-free theory misses, by many error bars and by about the noise term, wherever the
        # noise term is resolved by the seeds (SGD fluctuations ∝ √(εT), the noise term ∝ εT)
        if noise > min_miss * s2:
            resolved.append(c)
            assert abs(z2) > 0.5 * min_miss * s2, (label, c, z2, s2)
            assert abs(ext0) + 3 * ext_err > 0.5 * noise, (label, c, ext0, noise)
    print(f"  agreement asserted (allowance ≤ ¼ of the noise term) on {tested}; noise-free miss on {resolved}")
    assert tested, f"{label}: no column resolves the noise term within a quarter at these seeds"
    if require_miss:
        assert resolved
    return res


def test_tied_linear_L1_sgd():
    # 8 seeds resolve q_student_student's noise term (+0.123) to 3 sem ≈ 7–11 % of it at d = 200 (three stream sets);
    # M = 8: the first truncation whose companion (M − 2) agrees at τ = 0.006
    check_against_sgd("tied linear L=1 ε=0.25", make(B=1, eps=0.25), 0.006, seeds=8, M=8)


@pytest.mark.slow
def test_tied_linear_L1_sgd_small_eps_slow():
    # ε = 0.1: the noise term (q_ss +0.048) against SGD fluctuations ∝ √(εT) needs ≈ 32 seeds for a quarter
    # (24 seeds: 3 sem = 9–13 % of it, three stream sets)
    check_against_sgd("tied linear L=1 ε=0.1", make(B=1, eps=0.1), 0.006, seeds=32, M=8)


def test_direct_linear_L1_sgd():
    # direct: only q_student_student carries a noise term (ε ν, ν = 2 tr(D²) + Δ); 8 seeds: 3 sem ≈ 8–9 % of it at
    # d = 200 (three stream sets), the deviation measured 1.5–3.6 % there
    spec = make(student="direct", sigma=0.5, B=1, eps=0.25, label_noise=0.2)
    res = check_against_sgd("direct linear L=1 ε=0.25", spec, 0.01, seeds=8)
    for d in (100, 200):
        for c in ("tr_student", "q_student_teacher"):        # no noise term, no miss
            assert np.all(np.abs(res[d][c]["noise"]) < 1e-12)


def kappa_star_slopes(d, seeds, seed0=0):
    """κ = κ*, σ = σ*, ε = 0.25: SGD's excess slope of q_student_teacher over the noise-free theory from the same
    sampled start, per seed, and the noise term's slope (theory(ε) − theory(0)) / T."""
    spec = make(B=1, eps=0.25, kappa=0.5)
    T = 0.004
    out, el, valid = trajectories(spec, d, seeds, T, M=6, seed0=seed0)
    assert valid is None or valid > T
    o = out["q_student_teacher"]
    excess = o["dev_0"] / T                      # SGD's change minus the noise-free theory's, over T
    return excess, o["noise"].mean() / T, el


def test_tied_kappa_equal_initial_slope_is_noise():
    """κ = κ*, σ = σ*: the limit drift of q_student_teacher vanishes at t = 0 (free init); SGD's initial
    slope is the Itô term 4εν μ(S₁)μ(S₂) alone (2ε for this linear case). Here: the noise-free theory's
    slope is 0 at the free start, the noise term's is 2ε exactly, and SGD's excess over the noise-free
    theory is resolved (> 3 sem) at d = 100 and 200 with 16 seeds (measured 0.454 ± 0.118, 0.441 ± 0.056).
    Its size against the noise term needs ≈ 200 seeds for a quarter (``test_tied_kappa_equal_initial_slope_size_slow``); the
    normalisation of q_student_teacher's noise term is checked in the default run by the one-step
    generator (``tied_linear_B4``, same Itô term)."""
    eps = 0.25
    spec = make(B=1, eps=eps, kappa=0.5)
    system = derive(spec, 4)
    y_free = R.initial(system, "free")
    i12 = system.index(((0, "S"), (1, "S")))
    assert abs(R.rhs(system, 0, y_free, R.params(system, 0.0))[i12]) < 1e-12
    limit = R.rhs(system, 0, y_free, R.params(system, eps, y_free))[i12]
    assert abs(limit - 2 * eps) < 1e-9              # 4εν μ(S)μ(S*) with ν = 2(q11+q22−2q12) = 2, μ = 1/2
    for d in (100, 200):
        excess, noise, el = kappa_star_slopes(d, 16)
        m, s = excess.mean(), excess.std(ddof=1) / np.sqrt(len(excess))
        print(f"κ=κ* d={d}: SGD excess slope {m:+.4f}±{s:.4f}, noise term {noise:+.4f} (limit {limit:.4f}) [{el:.1f} s]")
        assert m > 3 * s                                   # nonzero: the noise drives q_12 at t = 0


@pytest.mark.slow
def test_tied_kappa_equal_initial_slope_size_slow():
    """… and its size: |excess − noise term| ≤ 3 sem + (C_ALLOW/d)·noise term at d = 200 with 200 seeds, that
    allowance ≤ ¼ of the noise term (measured with 160 seeds: excess/noise − 1 = +0.07, +0.02; 3 sem 12 %)."""
    excess, noise, el = kappa_star_slopes(200, 200)
    m, s = excess.mean(), excess.std(ddof=1) / np.sqrt(len(excess))
    allow = 3 * s + C_ALLOW / 200 * noise
    print(f"κ=κ* d=200: excess {m:+.4f}±{s:.4f}, noise term {noise:+.4f}, allowance {allow / noise:.0%} [{el:.1f} s]")
    assert allow <= 0.25 * noise
    assert abs(m - noise) <= allow


def test_tied_h2_L1_sgd():
    """h2: the noise term is large, and so is its finite-size correction (≈ +200/d relative, measured
    with the exact-in-x Itô term up to d = 800). At d = 100, 200 the SGD deviation from the noise-corrected
    theory is therefore ~1–2× the noise term but of the *same sign*, while the noise-free theory misses by
    (1 + c/d)× the noise term; the limit ν itself is checked in the slow test."""
    spec = make(act="h2", B=1, eps=0.1, sigma=0.6, sigma_t=0.6)
    T = 0.004
    for d in (100, 200):
        out, el, valid = trajectories(spec, d, 3, T, M=6)
        assert valid is None or valid > T
        for c in COLS:
            o = out[c]
            a, z, n = o["dev_eps"].mean(), o["dev_0"].mean(), o["noise"].mean()
            s = o["dev_eps"].std(ddof=1) / np.sqrt(3)
            print(f"h2 d={d} {c:20s} noise term {n:+.4g}  sim−theory_ε {a:+.4g}±{s:.2g}  sim−theory_0 {z:+.4g} [{el:.1f} s]")
            if abs(n) > 3 * s:                                      # resolved: the noise-free theory misses
                assert np.sign(z) == np.sign(n) and abs(z) > 2 * s  # in the direction of the noise term


# ---------------------------------------------------------------------------- slow versions
@pytest.mark.slow
def test_h2_noise_finite_size_slow():
    """Exact-in-x Monte Carlo of the single-sample Itô term of q_student_teacher for tied L=1 h2
    (σ = σ* = 1, κ = 1, κ* = 1/2): E[s² Tr((xxᵀ−I)S(xxᵀ−I)S*)]/d² / (ν tr S tr S*) → 1 as d → ∞.
    Measured 3.53 (d=100), 2.22 (200), 1.53 (400), 1.21 (800): (ratio − 1)·d ≈ 250 → 170."""
    spec = make(act="h2", B=64, eps=0.01)
    system = derive(spec, 2)
    ratios = {}
    for d in (400, 800):
        vals = []
        for seed in range(2):
            m = Model(spec, d)
            st = draw_initial(spec, d, seed)                 # the matrices of init="sample", seed s
            m.set_state(st)
            S, T = st[0]["W"] @ st[0]["W"].T, st[1]["W"] @ st[1]["W"].T
            trS, trT, trST, SST = np.trace(S), np.trace(T), np.sum(S * T), S @ T
            rng = np.random.default_rng(seed + 100)
            acc = []
            for _ in range(10):
                X = rng.standard_normal((2000, d))
                a, b = np.einsum("nd,nd->n", X @ S, X), np.einsum("nd,nd->n", X @ T, X)
                G = np.zeros((2000, 1, 1, 2))
                G[:, 0, 0, 0], G[:, 0, 0, 1] = (a - trS) / np.sqrt(d), (b - trT) / np.sqrt(d)
                s = m.loss_grad(G, None)[1][:, 0, 0, 0]
                acc.append(s**2 * (a * b - 2 * np.einsum("nd,nd->n", X @ SST, X) + trST) / d**2)
            y0 = R.initial(system, "sample", dim=d, seed=seed)
            nu = system.nu["nu_0_0"].value(y0[system.theta_words])
            vals.append(np.concatenate(acc).mean() / (nu * trS / d * trT / d))
        ratios[d] = float(np.mean(vals))
    ext = 2 * ratios[800] - ratios[400]
    print(f"h2 Itô ratio: d=400 {ratios[400]:.3f}, d=800 {ratios[800]:.3f}, 1/d→0 {ext:.3f}")
    assert ratios[800] < ratios[400]
    assert abs(ext - 1.0) < 0.3


@pytest.mark.slow
@pytest.mark.parametrize("eps,T", [(0.1, 0.006), (0.25, 0.006)])
def test_tied_linear_L1_sgd_slow(eps, T):
    check_against_sgd(f"tied linear L=1 ε={eps} (200, 400)", make(B=1, eps=eps), T, dims=(200, 400), seeds=8, M=8)


@pytest.mark.slow
def test_tied_softmax_L2_sgd_slow():
    """Softmax's ν is small (≈ 0.03): its noise term (q_ss +0.0018 at ε = 0.25, T = 0.008) is resolved to 3 sem
    ≈ 36–72 % by 8 seeds at d = 200 (two stream sets), so a quarter needs ≈ 256. The default run checks softmax's
    ν against Monte Carlo over Gaussian G (``test_softmax_nu_against_monte_carlo_over_gaussian_g``) and the
    noise term's L = 2, C ≠ I normalisation by the one-step generator (``tied_linear_L2_C``)."""
    check_against_sgd("tied softmax L=2 ε=0.25", make(act="softmax", L=2, B=1, eps=0.25, M=6), 0.008, seeds=256, M=6)


# ---------------------------------------------------------------------------- 3. compare --dims
def test_extrapolate_linear_in_inverse_d():
    from symattn.comparison import extrapolate
    t = np.linspace(0, 1, 5)
    tabs = {}
    for d in (50, 100, 200):
        tabs[d] = {"time": t + 1e-4 / d, "x": 2 * t + 3.0 / d, "x_sem": np.full(5, 0.01 * np.sqrt(100 / d))}
    ext = extrapolate(tabs)
    assert np.allclose(ext["x"], 2 * ext["time"], atol=1e-6)
    assert np.allclose(ext["x_slope"], 3.0, atol=1e-3)
    assert np.all(ext["x_sem"] > 0.01) and np.all(np.isfinite(ext["x_sem"]))
    two = extrapolate({100: tabs[100], 200: tabs[200]})
    # two dims: a = 2 y_200 − y_100 exactly, se = hypot(2 s_200, s_100)
    assert np.allclose(two["x_sem"], np.hypot(2 * 0.01 * np.sqrt(0.5), 0.01))
    with pytest.raises(ValueError):
        extrapolate({100: tabs[100]})


def test_compare_dims_cli(tmp_path):
    import json

    from symattn.cli import main
    spec = tmp_path / "lin.toml"
    spec.write_text('name = "lin"\n[model]\ntokens = 1\nactivation = "linear"\n'
                    '[[indices]]\nname = "student"\nrole = "student"\nparameterization = "tied"\nwidth = 1.0\n'
                    'init_scale = 0.7\n[[indices]]\nname = "teacher"\nrole = "teacher"\nparameterization = "tied"\n'
                    'width = 0.5\ninit_scale = 0.7\n[training]\nbatch_size = 8\nnoise_ratio = 0.1\n'
                    '[theory]\ntruncation = 4\n')
    out = tmp_path / "cmp"
    assert main(["compare", str(spec), "--dims", "30,60", "--seeds", "2", "--time", "0.01", "--points", "3",
                 "--out", str(out)]) == 0
    for f in ("simulation_d30.csv", "simulation_d60.csv", "extrapolated.csv", "theory.csv", "comparison.png",
              "summary.json"):
        assert (out / f).exists(), f
    summary = json.loads((out / "summary.json").read_text())
    assert summary["dims"] == [30, 60]
    ext = summary["extrapolated"]["all"]["q_student_student"]
    assert ext["max_dev_over_sem"] is not None and ext["max_abs_dev"] < 0.05
    assert main(["compare", str(spec)]) == 2                             # neither --dim nor --dims
    assert main(["compare", str(spec), "--dim", "30", "--dims", "30,60"]) == 2
    assert main(["compare", str(spec), "--dims", "30"]) == 2
    assert main(["compare", str(spec), "--dims", "30,abc"]) == 2


def test_softmax_nu_against_monte_carlo_over_gaussian_g():
    """ν = E tr(s C s C), s = sym ∂𝓛/∂G of the student (docs/theory.md §7), for the README example (tied softmax,
    L = 2) at its free initial order parameters, against plain Monte Carlo over the Gaussian law of G (4·10⁵
    draws from the mean and covariance of docs/theory.md §2, ∂𝓛/∂G from the loss's own SymPy gradient): within 2 %
    (ν is calibrated to 2e-2 relative, ``derivation.noise``) plus 4 standard errors (≈ 0.3 % here)."""
    import sympy as sp

    from symattn.derivation.noise import nu_expectations
    from symattn.derivation.potential import Potential
    from symattn.initial import initial_order_parameters
    spec = load_spec("tied_softmax_L2")
    P = Potential(spec)
    nu = nu_expectations(P)["nu_0_0"]
    theta = initial_order_parameters(spec)
    at = {s: theta[s.name] for s in P.symbols}
    G = P.loss.g_symbols
    mean = np.array([float(sp.sympify(P.gauss.mean(g)).xreplace(at)) for g in G])
    cov = np.array([[float(sp.sympify(P.gauss.cov(a, b)).xreplace(at)) for b in G] for a in G])
    w, U = np.linalg.eigh(cov)
    n = 400_000
    z = np.random.default_rng(11).standard_normal((n, len(G)))
    draws = mean + (z * np.sqrt(np.clip(w, 0, None))) @ U.T
    L = spec.tokens
    mine = [sp.Symbol(f"G_{i + 1}_{j + 1}_1", real=True) for i in range(L) for j in range(L)]
    from symattn.symbolic.loss import BETA
    grad = sp.lambdify([G], [g.xreplace({BETA: P.beta}) for g in P.loss.pathwise_gradient(mine)], modules="numpy")
    e = np.array([np.broadcast_to(v, (n,)) for v in grad(draws.T)]).reshape(L, L, n)
    s = 0.5 * (e + e.transpose(1, 0, 2))                       # the symmetric student's gradient
    C = np.asarray(spec.covariance)
    samples = np.einsum("ijn,jk,kln,li->n", s, C, s, C)       # tr(s C s C)
    mc, se = samples.mean(), samples.std() / np.sqrt(n)
    value = nu.value(np.array([theta[n_] for n_ in P.names]))
    assert abs(value - mc) <= 0.02 * abs(mc) + 4 * se, (value, mc, se)
