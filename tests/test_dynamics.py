"""The limit dynamics against exact solutions and online SGD (issue 4, docs/theory.md §3–5, §7).

Deterministic checks (exact Riccati flow, truncation honesty, weak-recovery identity,
deterministic code generation) run in the default suite, with one SGD setting (tied h2) at
d = 100 (`compare`, free init) and a paired d = 100 / d = 200 shrinkage check. The other settings
(tied h1, h3, softmax L = 2, direct h1, h2; the paper's Figs. 1, 2 at CPU scale, uninformative
starts) are ``@pytest.mark.slow``. Comparisons with SGD use the noise-corrected theory at the
spec's ε (0.005 tied, 0.01 direct; B = 64) and the tolerance, per column and time point,

    |SGD − theory| ≤ K_SEM·sem + C_MARGIN·c/d,      K_SEM = 4, C_MARGIN = 1.5,

where c (absolute units of the column, i.e. the "scale" is folded into c) is the finite-size
gap ·d *measured* at d = 100 and d = 200 (tables next to each setting; where the gap is resolved
it is the same at both d, i.e. O(1/d), and it does not depend on ε). "Paired" runs start the
theory from each seed's own initial moments (init='sample'), which removes the O(1/d) scatter
of the initial state and exposes the systematic gap; the free-init runs are what `compare` does.
All runs: OPENBLAS_NUM_THREADS=1.
"""
from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from symattn import load_spec
from symattn.codegen.systems import compiled
from symattn.derivation import derive
from symattn.derivation import state as R
from symattn.integration import integrate
from symattn.simulation import simulate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def spec_of(name, **changes):
    """Load examples/<name>.toml with dotted-path changes, e.g. {"indices.0.init_scale": 0.5}."""
    import tomllib
    raw = tomllib.loads((EXAMPLES / f"{name}.toml").read_text())
    for path, value in changes.items():
        node = raw
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[int(keys[-1]) if isinstance(node, list) else keys[-1]] = value
    return load_spec(raw)


def quiet_integrate(system, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return integrate(system, **kw)


# ============================================================================ Riccati (docs/theory.md §5)
def mp_riccati_trace(tau, kappa, sigma2, c=1.0, nodes=4000):
    """Exact tr_student(τ) = ∫ cλ/(λ + (c−λ)e^{−8cτ}) dρ_MP(λ) (package time, ½-MSE).

    ρ_MP: free Poisson, rate κ, jump σ² — atom 1−κ at 0 (contributes 0) and density
    √((b−x)(x−a))/(2πσ²x) on [a, b] = σ²(1 ∓ √κ)². With x = m + r cos θ the density times dx is
    r² sin²θ/(2πσ²x) dθ, a smooth periodic integrand: the midpoint rule converges spectrally.
    """
    a, b = sigma2 * (1 - np.sqrt(kappa)) ** 2, sigma2 * (1 + np.sqrt(kappa)) ** 2
    th = (np.arange(nodes) + 0.5) * np.pi / nodes
    m, r = (a + b) / 2, (b - a) / 2
    x = m + r * np.cos(th)
    w = (r * np.sin(th)) ** 2 / (2 * np.pi * sigma2 * x) * (np.pi / nodes)
    tau = np.atleast_1d(np.asarray(tau, dtype=float))[:, None]
    return (w * (c * x / (x + (c - x) * np.exp(-8 * c * tau)))).sum(axis=1), w


def test_mp_quadrature_moments():
    """The quadrature reproduces the free-Poisson moments κ, κσ², κσ⁴(1+κ) and τ = 0."""
    kappa, s2 = 0.5, 0.3
    exact0, w = mp_riccati_trace([0.0], kappa, s2)
    a, b = s2 * (1 - np.sqrt(kappa)) ** 2, s2 * (1 + np.sqrt(kappa)) ** 2
    th = (np.arange(w.size) + 0.5) * np.pi / w.size
    x = (a + b) / 2 + (b - a) / 2 * np.cos(th)
    assert abs(w.sum() - kappa) < 1e-13
    assert abs((w * x).sum() - kappa * s2) < 1e-13
    assert abs((w * x * x).sum() - kappa * s2 ** 2 * (1 + kappa)) < 1e-13
    assert abs(exact0[0] - kappa * s2) < 1e-13


def test_riccati_truncations_converge_geometrically():
    """M = 4..12 against the exact MP–Riccati trace on package time [0, 0.15], ε = 0.

    Measured (2025 run): M=4 1.0e-3, M=6 5.4e-5, M=8 2.1e-6, M=10 9.5e-8, M=12 6.0e-9
    (ratio ≈ 20 per ΔM = 2).
    """
    spec = load_spec(EXAMPLES / "riccati_mp.toml")
    times = np.linspace(0.0, 0.15, 151)
    exact, _ = mp_riccati_trace(times, 0.5, 0.3)
    errors = {}
    for M in (4, 6, 8, 10, 12):
        res = quiet_integrate(derive(spec, M), time=0.15, points=151, epsilon=0.0, check_truncation=False)
        assert res.diverged_at is None
        assert np.allclose(res.table["time"], times)
        errors[M] = float(np.max(np.abs(res.table["tr_student"] - exact)))
    print("\nRiccati (κ=0.5, σ²=0.3, c=1), max |tr_M − exact| on [0, 0.15]:")
    print("| M | max error |\n|---|---|")
    for M, e in errors.items():
        print(f"| {M} | {e:.3e} |")
    assert errors[10] < 1e-6
    Ms = sorted(errors)
    for m1, m2 in zip(Ms, Ms[1:]):
        assert errors[m2] < errors[m1] / 3, errors      # geometric: measured ratio ≈ 20


def test_weight_decay_convergence_uniform_in_time_only_above_threshold():
    """Riccati with weight decay γ (σ = 1, κ = 0.5, c = 1, λ_max = (1 + √κ)² ≈ 2.91): on package
    time the decay adds −2γS, so each eigenvalue obeys λ' = 8λ(c − λ) − 2γλ = 8λ(c_γ − λ) with
    c_γ = c − γ/4 — the same logistic law as without decay (``mp_riccati_trace`` with c = c_γ).
    Above the paper's threshold γ > 4(c + λ_max) ≈ 15.7 the truncation converges uniformly on
    τ ≤ 0.5; below it (γ = 3) it does not: the error over the rows a truncation writes grows with M, and
    M = 4 and 12 leave the possible states (p_ss < 0: the integration stops there, ``integration.admissibility``).
    Measured: γ = 20: max error 5.9e-5, 3.0e-7, 2.6e-9 for M = 4, 8, 12; γ = 3: 0.056 (stopped at τ = 0.46),
    0.52, 3.9 (stopped at τ = 0.195)."""
    times = np.linspace(0.0, 0.5, 101)
    errors, reach = {}, {}
    for gamma in (20.0, 3.0):
        spec = spec_of("riccati_mp", **{"training.weight_decay": gamma, "indices.0.init_scale": 1.0})
        exact, _ = mp_riccati_trace(times, 0.5, 1.0, c=1.0 - gamma / 4)
        for M in (4, 8, 12):
            res = quiet_integrate(derive(spec, M), time=0.5, points=101, epsilon=0.0, check_truncation=False)
            n = len(res.table["time"])
            errors[gamma, M] = float(np.max(np.abs(res.table["tr_student"] - exact[:n])))
            reach[gamma, M] = float(res.table["time"][-1])
    print("\nweight decay, max |tr_M − exact| on the rows written (τ ≤ 0.5):", errors, "reached:", reach)
    assert all(reach[20.0, M] == 0.5 for M in (4, 8, 12))
    assert errors[20.0, 4] > 30 * errors[20.0, 8] > 30 * 30 * errors[20.0, 12]   # measured ratios ≈ 200, 115
    assert errors[20.0, 12] < 1e-7
    assert errors[3.0, 4] < errors[3.0, 8] < errors[3.0, 12]                    # grows with M
    assert errors[3.0, 12] > 1.0 and reach[3.0, 12] < 0.5


def test_truncation_honesty_riccati_sigma1():
    """σ = 1: the largest MP eigenvalue λ₀ = (1 + √0.5)² > c, radius R = ln(λ₀/(λ₀−c))/8 ≈ 0.0525.

    The M vs M−2 check must flag the truncation within a factor 2 of R (measured at gap_tol 1e-3:
    M=6 0.008, M=8 0.018, M=10 0.025, M=12 0.0305, M=14 0.0345 — increasing in M, below R).
    """
    spec = spec_of("riccati_mp", **{"indices.0.init_scale": 1.0})
    lam0 = (1 + np.sqrt(0.5)) ** 2
    radius = np.log(lam0 / (lam0 - 1.0)) / 8.0
    res = quiet_integrate(derive(spec, 12), time=0.1, points=201, epsilon=0.0)
    assert res.valid_until is not None
    print(f"\nRiccati σ=1: valid_until(M=12) = {res.valid_until:.4g}, radius = {radius:.4g}")
    assert radius / 2 <= res.valid_until <= 2 * radius
    # the exact flow is smooth there: the truncation (not the flow) is what fails
    exact, _ = mp_riccati_trace(res.table["time"], 0.5, 1.0)
    t = res.table["time"]
    ok = t < res.valid_until
    assert np.max(np.abs(res.table["tr_student"][ok] - exact[ok])) < 1e-2


def test_no_rows_after_divergence():
    """Tied h2, σ = 1 (Γ·λ_max large): the M = 4 hierarchy blows up near package time 0.004.

    No row at or after ``diverged_at`` may be written, and every written value is finite.
    """
    spec = load_spec(EXAMPLES / "tied_h2_L1.toml")
    res = quiet_integrate(derive(spec, 4), time=0.05, points=51, check_truncation=False)
    assert res.diverged_at is not None and 0.001 < res.diverged_at < 0.01
    t = res.table["time"]
    assert t[-1] <= res.diverged_at
    assert len(t) < 51
    for col, v in res.table.items():
        assert np.all(np.isfinite(v)), col
        assert len(v) == len(t)


# ============================================================================ weak recovery (docs/theory.md §5)
@pytest.mark.parametrize("name", ["tied_h2_L1", "tied_softmax_L2"])
def test_weak_recovery_identity(name):
    """dp_12/dt|₀ = 4·(−2 Γ_12 t_1 p_22) (package time) at free initial moments, ε = 0, to 1e-10."""
    spec = load_spec(EXAMPLES / f"{name}.toml")
    system = derive(spec, 4)
    mod = compiled(system)
    mu = R.initial(system, "free")
    params = R.params(system, 0.0)
    dmu = np.asarray(mod.rhs(0.0, mu, params))
    i1, i2 = system.index(((0, "S"),)), system.index(((1, "S"),))
    i12, i22 = system.index(((0, "S"), (1, "S"))), system.index(((1, "S"), (1, "S")))
    t1, t2 = mu[i1], mu[i2]
    assert abs(mu[i12] - t1 * t2) < 1e-14                       # uninformative: p_12 = 0
    p22 = mu[i22] - t2 ** 2
    dp12 = dmu[i12] - dmu[i1] * t2 - t1 * dmu[i2]
    coef = np.asarray(mod.coefficients(mu, params))
    gamma12 = coef[system.coef_names.index("Gamma_0_1")]
    # the generated Γ is the potential's Γ (quadrature for softmax: to its accuracy)
    theta = mu[system.theta_words]
    ref = system.potential.gradients(theta).gamma[0, 1]
    assert abs(gamma12 - ref) <= 1e-6 * (1 + abs(ref))
    assert gamma12 != 0.0
    expected = 4.0 * (-2.0 * gamma12 * t1 * p22)
    print(f"\n{name}: dp12/dt|0 = {dp12:.12g}, 4·(−2Γ12 t1 p22) = {expected:.12g}")
    assert abs(dp12 - expected) <= 1e-10 * max(1.0, abs(expected))


# ============================================================================ determinism
def test_derive_is_deterministic(tmp_path):
    """``symattn derive`` twice (separate processes, different hash seeds) → identical bytes."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"m{seed}.py"
        env = dict(os.environ, PYTHONHASHSEED=seed, OPENBLAS_NUM_THREADS="1")
        r = subprocess.run([sys.executable, "-m", "symattn", "derive", str(EXAMPLES / "tied_h2_L1.toml"),
                            "--truncation", "6", "--out", str(out)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    assert len(outs[0]) > 1000


# ============================================================================ theory vs SGD
def paired_run(spec, truncation, time, dim, seeds, points=11, sim=None):
    """Per seed: SGD minus the theory started from that seed's own initial moments (init='sample').

    Pairing removes the O(1/d) scatter of the initial state, so what remains is the systematic
    gap (finite d, O(ε²), truncation) with a much smaller standard error.
    Returns (sim, {column: (mean difference over seeds [points], sem [points])}).
    """
    from symattn import simulate
    system = derive(spec, truncation)
    if sim is None:
        sim = simulate(spec, dim=dim, seeds=seeds, time=time, points=points, progress=False, workers=1)
    diffs = {}
    for k in range(seeds):
        th = quiet_integrate(system, time=time, points=points, init="sample", dim=dim, seed=k,
                             check_truncation=False)
        assert len(th.table["time"]) == points, "theory must cover the horizon"
        for c, v in th.table.items():
            if c != "time" and c in sim.per_seed:
                diffs.setdefault(c, []).append(sim.per_seed[c][k] - v)
    out = {}
    for c, D in diffs.items():
        D = np.asarray(D)
        out[c] = (D.mean(axis=0), D.std(axis=0, ddof=1) / np.sqrt(seeds))
    return sim, out


def tied_h2_small():
    """Tied h2, σ = σ* = 0.5 (κ = 1, κ* = 0.5), ε = 0.005, B = 64: M = 8 converged on [0, 0.05]
    (M = 6/8/10 agree to 1e-5; the spectral solver at N = 400 agrees to 2e-5 after its t = 0 offset)."""
    return load_spec(EXAMPLES / "tied_h2_L1_small.toml")


# measured |mean(SGD − theory)|·d (paired, max over [0, 0.05]) for tied_h2_small:
#   column              d = 100 (4 seeds)   d = 200 (4 seeds)   ε = 0.0025 / 0.01 at d = 100
#   tr_student          0.233               0.238               0.227 / 0.234
#   q_student_student   0.296               0.305               0.293 / 0.292
#   q_student_teacher   0.0192              0.0186              0.0186 / 0.0175
#   p_student_teacher   0.0095              0.0109              0.0094 / 0.0113
# → the gap is O(1/d) (same c at both d) and ε-independent: a finite-size effect of the
#   population gradient (≈ 10/d relative to the change of tr and q over the horizon, in line with
#   docs/theory.md §7's "≈ 13/d"), not the O(ε) noise term (which moves tr by only 2e-5 here).
TIED_H2_C = {"tr_student": 0.24, "q_student_student": 0.31, "q_student_teacher": 0.02,
             "p_student_teacher": 0.011, "p_student_student": 0.2}
K_SEM = 4.0          # max over 11 correlated time points of a t-like statistic
C_MARGIN = 1.5       # allowance on the measured c (its seed-to-seed uncertainty is ~ 10 %)


def check_paired(res, dim, constants, label):
    rows = []
    for col, c in constants.items():
        mean, sem = res[col]
        dev = np.abs(mean)
        tol = K_SEM * sem + C_MARGIN * c / dim
        i, j = int(np.argmax(dev - tol)), int(np.argmax(dev))
        rows.append((col, dev[j], sem[j], dev[j] * dim, tol[j]))
        assert np.all(dev <= tol), (label, col, dev[i], tol[i])
    print(f"\n{label}: | column | max |SGD−theory| | sem | dev·d | tol |")
    for r in rows:
        print(f"  | {r[0]} | {r[1]:.3g} | {r[2]:.2g} | {r[3]:.3g} | {r[4]:.3g} |")
    return {r[0]: r[1] for r in rows}


def test_compare_tied_h2_d100(tmp_path):
    """`compare` (free init, noise-corrected theory at ε = 0.005, M = 8) against SGD at d = 100, 4 seeds, B = 64,
    horizon 0.05 (inside the window: no truncation warning): its outputs and the theory it ran. The agreement
    itself, with an allowance derived from the seeds' sampling error and two dimensions, is
    ``test_hierarchy_follows_sgd_paired[tied_h2_L1_small]``."""
    from symattn.comparison import compare
    spec = tied_h2_small()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        summary = compare(spec, dim=100, seeds=4, time=0.05, points=11, out=tmp_path, truncation=8,
                          progress=False, workers=1)
    assert summary["theory"]["truncation_valid_until"] is None
    assert summary["theory"]["diverged_at"] is None
    assert summary["theory"]["epsilon"] == pytest.approx(0.005)
    assert (tmp_path / "summary.json").exists() and (tmp_path / "theory.csv").exists()
    assert set(TIED_H2_C) <= set(summary["columns"])


@pytest.mark.slow
def test_tied_h2_paired_gap_shrinks_with_d():
    """(Slow; the default run's paired finite-size checks: tests/test_readme.py, the agreement tests.)
    Paired SGD − theory for tied h2 at d = 100 (4 seeds) and d = 200 (2 seeds), ε = 0.005,
    B = 64, horizon 0.05: within 4·sem + 1.5·c/d and the gap of tr, q_ss shrinks ≈ 1/d
    (measured ratio d200/d100: tr 0.51, q_ss 0.52; asserted < 0.75)."""
    spec = tied_h2_small()
    sim100, r100 = paired_run(spec, 8, 0.05, 100, 4)
    dev100 = check_paired(r100, 100, TIED_H2_C, "tied h2 d=100")
    # weak recovery from the uninformative start (Fig. 2, W-flow): the SGD increment of p_12 is
    # resolved (> 4 sem) and positive, as the theory's (driven by the PSD trace, docs/theory.md §5)
    inc = sim100.per_seed["p_student_teacher"][:, -1] - sim100.per_seed["p_student_teacher"][:, 0]
    th = quiet_integrate(derive(spec, 8), time=0.05, points=11, check_truncation=False).table
    print(f"  p_12 increment: SGD {inc.mean():.3g} ± {inc.std(ddof=1) / 2:.2g}, "
          f"theory {th['p_student_teacher'][-1]:.3g}")
    assert th["p_student_teacher"][-1] > 0
    assert inc.mean() > 4 * inc.std(ddof=1) / 2
    _, r200 = paired_run(spec, 8, 0.05, 200, 2)
    dev200 = check_paired(r200, 200, TIED_H2_C, "tied h2 d=200")
    for col in ("tr_student", "q_student_student"):
        ratio = dev200[col] / dev100[col]
        print(f"  {col}: dev(200)/dev(100) = {ratio:.2f}")
        assert ratio < 0.75, (col, ratio)


def free_check(spec, truncation, sim, dim, constants, label):
    """What `compare` does (free init, noise-corrected theory), on an existing simulation."""
    from symattn.comparison import deviations
    time = float(sim.table["time"][-1])
    res = quiet_integrate(derive(spec, truncation), time=time, points=101, dim=dim)
    assert res.valid_until is None and res.diverged_at is None, (label, res.valid_until, res.diverged_at)
    dev = deviations(res.table, sim.table)
    for col, c in constants.items():
        tol = K_SEM * float(np.max(sim.table[col + "_sem"])) + C_MARGIN * c / dim
        print(f"  {label} free init {col}: dev {dev[col]['max_abs_dev']:.3g}, tol {tol:.3g}")
        assert dev[col]["max_abs_dev"] <= tol, (label, col, dev[col]["max_abs_dev"], tol)


# Paired gaps, measured |mean(SGD − theory)|·d at d = 100 (3 seeds) → d = 200 (2 seeds), horizon
# 0.05 (tied) / 0.2 (direct), ε = 0.005 (tied) / 0.01 (direct), B = 64. c = the larger of the two.
SETTINGS = {
    # h1: no visible finite-d gap (|z| ≤ 2 at d = 100); c is the noise level
    #   tr 0.008→0.019, q_ss 0.009→0.033, p_ss 0.009→0.026, q_st 0.002→0.002, p_st 0.002→0.001
    "tied_h1_L1_small": (8, 0.05, False, {"tr_student": 0.02, "q_student_student": 0.033,
                                          "p_student_student": 0.026, "q_student_teacher": 0.0021,
                                          "p_student_teacher": 0.002}),
    # h3: clean O(1/d) gap, tr 0.267→0.279, q_ss 0.278→0.281, p_ss 0.155→0.154, q_st 0.055→0.056,
    #   p_st 0.022→0.021 (dev ratio d200/d100 ≈ 0.51)
    "tied_h3_L1_small": (8, 0.05, True, {"tr_student": 0.28, "q_student_student": 0.29,
                                         "p_student_student": 0.16, "q_student_teacher": 0.056,
                                         "p_student_teacher": 0.022}),
    "tied_h2_L1_small": (8, 0.05, True, TIED_H2_C),
    # softmax L = 2 (quadrature Φ, M = 6): tr 0.020→0.017, q_ss 0.030→0.026, p_ss 0.020→0.018,
    #   q_st 0.0007→0.0004, p_st 0.0017→0.0018 (ratio d200/d100 ≈ 0.43)
    "tied_softmax_L2_small": (6, 0.05, True, {"tr_student": 0.02, "q_student_student": 0.03,
                                              "p_student_student": 0.021, "q_student_teacher": 0.00075,
                                              "p_student_teacher": 0.0018}),
    # direct h1 (M = 2 closed system, horizon 0.2, ε = 0.01): no resolved gap (|z| ≲ 3);
    #   tr 0.016→0.023, q_ss 0.041→0.030, p_ss 0.041→0.028, q_st 0.0035→0.0035, p_st 0.003→0.0014;
    #   a second run at d = 200 with 3 seeds: tr 0.027, q_ss 0.023, p_ss 0.022, q_st 0.0056, p_st 0.004
    #   (c = the largest of the three). The O(ε) noise term moves q_ss by +5.4e-4 at t = 0.2 here,
    #   larger than the residual at d = 200 (1.1e-4): the noise-free limit would be off by ~4 sem.
    "direct_h1_L1_small": (2, 0.2, False, {"tr_student": 0.027, "q_student_student": 0.041,
                                           "p_student_student": 0.041, "q_student_teacher": 0.0056,
                                           "p_student_teacher": 0.004}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SETTINGS))
def test_sgd_vs_theory_two_d(name):
    """Paired and free-init (compare) agreement at d = 100 and 200; 1/d shrinkage where the gap is resolved."""
    M, T, shrinks, constants = SETTINGS[name]
    spec = load_spec(EXAMPLES / f"{name}.toml")
    devs = {}
    for d, seeds in ((100, 4), (200, 3)):
        sim, r = paired_run(spec, M, T, d, seeds)
        devs[d] = check_paired(r, d, constants, f"{name} d={d}")
        if d == 100:          # free init: seed-mean initial scatter needs ≥ 4 seeds for a usable sem
            free_check(spec, M, sim, d, constants, f"{name} d={d}")
    if shrinks:
        for col in ("tr_student", "q_student_student"):
            ratio = devs[200][col] / devs[100][col]
            print(f"  {name} {col}: dev(200)/dev(100) = {ratio:.2f}")
            assert ratio < 0.75, (name, col, ratio)


# direct h2 (docs/theory.md §4): the limit stays at p_12 = 0; SGD's seed average of |p_12| before the
# finite-d escape, measured ·d at d = 100 (4 seeds) / d = 200 (3 seeds), max over [0, 0.2]:
#   mean|p_12|·d = 0.070 (d = 100) and 0.085 (d = 200), largest at t = 0 and slowly decreasing
#   (0.070 → 0.050 at d = 100): no escape before 0.2 at these scales; the limit (0) holds to O(1/d).
DIRECT_H2_ABS_P12_C = 0.085
# paired gaps ·d, d = 100 (3 seeds) → 200 (2 seeds), ε = 0.01, B = 64: tr 0.026→0.060,
# q_ss 0.41→0.47 and p_ss 0.41→0.47 (O(1/d): resolved, z > 20), q_st 0.006→0.005
DIRECT_H2_C = {"tr_student": 0.06, "q_student_student": 0.48, "p_student_student": 0.48,
               "q_student_teacher": 0.006}


def direct_h2_check(dim, seeds, time=0.2):
    spec = load_spec(EXAMPLES / "direct_h2_L1_small.toml")
    th = quiet_integrate(derive(spec), time=time, points=11).table
    assert np.max(np.abs(th["p_student_teacher"])) < 1e-12          # uninformative in the limit
    assert np.max(np.abs(th["q_student_teacher"])) < 1e-12
    sim, r = paired_run(spec, 2, time, dim, seeds)
    a = np.abs(sim.per_seed["p_student_teacher"])
    m, s = a.mean(axis=0), a.std(axis=0, ddof=1) / np.sqrt(seeds)
    tol = K_SEM * s + C_MARGIN * DIRECT_H2_ABS_P12_C / dim
    print(f"\ndirect h2 d={dim}: max_t mean|p12| = {m.max():.3g} (·d = {m.max() * dim:.3g}), "
          f"sem {s[np.argmax(m)]:.2g}; mean|p12|(t)·d = {np.round(m * dim, 3).tolist()}")
    assert np.all(m <= tol), (m.max(), tol[np.argmax(m - tol)])
    dev = check_paired(r, dim, DIRECT_H2_C, f"direct h2 d={dim}")
    return m.max(), dev


@pytest.mark.slow
def test_direct_h2_uninformative_two_d():
    """Direct S-flow, h2, from a GOE start: p_12 ≡ 0 in the limit; SGD's mean |p_12| is O(1/d)
    (measured ·d nearly equal at d = 100 and 200) over package time [0, 0.2]; tr, q_ss, p_ss paired."""
    m100, _ = direct_h2_check(100, 4)
    m200, _ = direct_h2_check(200, 3)
    assert m200 < m100                # O(1/d): measured ratio 0.61


@pytest.mark.parametrize("M", [2, 3, 4, 5, 6, 7])
def test_no_truncation_writes_an_impossible_state(M, tmp_path):
    """tied h2 (σ = 1) at every truncation M = 2 … 7 beyond its window: the run stops where the truncated moments
    stop being moments of real matrices (p_ss < 0, a non-Gram q: then Φ of the squared loss would be negative) or
    blow up, says so with the time, and writes no row with a negative loss, p_ss or q_ss; every M gets a window
    (M − 2, M − 1 or M + 1 as companion, ``integration.companion_truncation``). Before, M = 3 integrated for 625 s
    and wrote p_student_student = −91 366 and loss = −1714 with exit 0."""
    from symattn.cli import main
    from symattn.integration import read_csv
    out = tmp_path / "th.csv"
    assert main(["theory", "tied_h2_L1", "--method", "moments", "--truncation", str(M), "--time", "0.2",
                 "--points", "41", "--out", str(out), "--quiet"]) == 0
    tab = read_csv(out)
    assert len(tab["time"]) >= 1
    for c in ("loss", "p_student_student", "q_student_student", "p_teacher_teacher"):
        assert np.all(tab[c] >= -1e-9), (M, c, tab[c].min())
    res_gap = tab.get("truncation_gap")
    assert res_gap is not None


@pytest.mark.parametrize("src,M,T,moving", [
    ("tied_h3_L1_small", 8, 0.05, ("p_student_teacher", "loss")),
    # h2 from a free start: p_st (the overlap of the odd part) barely moves by τ = 0.05; q_st does
    ("tied_h2_L1_small", 8, 0.05, ("q_student_teacher", "loss")),
])
def test_hierarchy_follows_sgd_paired(src, M, T, moving):
    """The truncated hierarchy (h3 and h2, M = 8, inside its window) against SGD, each seed paired with the hierarchy from
    its own matrices (with the O(ε) terms), at d = 50 and 100 with 4 seeds: the mean difference extrapolated in 1/d
    vanishes within 4 standard errors of the intercept on every column whose change is at least 4 times that
    allowance (``tests/agreement.py``)."""
    from agreement import check, paired_differences
    spec = load_spec(src)
    system = derive(spec, M)
    cols = ["tr_student", "q_student_student", "q_student_teacher", "p_student_teacher", "loss"]
    diffs, change = {}, {}
    for d in (50, 100):
        sim = simulate(spec, dim=d, seeds=4, time=T, points=6, progress=False, test_samples=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runs = [integrate(system, time=T, points=11, init="sample", dim=d, seed=s) for s in range(4)]
        assert all(r.valid_until is None and r.diverged_at is None for r in runs)      # inside the window
        diffs[d] = paired_differences(sim, [r.table for r in runs], cols)
        change = {c: float(np.ptp(np.mean([r.table[c] for r in runs], axis=0))) for c in cols}
    report = check(diffs, change)
    print(report)
    assert all(report[c]["tested"] for c in moving), report      # the overlap that moves is among the tested
