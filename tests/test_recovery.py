"""The weak-recovery analysis (``symattn.recovery``, ``symattn recovery``) against independent computations:

* its velocity of the overlap equals the paper's closed formulas in package units, evaluated from Φ's gradient
  (``Potential.gradients``) and the free initial order parameters — tied (17): −8Γ_st t_s p_tt; direct: −2Γ_st q_tt;
  untied (42): −2 D_s (𝖰_t g*)·(1, 1)/norm after the fast phase — and a finite difference of the integrated theory;
* its condition is the paper's factor: direct h3 against a teacher of variance v_t has Γ_st ∝ (2σ_s² − 1)(v_t − 1)
  (Cor. 7: nothing is learnt at unit teacher variance), whose root in σ_s SymPy's solve returns;
* its signal is the paper's verdict for the Fig. 2 / Fig. 3 models (tied: yes; direct h2, untied h2: no).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import sympy as sp

from symattn.derivation import derive
from symattn.derivation import state as reference
from symattn.derivation.potential import Potential
from symattn.derivation.recovery import recovery
from symattn.initial import initial_order_parameters
from symattn.integration import integrate
from symattn.spec import load_spec


def _finite_difference(spec, column, h=1e-5, M=4):
    res = integrate(derive(spec, M), time=2 * h, points=3, epsilon=0.0, check_truncation=False)
    y = res.table[column]
    return (-3 * y[0] + 4 * y[1] - y[2]) / (2 * h)          # second-order one-sided difference


@pytest.mark.parametrize("src,settings", [("tied_h2_L1", {}), ("tied_h3_L1_small", {}), ("tied_softmax_L2_small", {}),
                                          ("tied_h2_L1", {"indices.student.init_scale": 0.6})])
def test_tied_velocity_is_the_papers_17(src, settings):
    """dp_st/dτ|₀ = −8 Γ_st(θ(0)) t_s(0) p_tt (P eq. 17, −2Γ t p in the paper's t = 4nα/d)."""
    spec = load_spec(src, settings=settings)
    r = recovery(spec)["student"]
    theta = initial_order_parameters(spec)
    G = Potential(spec).gradients(theta).gamma
    s, t = spec.indices[0], spec.indices[1]
    t_s, t_t = s.sigma**2 * s.width, t.sigma**2 * t.width
    p_tt = theta["q_teacher_teacher"] - t_t**2
    want = -8 * G[0, 1] * t_s * p_tt
    assert r.signal and r.mechanism.startswith("Cor. 3")
    assert r.velocity == pytest.approx(want, rel=1e-6)
    assert r.velocity == pytest.approx(_finite_difference(spec, "p_student_teacher"), rel=1e-3)


def test_direct_h3_condition_is_the_variance_factor_of_cor7():
    """Direct h3, teacher tied of width κ_t: Γ_st(q_st = 0) = −(3/2)(2σ_s² − 1)(2q_tt − 1), 2q_tt = Var G_t. At unit
    teacher variance (κ_t = 1, σ_t = 2^−½: 2q_tt = 1) there is no signal (Cor. 7(ii)); the student's factor vanishes
    at σ_s = 2^−½, the root SymPy finds."""
    spec = load_spec("direct_h2_L1", settings={"model.activation": "h3", "indices.teacher.width": 1.0,
                                               "indices.teacher.init_scale": 2 ** -0.5})
    r = recovery(spec)["student"]
    assert not r.signal and abs(r.velocity) < 1e-12          # 0 up to the float σ_t = 2^−½ of the spec
    sig = {str(k): k for k in r.parameters}
    sigma_s, kappa_t, sigma_t = sig["sigma_s"], sig["kappa_t"], sig["sigma_t"]
    q_tt = kappa_t * sigma_t**4 * (1 + kappa_t)
    want = -sp.Rational(3, 2) * (2 * sigma_s**2 - 1) * (2 * q_tt - 1)
    assert sp.expand(r.condition - want) == 0
    assert set(sp.solve(r.condition.subs({kappa_t: 1, sigma_t: 1}), sigma_s)) == {sp.sqrt(2) / 2}
    other = load_spec("direct_h2_L1", settings={"model.activation": "h3"})          # 2q_tt = 0.75
    off = recovery(other)["student"]
    theta = initial_order_parameters(other)
    G = Potential(other).gradients(theta).gamma
    t = other.indices[1]
    p_tt = theta["q_teacher_teacher"] - (t.width * t.sigma**2) ** 2
    assert off.signal and off.velocity == pytest.approx(-2 * G[0, 1] * p_tt, rel=1e-9)
    assert off.velocity == pytest.approx(_finite_difference(other, "p_student_teacher", M=2), rel=1e-3)


def test_direct_h2_has_no_signal_and_an_unstable_uninformative_state():
    """Direct h2: Γ_st = −4q_st vanishes at q_st = 0 (Cor. 7(ii)); the closed system's overlap grows at
    λ = ∂(dq_st/dτ)/∂q_st = −2Γ_ss + 8q_tt·2 − … read off the equations: here −12q_ss + 12q_tt (γ = 0)."""
    spec = load_spec("direct_h2_L1")
    r = recovery(spec)["student"]
    theta = initial_order_parameters(spec)
    assert not r.signal and r.velocity == 0.0
    assert r.instability == pytest.approx(12 * (theta["q_teacher_teacher"] - theta["q_student_student"]), rel=1e-12)
    assert "unstable" in r.verdict and "Θ(d² log d)" in r.verdict


@pytest.mark.parametrize("activation,signal", [("h1", True), ("h2", False)])
def test_untied_signal_after_the_fast_phase_is_cor4(activation, signal):
    """Untied (Fig. 3 models): h1 has first-order signal, h2 none (E h2′ = √2·m_t = 0 for a zero-mean teacher).
    The overlap's velocity equals (P eq. 42) with the halved convention: dq1_st + dq2_st = −2 D_s (𝖰_t g*)·(1, 1),
    D_s = t^A_s + t^B_s, divided by the overlap's norm √(2(q1_ss + q2_ss)·2(q1_tt + q2_tt))/2."""
    spec = load_spec("untied_h2_L1", settings={"model.activation": activation})
    r = recovery(spec)["student"]
    assert r.signal is signal and r.mechanism.startswith("Cor. 4")
    system = derive(spec, 3)
    y = reference.initial(system, "free")
    th = reference.theta(system, y)
    gr = system.potential.gradients(th)
    names = system.potential.names
    v = dict(zip(names, th))
    D = reference.fast_rate(system, y)[0]
    Q = np.array([[v["q1_teacher_teacher"], v["q2_teacher_teacher"]], [v["q2_teacher_teacher"], v["q1_teacher_teacher"]]])
    g = np.array([gr.omega[0, 1], gr.psi[0, 1]])
    dq = -2 * D * (Q @ g).sum()
    norm = np.sqrt(abs((v["q1_student_student"] + v["q2_student_student"]) * (v["q1_teacher_teacher"] + v["q2_teacher_teacher"])))
    assert r.velocity == pytest.approx(dq / norm, rel=1e-6, abs=1e-12)


def test_general_velocity_is_cor7_with_omega_and_psi():
    """General S (softmax, L = 2): dp_st/dτ|₀ = −2(a₊g₊ − a₋g₋), g± = Γ^Ω_st ± Γ^Ψ_st, a± = (p^Ω_tt ± p^Ψ_tt)/2 of the
    centred teacher: p_st = q_st − t_s t_t with q̇_st = −2g₊q_tt and ṫ_s = −2g₊t_t (eq. 402) at t_s(0) = 0."""
    spec = load_spec("general_softmax_L2")
    r = recovery(spec)["student"]
    theta = initial_order_parameters(spec)
    gr = Potential(spec).gradients(theta)
    t = spec.indices[1]
    p_tt = theta["q_teacher_teacher"] - (t.width * t.sigma**2) ** 2    # a symmetric teacher: a₋ = 0
    want = -2 * p_tt * (gr.omega[0, 1] + gr.psi[0, 1])
    assert r.signal and r.velocity == pytest.approx(want, rel=1e-6)
    assert r.velocity == pytest.approx(_finite_difference(spec, "p_student_teacher", M=2), rel=1e-3)


def test_recovery_on_the_command_line(capsys):
    from symattn.cli import main
    assert main(["recovery", "tied_h2_L1", "--json", "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["student"]["signal"] is True and got["student"]["velocity"] == pytest.approx(8.0)
    assert "kappa" in got["student"]["condition"] and got["student"]["mechanism"].startswith("Cor. 3")
    assert main(["recovery", "direct_h2_L1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "signal: no" in out and "λ = 6" in out
