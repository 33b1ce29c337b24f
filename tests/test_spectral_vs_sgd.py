"""The all-time spectral solver against online SGD and the moment hierarchy (issue 6, "beyond truncation").

Cases: tied L=1 h2 (student κ=1, teacher κ*=0.5) and tied L=2 softmax (β=1), docs/theory.md §5/§8.

* Curves: the matrix-level flow with its O(ε) SGD-noise terms against ``simulate`` over the whole horizon, which
  reaches far beyond the moment hierarchy's window (h2: M=4 diverges at t ≈ 0.0066; softmax: M=6 vs M=4 disagree
  from t ≈ 0.1): each seed paired with the flow from its own matrices, the mean difference at two dimensions
  extrapolated linearly in 1/d, the intercept within 4 of its standard errors (an allowance derived from the
  seeds' sampling error alone, at most a quarter of each tested column's change; ``tests/agreement.py``).
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

# Cases: ε of the SGD runs, the matrix size of the free-start reference solution, the dimensions and seeds.
CASES = {
    "h2": dict(file="tied_h2_L1.toml", eps=0.002, size=200,
               default=dict(dims=(50, 100), seeds=(4, 4), time=0.06, points=13),
               slow=dict(dims=(100, 200), seeds=(4, 4), time=0.1, points=21, size=400)),
    "softmax": dict(file="tied_softmax_L2.toml", eps=0.01, size=200,
                    default=dict(dims=(50, 100), seeds=(4, 4), time=0.3, points=7),
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
        res.per_seed["loss"] = per
        res.table["loss"] = per.mean(0)
        res.table["loss_sem"] = per.std(0, ddof=1) / math.sqrt(seeds)
        _CACHE[key] = res
    return _CACHE[key]


def _spectral(case, T, points, size):
    key = ("spectral", case, T, points, size)
    if key not in _CACHE:
        _CACHE[key] = solve_spectral(load_spec(_raw(case)), time=T, points=points, size=size, potential=_potential(case))
    return _CACHE[key]


def _settings(case, slow):
    c = CASES[case]
    s = dict(c["slow" if slow else "default"])
    s.setdefault("size", c["size"])
    return c, s


def _fine_points(points, factor=5):
    """A spectral grid that contains the simulation's measurement grid."""
    return factor * (points - 1) + 1


def _check_curves(case, slow):
    """The matrix-level flow (with its O(ε) noise) against SGD over the whole horizon, each seed paired with the flow
    from its own matrices (N = d), at two dimensions; the mean difference extrapolated in 1/d must vanish within 4
    standard errors of the intercept, an allowance at most a quarter of each tested column's change
    (``tests/agreement.py``)."""
    from agreement import check, paired_differences
    c, s = _settings(case, slow)
    spec = load_spec(_raw(case))
    cols = ["tr_student", "q_student_student", "q_student_teacher", "p_student_teacher", "loss"]
    diffs, change = {}, {}
    for d, seeds in zip(s["dims"], s["seeds"]):
        sim = _sim(case, d, seeds, s["time"], s["points"])
        theories = [solve_spectral(load_spec(spec), size=d, seed=k, init="sample", time=s["time"],
                                   points=_fine_points(s["points"]), epsilon=c["eps"], noise_realisations=4,
                                   noise_antithetic=True, spectra=False, potential=_potential(case)).table
                    for k in range(seeds)]
        diffs[d] = paired_differences(sim, theories, cols)
        change = {col: float(np.ptp(np.mean([th[col] for th in theories], axis=0))) for col in cols}
    report = check(diffs, change)
    print(f"\n[{case}] ε={c['eps']}, horizon {s['time']}, d = {s['dims']}: " +
          ", ".join(f"{col}: gap {r['gap']:.2e} ≤ {r['allowance']:.2e} (change {r['change']:.3f}"
                    f"{'' if r['tested'] else ', untested'})" for col, r in report.items()))
    assert report["p_student_teacher"]["tested"] and report["q_student_teacher"]["tested"]


def _check_hierarchy(case, slow):
    """The hierarchy reports a finite window inside the horizon; inside it, spectral ≈ hierarchy."""
    c, s = _settings(case, slow)
    spec = load_spec(_raw(case))
    system = derive_symmetric(load_spec(spec), None, potential=_potential(case))
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


# The Wasserstein-1 distance between SGD's pooled eigenvalues and the predicted ones, at the larger d. Eigenvalues
# are rigid, so W1 of a sample from its own law is O(1/d) (measured at τ = 0: 0.0256 at d = 50, 0.0111 at d = 100) —
# far below what the i.i.d. KS critical value allows. Allowance: 2·W1(τ = 0) (the resolution, measured in the same
# run) + 1.5·(G/d)·W1(pred(τ), pred(0)) (a finite-size excess relative to the spectrum's own movement: measured at
# d = 50 / 100 0.14 / 0.11 of it for h2 — not yet O(1/d) during its escape, G = 11 — and none for softmax, G = 1);
# checked at the picks where the spectrum moved by ≥ 10 resolutions, and asserted ≤ a quarter of the movement.
W1_G = {"h2": 11.0, "softmax": 1.0}


def _check_spectra(case, slow, tmp_path):
    from scipy.stats import wasserstein_distance
    c, s = _settings(case, slow)
    sp = _spectral(case, s["time"], _fine_points(s["points"]), s["size"])
    out = []
    d, seeds = max(s["dims"]), s["seeds"][list(s["dims"]).index(max(s["dims"]))]
    sim = _sim(case, d, seeds, s["time"], s["points"])
    t = sim.table["time"]
    ev, pred0 = sim.spectra["student"], sp.spectra["student"][0]
    resolution = wasserstein_distance(ev[:, 0, :].ravel(), pred0)
    checked = 0
    for j in range(1, s["points"]):
        pred = sp.spectra["student"][int(np.argmin(np.abs(sp.time - t[j])))]
        moved = wasserstein_distance(pred, pred0)
        if moved < 10 * resolution:
            continue
        allow = 2 * resolution + 1.5 * W1_G[case] / d * moved
        w1 = wasserstein_distance(ev[:, j, :].ravel(), pred)
        print(f"  [{case}] d={d} t={t[j]:.3g}: W1 {w1:.4f}, allowance {allow:.4f}, the spectrum moved {moved:.4f}")
        assert allow <= moved / 4, (case, float(t[j]), allow, moved)
        assert w1 <= allow, (case, float(t[j]), w1, allow)
        checked += 1
    assert checked >= 1, (case, resolution)
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
def test_spectral_matches_sgd_over_whole_curve():
    """softmax (σ = 1, ε = 0.01, τ ≤ 0.3) at d = 50 and 100. Tied h2 (σ = 1) escapes its uninformative start within
    the horizon, and there the d = 50 / 100 gap is not yet O(1/d) (p_st: 0.101 and 0.072 at τ = 0.06, ratio 1.4): its
    whole-curve check runs at d = 100 and 200 in the slow suite (``test_spectral_matches_sgd_d200``); the default
    run keeps its independent checks — the flow against an independent RK4 of the matrix ODE
    (tests/test_spectral.py) and the initial drift of SGD against the population flow (tests/test_simulate.py)."""
    _check_curves("softmax", slow=False)


@pytest.mark.parametrize("case", ["h2", "softmax"])
def test_spectral_matches_hierarchy_inside_window(case):
    _check_hierarchy(case, slow=False)


@pytest.mark.parametrize("case", ["h2", "softmax"])
def test_spectra_match_sgd_eigenvalues(case, tmp_path):
    """SGD's eigenvalues against the matrix-level flow's: W1 within its derived allowance (≤ a quarter of the
    spectrum's movement; measured W1/allowance ≤ 0.64 for h2, ≤ 0.51 for softmax at d = 100), and the KS statistic
    below the i.i.d. critical value + 3/d at d = 50 and 100 (a shape check; too loose alone: 0.20 at d = 100)."""
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
