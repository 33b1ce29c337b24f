"""Two exact results of the paper as checks of the engines (issue #40), and the paper's units.

1. **The matrix Riccati flow with a non-identity teacher** (P App. D.3, eqs. 342–343). For L = 1, the ½-MSE
   𝓛 = ½(G₁ − G₂)², a tied student S = WWᵀ and a frozen teacher A, γ = ε = 0, the flow in package time is
   Ṡ = 4(AS + SA) − 8S² (the paper's (342) at twice its rate: Γ halved by the ½, package time = paper time/4), and
   Ẇ = 4AW − 4WWᵀW is solved by S(τ) = E W₀ [I + 8W₀ᵀK W₀]⁻¹ W₀ᵀ E with E = e^{4Aτ}, K = ∫₀^τ e^{8Av} dv (the W-form of
   (343), valid for a singular S(0)). On the matrix level's own realisation (N = 200, a Wishart teacher κ* = 1,
   student κ = 0.5) the flow equals this closed form to the integrator's tolerance; the moment hierarchy (free
   initial moments, inside its window) equals the changes of the closed form's traces at N = 1000 within three times
   their measured O(1/N) difference from N = 500.
2. **Balancedness of untied training**: UᵀU − VᵀV is conserved by the gradient flow (the gradient terms of
   d(UᵀU) and d(VᵀV) are equal), so its squared norm B = μ(AA) − 2μ(MMᵀ) + μ(BB) = ‖UᵀU − VᵀV‖²/d is constant at
   γ = 0 and decays like e^{−4γτ} with weight decay (d(UᵀU − VᵀV)/dτ = −2γ(UᵀU − VᵀV)): in the untied hierarchy, in
   the matrix-level slow phase, and in SGD at finite d up to the O(ε) drift the paper bounds in (555)–(559).
3. **Units**: learning_rate 0.005, B = 512, d = 400 is ε = αd/B = 0.00390625; one batch-mean step of α equals B
   single-sample steps of α/B in its mean (to first order in α); package time = paper tied time / 4 (the Riccati
   truncation at M = 3 is the paper's (340)–(341) at twice its rates: tests/test_equations.py).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from symattn.derivation import derive
from symattn.integration import integrate
from symattn.spec import load_spec
from symattn.spectral import initial_realisation, solve_spectral

RICCATI_WISHART = {
    "name": "riccati_wishart", "model": {"tokens": 1, "loss": "(G_1_1_1 - G_1_1_2)**2/2"},
    "indices": [{"name": "s", "role": "student", "parameterization": "tied", "width": 0.5, "init_scale": 0.8},
                {"name": "t", "role": "teacher", "parameterization": "tied", "width": 1.0, "init_scale": 0.9}],
    "training": {"batch_size": 64, "noise_ratio": 0.01, "weight_decay": 0.0}, "theory": {"truncation": 8}}


def riccati_closed_form(W0, A, tau):
    """S(τ) = E W₀ [I + 8 W₀ᵀ K W₀]⁻¹ W₀ᵀ E, E = e^{4Aτ}, K = ∫₀^τ e^{8Av} dv (module docstring), A symmetric."""
    lam, U = np.linalg.eigh(A)
    E = (U * np.exp(4 * lam * tau)) @ U.T
    k = np.where(np.abs(lam) > 1e-12, np.expm1(8 * lam * tau) / np.where(lam == 0, 1, 8 * lam), tau)
    K = (U * k) @ U.T
    M = np.eye(W0.shape[1]) + 8 * W0.T @ K @ W0
    F = E @ W0
    return F @ np.linalg.solve(M, F.T)


def _traces(spec, N, taus, seed=0):
    mats = initial_realisation(spec, N, seed)
    A = mats[1].dense(N)
    W0 = mats[0].value if mats[0].form == "factor" else np.linalg.cholesky(mats[0].dense(N) + 1e-300 * np.eye(N))
    out = {"tr_s": [], "q_s_s": [], "q_s_t": []}
    for t in taus:
        S = riccati_closed_form(W0, A, t)
        out["tr_s"].append(np.trace(S) / N)
        out["q_s_s"].append(np.sum(S * S) / N)
        out["q_s_t"].append(np.sum(S * A) / N)
    return {c: np.array(v) for c, v in out.items()}


def test_matrix_level_flow_is_the_riccati_closed_form_for_a_wishart_teacher():
    spec = load_spec(RICCATI_WISHART)
    N, T = 200, 0.3
    res = solve_spectral(spec, time=T, points=7, size=N, seed=0, error_estimate=False, rtol=1e-9)
    exact = _traces(spec, N, res.time)
    for c, v in exact.items():
        assert np.allclose(res.table[c], v, rtol=1e-6, atol=1e-9), (c, res.table[c], v)
    assert res.table["p_s_t"][-1] > res.table["p_s_t"][0] + 0.05          # the student learns: a real test


def test_hierarchy_is_the_riccati_closed_form_inside_its_window():
    spec = load_spec(RICCATI_WISHART)
    T = 0.02
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hier = integrate(derive(spec, 8), time=T, points=5, epsilon=0.0)
    assert hier.valid_until is None and hier.diverged_at is None              # inside the window
    big, half = _traces(spec, 1000, hier.table["time"]), _traces(spec, 500, hier.table["time"])
    for c in ("tr_s", "q_s_s", "q_s_t"):        # the changes from τ = 0: the realisation's O(1/N) offset cancels
        h, e, e2 = (x[c] - x[c][0] for x in (hier.table, big, half))
        allowance = 3 * np.abs(e - e2) + 1e-6 * np.abs(e).max()
        assert np.all(np.abs(h - e) <= allowance), (c, h, e, allowance)
        if c == "q_s_t":                                           # the overlap moves: a real test
            assert np.abs(h).max() > 10 * allowance.max(), (c, h, allowance)


# ------------------------------------------------------------------------------------------- balancedness
UNTIED = {"name": "bal", "model": {"tokens": 1, "activation": "h1"},
          "indices": [{"name": "s", "role": "student", "parameterization": "untied", "width": 1.0,
                       "init_scale": [1.0, 0.7]},
                      {"name": "t", "role": "teacher", "parameterization": "untied", "width": 1.0}],
          "training": {"batch_size": 256, "noise_ratio": 0.002, "weight_decay": 0.0}, "theory": {"truncation": 3}}


def _balance_of_words(system, Y):
    m = system.index
    return Y[:, m(((0, "A"), (0, "A")))] - 2 * Y[:, m(((0, "S"), (0, "T")))] + Y[:, m(((0, "B"), (0, "B")))]


def _balance_of(U, V):
    D = U.T @ U - V.T @ V
    return float(np.sum(D * D)) / U.shape[0]


@pytest.mark.parametrize("gamma", [0.0, 0.4])
def test_balancedness_is_conserved_or_decays_in_the_hierarchy_and_the_matrix_level(gamma):
    """B(τ) = B(0)·e^{−4γτ} (module docstring), σ_U ≠ σ_V (B(0) ≠ 0): the untied hierarchy (M = 3, its own
    lambdified equations) and the matrix-level slow phase (its flow on U, V at N = 120), to 1e-7 / 1e-6."""
    from scipy.integrate import solve_ivp

    from symattn.derivation import state as reference
    from symattn.derivation.potential import Potential
    from symattn.spectral.field import Flow
    spec = load_spec(UNTIED, settings={"training.weight_decay": gamma})
    system = derive(spec, 3)
    y0 = reference.initial(system, "free")
    f = system.rhs_function(closed=True, epsilon=0.0)
    T, times = 0.2, np.linspace(0, 0.2, 5)
    sol = solve_ivp(f, (0, T), y0, t_eval=times, rtol=1e-10, atol=1e-12)
    B = _balance_of_words(system, sol.y.T)
    assert B[0] > 0.1
    assert np.allclose(B, B[0] * np.exp(-4 * gamma * times), rtol=1e-7), B
    N = 120
    flow = Flow(spec, initial_realisation(spec, N, 0), N, Potential(spec))
    flow.relax(flow.mats)
    sol = solve_ivp(flow.rhs, (0, T), flow.pack(), t_eval=times, rtol=1e-10, atol=1e-12)
    b = np.array([_balance_of(*(p[0] for p in flow.unpack(y)[0].value)) for y in sol.y.T])
    assert np.allclose(b, b[0] * np.exp(-4 * gamma * times), rtol=1e-6), b
    moved = np.array([flow.unpack(y)[1 - 1].value[0][0, 0] for y in sol.y.T])
    assert np.ptp(moved) > 1e-3                                     # the factors do move


def test_balancedness_drift_in_sgd_is_of_order_epsilon():
    """SGD at finite d: B moves only through the second-order SGD terms, an O(ε) drift (the paper bounds the
    balance drift by C_T·dα in (555)–(559); the per-sample step is α/B, so dα/B = ε). Measured (h1, σ_U = 1,
    σ_V = 0.7, d = 60, 2 seeds, τ ≤ 0.2, B = 256): the relative change of B is ≈ 0.6ε and 1.2ε-proportional —
    it doubles with ε (ratio within [1.5, 2.7] between ε = 0.008 and 0.004), while the student's overlap with the
    teacher changes by O(1)."""
    from symattn.initial import stream
    from symattn.simulation import Model, draw_initial
    T, d = 0.2, 60
    rel = {}
    for eps in (0.004, 0.008):
        spec = load_spec(UNTIED, settings={"training.noise_ratio": eps})
        changes = []
        for seed in (0, 1):
            m = Model(spec, d)
            m.set_state(draw_initial(spec, d, seed))
            U, V = m.get_state()[0]["U"], m.get_state()[0]["V"]
            b0 = _balance_of(U, V)
            rng = stream(seed, d, 0)
            for _ in range(int(round(T * d / m.alpha))):
                m.step(*m.sample(rng))
            st = m.get_state()[0]
            changes.append(abs(_balance_of(st["U"], st["V"]) - b0) / b0)
        rel[eps] = float(np.mean(changes))
    print(rel)
    assert 1.5 <= rel[0.008] / rel[0.004] <= 2.7, rel
    assert rel[0.008] < 10 * 0.008, rel


# ------------------------------------------------------------------------------------------- units
def test_the_papers_units():
    """learning_rate 0.005, B = 512 at d = 400: ε = αd/B = 0.00390625 (the figures' "learning rate" is the step on
    the batch-mean gradient, docs/theory.md §8); one batch-mean step of α moves the student as B single-sample steps
    of α/B do, to first order in α: their difference relative to the step is O(α) (it doubles with α) and below
    1 % at α = 0.001 (d = 40, B = 8)."""
    from symattn.simulation import Model, draw_initial
    raw = load_spec("tied_h2_L1").raw
    raw = {**raw, "training": {"batch_size": 512, "learning_rate": 0.005}}
    assert load_spec(raw).epsilon(400) == 0.00390625 == 0.005 * 400 / 512
    d, B = 40, 8
    rel = {}
    for lr in (0.001, 0.002):
        batch_spec = load_spec({**raw, "training": {"batch_size": B, "learning_rate": lr}})
        single_spec = load_spec({**raw, "training": {"batch_size": 1, "learning_rate": lr / B}})
        state = draw_initial(batch_spec, d, 1)
        X, xi = Model(batch_spec, d).sample(np.random.default_rng(3))
        m = Model(batch_spec, d)
        m.set_state(state)
        m.step(X, xi)
        step_batch = m.get_state()[0]["W"] - state[0]["W"]
        m1 = Model(single_spec, d)
        m1.set_state(state)
        for b in range(B):
            m1.step(X[b:b + 1], None if xi is None else xi[b:b + 1])
        step_seq = m1.get_state()[0]["W"] - state[0]["W"]
        rel[lr] = np.linalg.norm(step_seq - step_batch) / np.linalg.norm(step_batch)
    assert rel[0.001] < 0.01 and 1.6 <= rel[0.002] / rel[0.001] <= 2.4, rel
