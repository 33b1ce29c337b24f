"""The drift's embedded pairs (symattn.stepping) and the flow's choice between them (docs/theory.md §5, "Time
stepping"): orders and stability intervals against exact solutions, and the choice does not move the
matrix-level theory beyond the drift's tolerance."""
import warnings

import numpy as np
import pytest

import symattn.spectral as S
import symattn.spectral.stochastic as stochastic
from symattn import load_spec
from symattn.stepping import BogackiShampine, CashKarp

PAIRS = [BogackiShampine, CashKarp]


def _logistic(t, y):
    return y * (1.0 - y)


def _exact(t, y0=0.2):
    return y0 * np.exp(t) / (1.0 - y0 + y0 * np.exp(t))


@pytest.mark.parametrize("pair", PAIRS)
def test_global_order(pair):
    """Global error at t = 1 of the logistic equation against its closed form: halving h divides it by 2^order
    (measured slope within 0.25 of the order)."""
    K = np.empty((6, 1))
    errs = []
    for n in (8, 16, 32):
        y, h = np.array([0.2]), 1.0 / n
        for i in range(n):
            y, _ = pair.step(_logistic, i * h, y, h, _logistic(i * h, y), K)
        errs.append(abs(y[0] - _exact(1.0)))
    slopes = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(np.abs(slopes - pair.order) < 0.25), slopes


@pytest.mark.parametrize("pair", PAIRS)
def test_error_estimate_order(pair):
    """One step's error estimate shrinks like h^error_order (the exponent of the step-size controller), on a
    non-autonomous field whose leading error terms do not cancel (the logistic's do for the 3(2) pair)."""
    K = np.empty((6, 1))
    est = []

    def f(t, y):
        return np.sin(3.0 * t) - y ** 2 + y

    for h in (0.1, 0.05, 0.025):
        y0 = np.array([0.7])
        _, e = pair.step(f, 0.3, y0, h, f(0.3, y0), K)
        est.append(abs(e[0]))
    slopes = np.log2(np.array(est[:-1]) / np.array(est[1:]))
    assert np.all(np.abs(slopes - pair.error_order) < 0.35), slopes


@pytest.mark.parametrize("pair", PAIRS)
def test_stability_interval(pair):
    """|R(z)| ≤ 1 on [−0.99 β, 0] and > 1 at −1.02 β for y' = λy (β: the pair's stated real stability interval)."""
    K = np.empty((6, 1))

    def amp(z):
        y, _ = pair.step(lambda t, y: z * y, 0.0, np.array([1.0]), 1.0, np.array([z]), K)
        return abs(y[0])

    assert max(amp(z) for z in np.linspace(-0.99 * pair.stability, 0.0, 400)) <= 1.0 + 1e-12
    assert amp(-1.02 * pair.stability) > 1.0


@pytest.mark.parametrize("path, T", [("examples/tied_softmax_L2.toml", 0.25), ("examples/tied_h2_L1.toml", 0.5)])
def test_choice_of_pair_within_tolerance(path, T, monkeypatch):
    """The flow with the automatic choice (Bogacki–Shampine until its first rejection, then Cash–Karp) against
    Cash–Karp alone, deterministic limit (ε → 0: no noise path to differ), one realisation at N = 48: the
    columns agree to 2e-4 of their scale — the drift's tolerance (rtol 1e-4 per step) over ≈ 10–60 steps, far
    below the O(1/N) error (≈ 1e-2 at this N). The stiff tied h2 flow does switch to Cash–Karp."""
    spec = load_spec(path)
    used = []
    orig = {p: p.step for p in PAIRS}
    for p in PAIRS:
        monkeypatch.setattr(p, "step", staticmethod(lambda *a, _p=p: used.append(_p) or orig[_p](*a)))

    def solve():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return S.solve_spectral(spec, time=T, points=11, size=48, epsilon=1e-12, spectra=False,
                                    error_estimate=False).table

    auto = solve()
    auto_used = set(used)
    monkeypatch.setattr(stochastic, "DRIFTS", (CashKarp,))
    used.clear()
    ck = solve()
    assert set(used) == {CashKarp}
    for c in auto:
        scale = max(float(np.max(np.abs(ck[c]))), 1e-3)
        assert np.max(np.abs(auto[c] - ck[c])) <= 2e-4 * scale, c
    assert BogackiShampine in auto_used
    if "h2" in path:
        assert CashKarp in auto_used
