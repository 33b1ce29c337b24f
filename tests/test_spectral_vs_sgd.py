"""The all-time spectral solver against online SGD and the moment hierarchy (issue 6, "beyond truncation").

Cases: tied L=1 h2 (student κ=1, teacher κ*=0.5) and tied L=2 softmax (β=1), docs/theory.md §5/§8.

* Curves: ``solve_spectral`` (size N, with its N vs N/2 error ``<col>_err``) against the seed means of
  ``simulate`` over the whole horizon, which reaches far beyond the moment hierarchy's window
  (h2: M=4 diverges at t ≈ 0.0066; softmax: M=6 vs M=4 disagree from t ≈ 0.1). Tolerance per
  column and time:

      |spectral − SGD| ≤ K_SEM·sem + err_N + (ALLOW_D/d + ALLOW_EPS)·(1 + |spectral|)

  ALLOW_D/d is the finite-d allowance and ALLOW_EPS the O(ε) SGD-noise effect the noise-free
  spectral flow does not contain; both were measured (numbers next to the constants) and are
  stated with the report of each run (``-s`` prints the max deviations per column).
* Inside the hierarchy's window the spectral solver and ``integrate(derive(spec))`` (ε = 0)
  agree to the solver's finite-N error.
* Spectra: Kolmogorov–Smirnov distance between the solver's eigenvalues (N ≥ d) and the SGD
  eigenvalues pooled over seeds, below the two-sample critical value at level 0.001 plus a
  finite-d allowance; the density plot is written and checked.

Default suite: d = 50 and 100, short horizons. ``-m slow``: d = 200, 4 seeds, longer horizons.
Every Potential (symbolic, ~20 s for softmax) is built once per case and shared.
"""
from __future__ import annotations

import math
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ks_2samp

from symattn.derivation.hierarchy import derive_symmetric
from symattn.derivation.potential import Potential
from symattn.integration import integrate
from symattn.simulation import simulate
from symattn.spec import load_spec
from symattn.spectral import plot_spectra, solve_spectral

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

K_SEM = 4.0
# Default suite, h2: 4 seeds at d = 100 as at d = 50 (with 2, the SEM of the t = 0 loss — the finite-d
# bias of the sampled initial state, 0.27 at d = 100 and 0.57 at d = 50 — is itself too uncertain; one
# set of streams left it at 1.1 tol). Measured with 4: loss at t = 0 was the worst cell, dev/tol 0.97
# (d = 50) and 0.98 (d = 100) under ALLOW_D = 5, 0.52 and 0.58 under the loss's own 12 (below); the
# dynamics columns stay below 0.75.
# Measured (spectral N = 200 reference; "resid" = max over time of (|dev| − 4 sem − err_N)/(1 + |v|)):
#   h2, ε = 0.002, horizon 0.06: max |dev| of p_student_student 0.142 (d = 50), 0.076 (d = 100) — it halves
#     with d, i.e. finite-d dominated (≈ 7/d); resid up to 0.064 (d = 50, loss), 0.045 (d = 100, p_ss).
#     Hence ALLOW_D = 5 (0.1 at d = 50, 0.05 at d = 100) and ALLOW_EPS = 0.01 for the ε-part that does not
#     decay with d (docs/theory.md §7: at ε = 0.002 the initial drift is still ≈ 2–3 % below the ε → 0 limit).
#   The loss of h2 (slow run, 4 seeds, N = 400) deviates most at τ ≈ 0.06: 0.167 at d = 100 and 0.091 at
#     d = 200 (16.7/d and 18.1/d: finite-d, as the q's it is made of — q_st 0.102 → 0.044 there), i.e.
#     ≈ 10/d·(1 + |v|) at v = 0.72: Φ weighs the q deviations with coefficients > 1, so the loss has its
#     own allowance ALLOW_D = 12 (5 left it at dev/tol 1.14 and 1.19).
#   softmax, ε = 0.01, horizon 0.6: max |dev| ≤ 0.02 at d = 50, resid ≤ 0.004; ALLOW_D = 1, ALLOW_EPS = 0.01.
CASES = {
    "h2": dict(file="tied_h2_L1.toml", eps=0.002, allow_d=5.0, allow_d_cols={"loss": 12.0}, allow_eps=0.01, size=200,
               default=dict(dims=(50, 100), seeds=(4, 4), time=0.06, points=13),
               slow=dict(dims=(100, 200), seeds=(4, 4), time=0.1, points=21, size=400)),
    "softmax": dict(file="tied_softmax_L2.toml", eps=0.01, allow_d=1.0, allow_eps=0.01, size=200,
                    default=dict(dims=(100,), seeds=(2,), time=0.3, points=7),
                    slow=dict(dims=(100, 200), seeds=(4, 4), time=1.0, points=11, size=400)),
}
KS_ALLOW_D = 3.0            # KS finite-d allowance ALLOW/d (measured h2: KS·d ≈ 5.5 at d=50, 6.5 at d=100)


def _raw(case):
    c = CASES[case]
    raw = tomllib.load(open(EXAMPLES / c["file"], "rb"))
    raw["training"]["noise_ratio"] = c["eps"]
    return raw


_CACHE: dict = {}


def _potential(case):
    key = ("P", case)
    if key not in _CACHE:
        _CACHE[key] = Potential(load_spec(_raw(case)))
    return _CACHE[key]


def _sim(case, d, seeds, T, points):
    key = ("sim", case, d, seeds, T, points)
    if key not in _CACHE:
        spec = load_spec(_raw(case))
        res = simulate(spec, dim=d, seeds=seeds, time=T, points=points, progress=False, test_samples=0,
                       potential=False, spectra=True)
        # Φ at the measured order parameters with the shared potential (as simulate would do)
        P = _potential(case)
        P.calibrate({n: float(res.per_seed[n][0, 0]) for n in P.names})
        per = np.array([[float(P.value({n: res.per_seed[n][s, j] for n in P.names})) for j in range(points)]
                        for s in range(seeds)])
        res.table["loss"] = per.mean(0)
        res.table["loss_sem"] = per.std(0, ddof=1) / math.sqrt(seeds)
        _CACHE[key] = res
    return _CACHE[key]


def _spectral(case, T, points, size):
    key = ("spectral", case, T, points, size)
    if key not in _CACHE:
        _CACHE[key] = solve_spectral(_raw(case), time=T, points=points, size=size, potential=_potential(case))
    return _CACHE[key]


def _settings(case, slow):
    c = CASES[case]
    s = dict(c["slow" if slow else "default"])
    s.setdefault("size", c["size"])
    return c, s


def _fine_points(points, factor=5):
    """A spectral grid that contains the simulation's measurement grid."""
    return factor * (points - 1) + 1


def _curve_deviations(case, slow):
    c, s = _settings(case, slow)
    sp = _spectral(case, s["time"], _fine_points(s["points"]), s["size"])
    th = sp.table
    report = {}
    for d, seeds in zip(s["dims"], s["seeds"]):
        sim = _sim(case, d, seeds, s["time"], s["points"]).table
        t = sim["time"]
        rows = {}
        for col in th:
            if col == "time" or col.endswith("_err") or col not in sim or col == "test_loss":
                continue
            v = np.interp(t, th["time"], th[col])
            err = np.interp(t, th["time"], th[col + "_err"])
            dev = np.abs(v - sim[col])
            allow_d = c.get("allow_d_cols", {}).get(col, c["allow_d"])
            tol = K_SEM * sim[col + "_sem"] + err + (allow_d / d + c["allow_eps"]) * (1 + np.abs(v))
            rows[col] = dict(max_dev=float(dev.max()), t_max=float(t[np.argmax(dev)]),
                             max_dev_over_tol=float(np.max(dev / tol)),
                             resid=float(np.max((dev - K_SEM * sim[col + "_sem"] - err) / (1 + np.abs(v)))))
        report[d] = rows
    return report


def _print_report(case, report, slow):
    c, s = _settings(case, slow)
    print(f"\n[{case}] ε={c['eps']}, horizon {s['time']}, spectral N={s['size']}, tol = {K_SEM}·sem + err_N + "
          f"({c['allow_d']}/d + {c['allow_eps']})(1+|v|); ALLOW_D per column {c.get('allow_d_cols', {})}")
    for d, rows in report.items():
        for col, r in rows.items():
            print(f"  d={d:4d} {col:20s} max|dev| {r['max_dev']:.4f} at t={r['t_max']:.3f}  dev/tol {r['max_dev_over_tol']:.2f}"
                  f"  resid {r['resid']:+.4f}")


def _check_curves(case, slow):
    report = _curve_deviations(case, slow)
    _print_report(case, report, slow)
    bad = [(d, col, r["max_dev_over_tol"]) for d, rows in report.items() for col, r in rows.items()
           if not r["max_dev_over_tol"] <= 1.0]
    assert not bad, f"{case}: spectral vs SGD outside tolerance: {bad}"


def _check_hierarchy(case, slow):
    """The hierarchy reports a finite window inside the horizon; inside it, spectral ≈ hierarchy."""
    c, s = _settings(case, slow)
    spec = load_spec(_raw(case))
    system = derive_symmetric(spec, None, potential=_potential(case))
    T = s["time"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        hier = integrate(system, time=T / 4, points=_fine_points(s["points"], 20) // 4 + 1, epsilon=0.0)
    ends = [x for x in (hier.diverged_at, hier.valid_until) if x is not None]
    assert ends and min(ends) < T / 4, f"{case}: the hierarchy is valid over the whole horizon; nothing beyond it is tested"
    until = min(ends)
    # common grid on [0, until]: the whole-curve spectral solution when it has enough rows there,
    # else a short dedicated solve
    sw = _spectral(case, T, _fine_points(s["points"]), s["size"]).table
    Tw, n = T, len(sw["time"])
    if np.count_nonzero(sw["time"] < until) < 5:
        Tw, n = until, 21
        sw = _spectral(case, Tw, n, s["size"]).table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        hw = integrate(system, time=Tw, points=n, epsilon=0.0, check_truncation=False).table
    m = min(len(hw["time"]) - 1, int(np.count_nonzero(sw["time"] < until)))   # rows strictly inside
    assert m >= 5
    print(f"\n[{case}] hierarchy M={system.truncation}: diverged_at={hier.diverged_at}, valid_until={hier.valid_until}; "
          f"compared on [0, {hw['time'][m - 1]:.4g}]")
    for col in ("tr_student", "q_student_student", "q_student_teacher", "p_student_teacher", "loss"):
        dev = np.abs(hw[col][:m] - sw[col][:m])
        tol = 3 * sw[col + "_err"][:m] + 2e-3 * (1 + np.abs(sw[col][:m]))
        print(f"  {col:20s} max|spectral − hierarchy| {dev.max():.2e} (N-error {sw[col + '_err'][:m].max():.1e})")
        assert np.all(dev <= tol), (case, col, float(dev.max()))
    # and the simulation still follows the spectral solver beyond `until` (whole-curve check)
    return until


def _ks_critical(n, m, level=0.001):
    return math.sqrt(-math.log(level / 2) / 2) * math.sqrt((n + m) / (n * m))


def _check_spectra(case, slow, tmp_path):
    c, s = _settings(case, slow)
    sp = _spectral(case, s["time"], _fine_points(s["points"]), s["size"])
    out = []
    for d, seeds in zip(s["dims"], s["seeds"]):
        assert s["size"] >= d
        sim = _sim(case, d, seeds, s["time"], s["points"])
        ev = sim.spectra["student"]
        assert ev.shape == (seeds, s["points"], d)
        t = sim.table["time"]
        picks = sorted({0, s["points"] // 4, s["points"] // 2, s["points"] - 1})
        sim_eigs = {}
        for j in picks:
            k = int(np.argmin(np.abs(sp.time - t[j])))
            pooled = ev[:, j, :].ravel()
            pred = sp.spectra["student"][k]
            ks = ks_2samp(pooled, pred).statistic
            thr = _ks_critical(len(pooled), len(pred)) + KS_ALLOW_D / d
            out.append((d, float(t[j]), float(ks), thr))
            sim_eigs[float(t[j])] = pooled
            assert ks < thr, (case, d, float(t[j]), ks, thr)
        if d == max(s["dims"]):
            path = plot_spectra(sp, sim_eigs=sim_eigs, path=tmp_path / f"{case}_spectra_d{d}.png")
            assert Path(path).exists() and Path(path).stat().st_size > 1000
    print(f"\n[{case}] KS(spectral N={s['size']}, SGD pooled): " +
          ", ".join(f"d={d} t={t:.3g}: {ks:.3f} (< {thr:.3f})" for d, t, ks, thr in out))


# ------------------------------------------------------------------ default suite
@pytest.mark.parametrize("case", ["h2", "softmax"])
def test_spectral_matches_sgd_over_whole_curve(case):
    _check_curves(case, slow=False)


@pytest.mark.parametrize("case", ["h2", "softmax"])
def test_spectral_matches_hierarchy_inside_window(case):
    _check_hierarchy(case, slow=False)


@pytest.mark.parametrize("case", ["h2", "softmax"])
def test_spectra_match_sgd_eigenvalues(case, tmp_path):
    _check_spectra(case, False, tmp_path)


def test_simulate_spectra_is_opt_in_and_consistent():
    spec = load_spec(_raw("h2"))
    a = simulate(spec, dim=30, seeds=2, time=0.005, points=3, progress=False, test_samples=0, potential=False,
                 workers=1)
    b = simulate(spec, dim=30, seeds=2, time=0.005, points=3, progress=False, test_samples=0, potential=False,
                 workers=1, spectra=True)
    assert a.spectra == {}
    for col in a.table:
        np.testing.assert_array_equal(a.table[col], b.table[col])
    ev = b.spectra["student"]
    assert ev.shape == (2, 3, 30) and np.all(np.diff(ev, axis=-1) >= 0)
    np.testing.assert_allclose(ev.mean(-1), b.per_seed["tr_student"], rtol=1e-12)
    np.testing.assert_allclose((ev ** 2).mean(-1), b.per_seed["q_student_student"], rtol=1e-10)


# ------------------------------------------------------------------ d = 200, 4 seeds
@pytest.mark.slow
@pytest.mark.parametrize("case", ["h2", "softmax"])
def test_spectral_matches_sgd_d200(case, tmp_path):
    _check_curves(case, slow=True)
    _check_hierarchy(case, slow=True)
    _check_spectra(case, True, tmp_path)
