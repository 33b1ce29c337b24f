"""Theory against online SGD with an allowance derived from the sampling error alone (tests that import this).

Each SGD seed is paired with the theory started from that seed's own initial matrices (``init="sample"``), so the
seed-to-seed spread of the initial state cancels in the difference δ_s(t) = SGD_s(t) − theory_s(t). What remains
is (i) the SGD sampling noise, whose standard error SE_d(t) the seeds measure, and (ii) the finite-d gap, O(1/d):
the theory is the d → ∞ limit. With two or more dimensions the mean difference is fitted as a + b/d at each
time (weights 1/SE²); the intercept a — the d → ∞ gap between SGD and the theory — must vanish within
``z`` of its standard error, and that allowance must be at most a quarter of the column's change over the
horizon (otherwise the check could not fail on the column's dynamics, and the column is reported as untested).
"""
from __future__ import annotations

import numpy as np


def paired_differences(sim, theories, cols) -> dict:
    """column → (mean over seeds of SGD − theory on the simulation's times, its standard error); ``theories`` one
    table per seed (the theory from that seed's matrices)."""
    t = np.asarray(sim.table["time"])
    out = {}
    for c in cols:
        D = np.array([sim.per_seed[c][s] - np.interp(t, th["time"], th[c]) for s, th in enumerate(theories)])
        out[c] = (D.mean(0), D.std(0, ddof=1) / np.sqrt(len(D)))
    return out


def extrapolate(diffs_by_dim: dict, col: str) -> tuple:
    """(intercept a(t), its standard error, slope b(t)) of the weighted fit mean δ_d(t) = a + b/d."""
    dims = sorted(diffs_by_dim)
    x = 1.0 / np.array(dims, dtype=float)
    X = np.column_stack([np.ones_like(x), x])
    means = np.array([diffs_by_dim[d][col][0] for d in dims])
    ses = np.array([diffs_by_dim[d][col][1] for d in dims])
    a, se, b = (np.empty(means.shape[1]) for _ in range(3))
    for j in range(means.shape[1]):
        s = ses[:, j]
        W = 1.0 / s**2 if np.all(s > 1e-14) else np.ones_like(s)      # at t = 0 every difference is 0
        A = X.T @ (W[:, None] * X)
        coef = np.linalg.solve(A, X.T * W)
        a[j], b[j] = coef @ means[:, j]
        se[j] = np.sqrt(np.sum((coef[0] * s) ** 2))
    return a, se, b


def check(diffs_by_dim: dict, theory_change: dict, z: float = 4.0) -> dict:
    """Per column: the report {max |a|, max allowance z·SE(a), change, tested}; raises AssertionError where the
    d → ∞ gap exceeds its allowance on a tested column (allowance ≤ change/4), or where no column is tested."""
    report = {}
    for c, change in theory_change.items():
        a, se, _ = extrapolate(diffs_by_dim, c)
        allow = z * se
        tested = bool(np.max(allow) <= change / 4)
        report[c] = {"gap": float(np.max(np.abs(a))), "allowance": float(np.max(allow)), "change": float(change),
                     "tested": tested, "within": bool(np.all(np.abs(a) <= allow))}
    bad = {c: r for c, r in report.items() if r["tested"] and not r["within"]}
    assert not bad, bad
    assert any(r["tested"] for r in report.values()), report
    return report
