"""The limit dynamics against exact solutions and online SGD (issue 4, THEORY.md §3–5, §7).

Deterministic checks (exact Riccati flow, truncation honesty, weak-recovery identity,
deterministic code generation) run in the default suite. Comparisons with SGD use the
noise-corrected theory at the spec's ε and a tolerance

    |theory − SGD| ≤ k·sem + (c/d)·scale                                  (per column, max over time)

with k = 4 (seed noise, max over ~10 time points), ``scale`` the range swept by the column
over the horizon plus its typical size, and c a finite-size constant *measured* at d = 100 and
d = 200 (numbers in the docstring of each test). All runs: OPENBLAS_NUM_THREADS=1.
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
from symattn.derive import derive
from symattn.integrate import integrate

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


# ============================================================================ Riccati (THEORY §5)
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


# ============================================================================ weak recovery (THEORY §5)
@pytest.mark.parametrize("name", ["tied_h2_L1", "tied_softmax_L2"])
def test_weak_recovery_identity(name):
    """dp_12/dt|₀ = 4·(−2 Γ_12 t_1 p_22) (package time) at free initial moments, ε = 0, to 1e-10."""
    spec = load_spec(EXAMPLES / f"{name}.toml")
    system = derive(spec, 4)
    mod = system.module()
    mu = system.initial("free")
    params = system.params(0.0)
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
