"""What a notebook or terminal user sees: Φ as the Gaussian expectation it is (differentiable by Price's theorem),
readable symbols, reprs, and the command line's help and listings.

The Price check is independent of the package's quadrature: the SymPy derivative of ``Potential.expression()``
is a sum of Gaussian expectations of derivatives of the integrand, each estimated here by plain Monte Carlo
(4·10⁵ samples, standard error ≈ 2·10⁻⁴); it must equal ∂Φ/∂θ of the calibrated quadrature within 4 standard
errors.
"""
from __future__ import annotations

import io
import re
from contextlib import redirect_stdout

import pytest
import sympy as sp

import symattn
from symattn.symbolic.expectation import GaussianMean
from symattn.symbolic.loss import BETA


def test_price_derivative_of_the_expectation_is_the_gradient():
    P = symattn.potential("tied_softmax_L2_small")
    E = P.expression()
    assert E.atoms(GaussianMean) and not P.is_closed_form
    theta = {"q_student_student": 1.2, "q_student_teacher": 0.3, "q_teacher_teacher": 0.75}
    at = {s: theta[s.name] for s in P.symbols}
    at[BETA] = P.beta
    grad = dict(zip(P.names, P.value_and_gradient(theta)[1]))
    for s in P.symbols:
        total, var = 0.0, 0.0
        for term in sp.Add.make_args(sp.expand(sp.diff(E, s))):
            means = list(term.atoms(GaussianMean))
            if not means:
                total += float(term.xreplace(at))
                continue
            (g,) = means
            est, se = g.mc(at, n=400_000, seed=3)
            c = float(term.xreplace({g: sp.Integer(1)}).xreplace(at))
            total += c * est
            var += (c * se) ** 2
        assert abs(total - grad[s.name]) <= 4 * var**0.5 + 1e-9, (s, total, grad[s.name], var**0.5)


def test_a_polynomial_expectation_integrates_to_the_closed_form():
    P = symattn.potential("tied_h2_L1")
    G = sp.symbols("G_1_1_1 G_1_1_2", real=True)
    h2 = lambda z: (z**2 - 1) / sp.sqrt(2)                               # noqa: E731
    q = {n: sp.Symbol(n, real=True) for n in P.names}
    cov = [[2 * q["q_student_student"], 2 * q["q_student_teacher"]],
           [2 * q["q_student_teacher"], 2 * q["q_teacher_teacher"]]]
    E = GaussianMean((h2(G[0]) - h2(G[1])) ** 2 / 2, G, [0, 0], cov)
    assert sp.expand(E.doit() - P.closed_form) == 0
    assert sp.expand(sp.diff(E, q["q_student_teacher"]).doit() - sp.diff(P.closed_form, q["q_student_teacher"])) == 0


def test_potential_reads_like_the_paper():
    P = symattn.potential("tied_h2_L1")
    assert P.latex() == r"3 q_{ss}^{2} - 2 q_{ss} q_{tt} - 4 q_{st}^{2} + 3 q_{tt}^{2}"
    assert repr(P).startswith("<Potential of tied_h2_L1: closed form") and "0x" not in repr(P)
    assert P._repr_latex_().startswith(r"$$\Phi = ")
    vals = {"q_student_student": 2.0, "q_student_teacher": 0.5, "q_teacher_teacher": 0.75}
    assert P.value({s: vals[s.name] for s in P.symbols}) == P.value(vals)       # SymPy symbols as keys
    soft = symattn.potential("tied_softmax_L2_small")
    assert r"\mathbb{E}" in soft.latex() and "q_{ss}" in soft.latex()


def test_spec_symbol_key_names_the_index_in_the_equations():
    spec = symattn.load_spec("tied_h2_L1_small", settings={"indices.student.symbol": "w", "indices.teacher.symbol": "h1"})
    system = symattn.derive(spec, 3)
    assert r"\mu_{w}" in system.latex() and r"\Gamma_{w,h_{1}}" in system.latex()
    with pytest.raises(symattn.SpecError, match="symbol 'w' is given to two indices"):
        symattn.load_spec("tied_h2_L1_small", settings={"indices.teacher.symbol": "w", "indices.student.symbol": "w"})


def _help(argv):
    from symattn.cli import main
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(argv) == 0
    return buf.getvalue()


def test_command_line_help_and_examples_read_like_the_docs(capsys):
    from symattn.cli import build_parser, main
    top = _help(["--help"])
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:
        assert name in top, name
    assert "``" not in top
    for name in sub.choices:
        text = _help([name, "--help"])
        assert "(default: None)" not in text and "``" not in text, name
        assert not re.search(r"\(default: [^)]*\)\s*\(default:", text), name
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if r.strip()]
    assert len(rows) >= 10 and all(len(r.split(None, 1)) == 2 for r in rows)
    assert not re.search(r"(^|\s)/\w", out)                     # no install path; a description per example
