"""The derived systems as SymPy equations (``System.equations``, ``derivation.equations``).

1. For every kind (direct, general, tied, untied with slaved means), with the O(ε) noise terms, weight decay,
   a feature covariance Σ and a schedule where they apply, the SymPy right-hand sides — in coefficient symbols
   with the coefficients substituted numerically, and closed (Wick polynomials, or implemented functions
   where Φ has quadrature terms) — lambdified, equal the vector field the integrator runs: the NumPy reference
   backend and the generated module, at random states (relative 1e-9; 1e-6 where Φ or ν is a quadrature, whose
   compiled rule and Python rule agree to that).
2. The Riccati model at M = 3 (L = 1, linear, tied student and teacher, ½-MSE, γ = ε = 0) is the paper's
   (340)–(341) in package units: the paper's rates ×2 (package time = paper time / 4, Γ halved by the ½ in
   the loss; docs/theory.md §8).
3. The Jacobian of the closed equations equals central finite differences of the lambdified right-hand side.
"""
from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symattn.codegen.systems import compiled
from symattn.derivation import derive
from symattn.derivation import state as reference
from symattn.spec import load_spec

CASES = {
    # name: (spec source, settings, truncation)
    "tied_h2_noise_decay": ("tied_h2_L1_small", {"training.weight_decay": 0.3, "training.noise_ratio": 0.02}, 4),
    "direct_h2": ("direct_h2_L1_small", {"training.weight_decay": 0.2}, 2),
    "general_softmax": ("general_softmax_L2", {}, 2),
    "untied_h2_means": ("untied_h2_L1", {"training.weight_decay": 0.1, "training.noise_ratio": 0.01}, 2),
    "tied_features": ("tied_h2_L1_small", {"model.feature_covariance": {"law": "two_level", "ratio": 3.0,
                                                                         "weight": 0.5}}, 3),
    "tied_softmax": ("tied_softmax_L2_small", {}, 3),
    "tied_schedule": ("tied_h2_L1_small", {"training.schedule": {"kind": "cosine", "horizon": 1.0},
                                           "training.weight_decay": 0.1}, 3),
}


def _state(system, rng):
    """A random state: the free initial moments perturbed by 5 % (so every moment is of its natural size),
    untied means moved onto ∂Φ/∂m = 0 (where the symbolic equations, like the flow, keep them)."""
    y = reference.initial(system, "free")
    y[1:system.n_moments] *= 1 + 0.05 * rng.standard_normal(system.n_moments - 1)
    if system.mean_pos:
        th = reference.theta(system, y)
        for j, k in enumerate(system.mean_trainable):
            y[system.mean_state[k]] = th[system.mean_pos[j]]
    return y


def _expected(system, t, y, backend):
    """The vector field the integrator runs at (t, y): reference or generated right-hand side, scheduled as
    ``integration.solve`` schedules it."""
    eps = system.spec.epsilon(None)
    params = reference.params(system, eps, y)
    sched = system.spec.schedule
    s = 1.0
    if not sched.constant:
        s = float(sched(t))
        params = params.copy()
        params[reference.PARAM_GAMMA] = system.spec.weight_decay * float(sched.gamma_factor(t))
        params[reference.PARAM_EPSILON] = eps * s
    f = reference.rhs(system, t, y, params) if backend == "reference" else compiled(system).rhs(t, y, params)
    return s * np.asarray(f)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sympy_equations_are_the_integrated_vector_field(case):
    src, settings, M = CASES[case]
    system = derive(load_spec(src, settings=settings), M)
    quad = bool(system.potential.quad_terms) or any(E.quad_terms for E in system.nu.values())
    rtol = 1e-6 if quad else 1e-9
    rng = np.random.default_rng(7)
    closed = system.rhs_function(closed=True)
    symbols = system.symbols()
    eqs = system.equations(closed=False)
    names = system.word_names()
    for _ in range(2):
        y = _state(system, rng)
        t = 0.3
        ref = _expected(system, t, y, "reference")
        gen = _expected(system, t, y, "generated")
        scale = np.max(np.abs(ref)) + 1e-300
        assert np.max(np.abs(gen - ref)) <= rtol * scale
        got = closed(t, y)
        assert np.max(np.abs(got - ref)) <= rtol * scale, (case, np.abs(got - ref).max(), scale)
        # the open form: coefficient symbols substituted with the backend's own coefficients at y
        coef = reference.coefficients(system, y, reference.params(system, system.spec.epsilon(None), y))
        values = {symbols[c.name]: coef[j] for j, c in enumerate(system.coefficient_rules) if c.name in symbols}
        values[symbols.get("epsilon", sp.Symbol("epsilon"))] = 1.0          # coef already carries ε·ν
        values.update({symbols[n]: y[i] for i, n in enumerate(names) if i and n in symbols})
        if system.spec.schedule.constant:
            for i, n in enumerate(names[:system.n_moments]):
                if i:
                    v = float(sp.sympify(eqs[n]).xreplace(values))
                    assert abs(v - ref[i]) <= rtol * scale, (case, n, v, ref[i])


def test_riccati_at_M3_is_the_papers_340_341_in_package_units():
    """Paper (340)–(341), un-halved loss, paper time: μ̇₁ = −4(q₁₁ − q₁₂), q̇₁₁ = −8(μ₁₁₁ − μ₁₁₂),
    q̇₁₂ = −4(μ₁₁₂ − μ₁₂₂). The package's ½-MSE halves Γ and its time nα/d is the paper's t/4: every rate ×2."""
    system = derive("riccati", 3)
    assert system.spec.tokens == 1 and system.spec.activation in ("linear", "h1")
    sym = system.symbols()
    eqs = {n: sp.expand(e.subs({sp.Symbol("epsilon", nonnegative=True): 0, sp.Symbol("gamma", nonnegative=True): 0}))
           for n, e in system.equations(closed=True).items()}
    mu = lambda *w: sym["·".join(f"S_{x}" for x in w)]      # noqa: E731
    s, t = "student", "teacher"
    assert sp.expand(eqs[f"S_{s}"] - (-8 * (mu(s, s) - mu(s, t)))) == 0
    assert sp.expand(eqs[f"S_{s}·S_{s}"] - (-16 * (mu(s, s, s) - mu(s, s, t)))) == 0
    assert sp.expand(eqs[f"S_{s}·S_{t}"] - (-8 * (mu(s, s, t) - mu(s, t, t)))) == 0
    assert eqs[f"S_{t}"] == 0 and eqs[f"S_{t}·S_{t}"] == 0


def test_jacobian_is_the_derivative_of_the_right_hand_side():
    system = derive(load_spec("tied_h2_L1_small", settings={"training.noise_ratio": 0.02}), 3)
    fixed = {sp.Symbol("epsilon", nonnegative=True): 0.02, sp.Symbol("gamma", nonnegative=True): 0.0}
    J = system.jacobian(closed=True).xreplace(fixed)
    eqs = {n: e.xreplace(fixed) for n, e in system.equations(closed=True).items() if e != 0}
    sym = system.symbols()
    names = system.word_names()[1:system.n_moments]
    every = [sym[n] for n in names]                        # the whole state (frozen teacher words included)
    moving = [names.index(n) for n in eqs]
    f = sp.lambdify([every], list(eqs.values()))
    Jf = sp.lambdify([every], J)
    rng = np.random.default_rng(1)
    x = reference.initial(system, "free")[1:system.n_moments] * (1 + 0.05 * rng.standard_normal(len(names)))
    h = 1e-6
    fd = np.array([(np.array(f(x + h * e)) - np.array(f(x - h * e))) / (2 * h)
                   for e in np.eye(len(x))[moving]]).T
    assert np.allclose(np.array(Jf(x), dtype=float), fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


def test_closed_direct_system_in_the_csv_order_parameters():
    """The direct h2 system at M = 2 as an ODE in tr, q, p: its right-hand side at the initial columns equals the
    finite difference of an integrated trajectory's columns."""
    from symattn.integration import integrate
    system = derive(load_spec("direct_h2_L1_small", settings={"training.noise_ratio": 0.0}), 2)
    ceq = system.column_equations()
    assert set(ceq) >= {"tr_student", "q_student_student", "q_student_teacher", "p_student_teacher"}
    res = integrate(system, time=1e-4, points=3, epsilon=0.0, check_truncation=False)
    at = {sp.Symbol(c, real=True): res.table[c][0] for c in res.table if c != "time"}
    at[sp.Symbol("gamma", nonnegative=True)] = system.spec.weight_decay
    at[sp.Symbol("epsilon", nonnegative=True)] = 0.0
    for c, e in ceq.items():
        slope = (res.table[c][2] - res.table[c][0]) / res.table["time"][2]
        assert float(e.xreplace(at)) == pytest.approx(slope, rel=1e-3, abs=1e-7), c


def test_latex_and_reprs_read_like_the_paper():
    system = derive("tied_h2_L1_small", 3)
    tex = system.latex()
    assert tex.startswith(r"\begin{aligned}") and r"\frac{d\mu_{st}}{d\tau}" in tex and r"\Gamma_{st}" in tex
    assert "S_student" not in tex and "q_student" not in tex
    assert repr(system).startswith("<System tied_h2_L1_small") and "moments" in repr(system)
    assert system._repr_latex_().startswith("$$")


# ---------------------------------------------------------------------------------------------- matrix level
MATRIX_CASES = {
    "tied_factor": ("tied_h2_L1_small", {"indices.student.width": 0.5, "training.weight_decay": 0.2}),
    "tied_dense": ("tied_h2_L1_small", {}),
    "direct": ("direct_h2_L1_small", {"training.weight_decay": 0.2}),
    "general": ("general_softmax_L2", {}),
    "untied": ("untied_h2_L1", {"training.weight_decay": 0.1}),
}


def _dense(m):
    """The N×N matrix (and, for a pair, its Grams) of a size-N realisation (``symattn.matrix.Mat``, one
    realisation): the letters S or M, A, B."""
    v = m.value
    if m.form == "pair":
        U, V = v[0][0], v[1][0]
        return {"M": U @ V.T, "A": U @ U.T, "B": V @ V.T}
    if m.form == "factor":
        return {"S": v[0] @ v[0].T}
    if m.form == "diag":
        return {"S": np.diag(v[0])}
    if m.form == "scalar":
        return {"S": float(np.ravel(v)[0]) * np.eye(12)}
    return {"S": v[0]}


@pytest.mark.parametrize("case", sorted(MATRIX_CASES))
def test_matrix_flow_is_the_engines_vector_field(case):
    """``matrix_flow(spec)``'s factor drifts (dW, dS, dU and dV), evaluated on a size-12 realisation with Φ's
    gradients there, equal the matrix-level engine's vector field (``spectral.field.Flow.rhs``, each kind's
    ``matrix_velocity``) to round-off; the untied mean force from the paper's (27), (30):
    β̄ = −2 Σ_l [GΩ_kl (tr M_l B + tr A M_l) + GΨ_kl (tr M_lᵀ B + tr A M_lᵀ)]/(tr A + tr B)."""
    from symattn.derivation.matrix_flow import matrix_flow
    from symattn.derivation.potential import Potential
    from symattn.spectral import initial_realisation
    from symattn.spectral.field import Flow
    src, settings = MATRIX_CASES[case]
    spec = load_spec(src, settings=settings)
    N = 12
    flow = Flow(spec, initial_realisation(spec, N, seed=1), N, Potential(spec))
    flow.relax(flow.mats)
    y = flow.pack()
    v = flow.rhs(0.0, y)
    th, _ = flow.theta(flow.unpack(y), 0.0)
    omega, psi = (g[0] for g in flow.gradients(th, 0.0))
    mf = matrix_flow(spec)
    sym = {s.name: s for e in mf.factors.values() for s in e.free_symbols}
    values = {}
    for k in range(spec.K):
        for l in range(spec.K):
            a = _pair_name(spec, k, l)
            for name, val in ((f"Gamma_{a}", omega[k, l] + psi[k, l]), (f"GammaOmega_{a}", omega[k, l]),
                              (f"GammaPsi_{a}", psi[k, l])):
                if name in sym:
                    values[sym[name]] = val
    if "gamma" in sym:
        values[sym["gamma"]] = spec.weight_decay
    letters = [_dense(m) for m in flow.mats]
    for k in spec.students:
        if f"betabar_{_sym(spec, k)}" in sym:
            L, tr = letters, lambda X: np.trace(X) / N                     # noqa: E731
            A, B = L[k]["A"], L[k]["B"]
            Ms = [L[l].get("M", L[l].get("S")) for l in range(spec.K)]
            psi_k = 2 * sum(omega[k, l] * (tr(Ms[l] @ B) + tr(A @ Ms[l])) + psi[k, l] * (tr(Ms[l].T @ B) + tr(A @ Ms[l].T))
                            for l in range(spec.K))
            values[sym[f"betabar_{_sym(spec, k)}"]] = -psi_k / (tr(A) + tr(B))
    start = 0
    for k in spec.students:
        mat = flow.mats[k]
        parts = mat.parts()
        if mat.form == "pair":
            names = [f"U_{_sym(spec, k)}", f"V_{_sym(spec, k)}"]
            exprs = [mf.factors[n] for n in names]
        elif mat.form == "factor":
            exprs = [mf.factors[f"W_{_sym(spec, k)}"]]
        else:                                   # the dense form of S integrates dS/dτ itself
            exprs = [mf.letters[f"S_{_sym(spec, k)}"]]
        for p, e in zip(parts, exprs):
            e = e.xreplace(values)
            args = sorted(e.free_symbols, key=lambda s: s.name)
            numeric = {}
            for s in args:
                head, who = s.name.split("_")
                j = _index_of(spec, who)
                numeric[s] = {"W": flow.mats[j].value[0] if flow.mats[j].form == "factor" else None,
                              "U": flow.mats[j].value[0][0] if flow.mats[j].form == "pair" else None,
                              "V": flow.mats[j].value[1][0] if flow.mats[j].form == "pair" else None}.get(head)
                if numeric[s] is None:
                    numeric[s] = letters[j][head]
            got = sp.lambdify(args, e, modules="numpy")(*[numeric[s] for s in args])
            want = v[start:start + p[0].size].reshape(p[0].shape)
            start += p[0].size
            assert np.allclose(got, want, rtol=1e-9, atol=1e-11 * np.abs(want).max()), (case, np.abs(got - want).max())


def _sym(spec, k):
    from symattn.symbolic.names import index_symbols
    return index_symbols(spec)[k]


def _index_of(spec, symbol):
    from symattn.symbolic.names import index_symbols
    return index_symbols(spec).index(symbol)


def _pair_name(spec, k, l):
    return _sym(spec, k) + _sym(spec, l)


@pytest.mark.parametrize("src", ["tied_h2_L1_small", "direct_h2_L1", "general_softmax_L2", "untied_h2_L1"])
def test_product_rule_of_the_factor_flow_gives_the_letter_flow(src):
    """Each kind states its flow twice — on its factors (``Kind.factor_flow``) and on its letters
    (``Kind.letter_flow``, what the hierarchy is derived from); the product rule on the first, with the factor
    products written back as letters (UVᵀ = M, UUᵀ = A, …), is the second, also whitened by Σ."""
    from symattn.derivation.matrix_flow import check_product_rule
    for settings in ({}, {"model.feature_covariance": {"law": "two_level", "ratio": 3.0, "weight": 0.5}}):
        if settings and src == "untied_h2_L1":
            settings = {**settings, "theory.truncation": 3}
        diff = check_product_rule(load_spec(src, settings=settings))
        assert diff and all(d == 0 for d in diff.values()), diff


@pytest.mark.parametrize("src,closed", [("tied_h2_L1", False), ("untied_h2_L1", True), ("general_softmax_L2", True)])
def test_derive_equations_on_the_command_line(src, closed, tmp_path, capsys):
    """``symattn derive SPEC --equations json|text|latex``: the JSON's equations parse back to the System's
    (SymPy round trip), and the LaTeX document compiles with pdflatex (Debian's texlive-latex-base; CI
    installs it, elsewhere that part is skipped with the reason)."""
    import json
    import shutil
    import subprocess

    from symattn.cli import main
    flag = ["--closed"] if closed else []
    assert main(["derive", src, "--truncation", "3", "--equations", "json", "--quiet", *flag]) == 0
    got = json.loads(capsys.readouterr().out)
    system = derive(src, 3)
    want = system.equations(closed=closed)
    assert got["closed"] is closed and set(got["equations"]) == set(want)
    if not closed or not system.potential.quad_terms:
        loc = {str(s): s for s in system.symbols().values()}
        for n, text in got["equations"].items():
            assert sp.expand(sp.sympify(text, locals=loc) - want[n]) == 0, n
    assert main(["derive", src, "--truncation", "3", "--equations", "text", "--quiet", *flag]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# ") and "/dtau = " in text
    assert main(["derive", src, "--truncation", "3", "--equations", "latex", "--quiet", *flag]) == 0
    tex = capsys.readouterr().out
    assert tex.startswith(r"\documentclass") and r"\begin{align*}" in tex
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (apt-get install texlive-latex-base): the LaTeX was not compiled")
    (tmp_path / "system.tex").write_text(tex)
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "system.tex"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0 and (tmp_path / "system.pdf").stat().st_size > 0, run.stdout[-2000:]
