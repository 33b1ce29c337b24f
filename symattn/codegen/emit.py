"""Emit a self-contained Python/Numba module for the right-hand side of a moment system.

The module needs only numpy and numba. It holds the derived data (words, sparse terms), the
gradient of Φ (closed form printed from SymPy; quadrature terms as compiled integrands with
their Gaussian rule), ``coefficients(mu)`` and ``rhs(t, mu)``. Output is deterministic:
same spec and truncation → same bytes (floats are printed rounded to 15 significant digits).
The fixed parts of the module (header, Gaussian rule, coefficients, right-hand side) are template
files in ``codegen/templates``; this module fills them with the derived data.
"""
from __future__ import annotations

import hashlib
import re
import string
from functools import cache
from pathlib import Path

import numpy as np
import sympy as sp
from sympy.printing.pycode import pycode

from ..symbolic.quadrature import canonical_basis


def fnum(x) -> str:
    """Deterministic float literal."""
    x = float(x)
    if x == 0:
        return "0.0"
    return repr(float(f"{x:.15g}"))


def array_literal(a, dtype="np.float64") -> str:
    a = np.asarray(a)
    if a.dtype.kind in "iu":
        body = repr(a.tolist())
    else:
        body = _nested(a)
    return f"np.array({body}, dtype={dtype})"


def _nested(a):
    if a.ndim == 0:
        return fnum(a)
    return "[" + ", ".join(_nested(x) for x in a) + "]"


def _wrap(items, width=96, indent="    "):
    lines, cur = [], indent
    for it in items:
        piece = it + ", "
        if len(cur) + len(piece) > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent
        cur += piece
    if cur.strip():
        lines.append(cur.rstrip())
    return "\n".join(lines)


def int_array(name, values) -> str:
    return f"{name} = np.array([\n{_wrap([str(int(v)) for v in values])}\n], dtype=np.int64)\n"


def float_array(name, values) -> str:
    return f"{name} = np.array([\n{_wrap([fnum(v) for v in values])}\n], dtype=np.float64)\n"


def _expr_code(exprs, args, name, arg_name="x", out_len=None, vectorized=False):
    """A function of x computing a list of SymPy expressions of args[i] = x[i], with CSE.

    Scalar form: a numba function returning a vector. Vectorized form (x[i] arrays): a NumPy
    function returning an array with one row per expression (no compilation at import).
    """
    subs = {a: sp.Symbol(f"{arg_name}{i}") for i, a in enumerate(args)}
    exprs = [sp.sympify(e).xreplace(subs) for e in exprs]
    reps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols("c"), optimizations=None)
    printer = (lambda e: _np_code(e)) if vectorized else (lambda e: pycode(e, fully_qualified_modules=True))
    lines = ([] if vectorized else ["@njit(cache=True)"]) + [f"def {name}({arg_name}):"]
    for i in range(len(args)):
        lines.append(f"    {arg_name}{i} = {arg_name}[{i}]")
    for s, e in reps:
        lines.append(f"    {s} = {printer(e)}")
    n = out_len or len(reduced)
    shape = f"({n}, {arg_name}.shape[1])" if vectorized else f"{n}"
    lines.append(f"    out = np.zeros({shape})")
    for i, e in enumerate(reduced):
        if e != 0:
            lines.append(f"    out[{i}] = {printer(e)}")
    lines.append("    return out")
    return "\n".join(lines) + "\n"


def _np_code(e):
    from sympy.printing.numpy import NumPyPrinter
    return NumPyPrinter().doprint(e)


def rule_name(n, kind, r, half_width):
    return f"_RULE_{kind[0].upper()}{n}_{r}_{int(round(half_width * 1000))}"


def quad_term_code(tag, term, order, gradient=True):
    """Integrand and expectation of one quadrature term (symbolic.quadrature.QuadTerm)."""
    v = term.variables
    exprs = [term.expr]
    if gradient:
        grads = [sp.diff(term.expr, a) for a in v]
        exprs += grads
        if not term.stein:
            exprs += [sp.diff(g, b) for g in grads for b in v]
    P = canonical_basis(term.P)
    r = P.shape[0]
    src = [f"# quadrature term {tag}: variables {', '.join(s.name for s in v)}; {r} effective dimension(s)"]
    src.append(_expr_code(exprs, v, f"_integrand_{tag}", vectorized=True))
    src.append(f"_P_{tag} = {array_literal(P)}")
    src.append(f"_MU0_{tag} = {array_literal(term.mu0)}")
    src.append(f"_MUT_{tag} = {array_literal(term.mu_theta)}")
    src.append(f"_COV0_{tag} = {array_literal(term.cov0)}")
    src.append(f"_COVT_{tag} = {array_literal(term.cov_theta)}\n")
    if gradient:
        call = f"_gauss_expect(_integrand_{tag}, theta, _P_{tag}, _MU0_{tag}, _MUT_{tag}, _COV0_{tag}, _COVT_{tag},\n" \
               f"                         {rule_name(*term.rule(order), r, term.half_width)}, {term.stein})"
    else:
        call = f"_gauss_value(_integrand_{tag}, theta, _P_{tag}, _MU0_{tag}, _MUT_{tag}, _COV0_{tag}, _COVT_{tag},\n" \
               f"                        {rule_name(*term.rule(order), r, term.half_width)})"
    src.append(f"def _expect_{tag}(theta):\n    return {call}\n")
    return "\n".join(src)


TEMPLATES = Path(__file__).with_name("templates")


@cache
def template(name: str) -> string.Template:
    """A code template of ``codegen/templates`` (string.Template: the templates only substitute
    values — the loops over the derived data stay in Python — and ``$`` never occurs in the
    generated Python, so no template engine is needed)."""
    return string.Template((TEMPLATES / name).read_text())



def expectation_code(E, fname, tag, gradient=True):
    """``fname(theta)``: E[f] (and ∂/∂θ when ``gradient``) as closed form + quadrature terms.

    Returns (source, rules): rules are the (order, dimension) pairs of the quadrature used.
    """
    syms, order = E.symbols, E.order
    closed = [E.closed_form] + (E.closed_gradient() if gradient else [])
    parts = [_expr_code(closed, syms, f"_closed_{tag}", arg_name="t")]
    jit = [] if E.quad_terms else ["@njit(cache=True)"]
    body = jit + [f"def {fname}(theta):", f"    out = _closed_{tag}(theta)", "    val = out[0]"]
    body += ["    grad = out[1:].copy()"] if gradient else []
    for n, term in enumerate(E.quad_terms):
        parts.append(quad_term_code(f"{tag}{n}", term, order, gradient))
        if gradient:
            body += [f"    f, g = _expect_{tag}{n}(theta)", "    val += f", "    grad += g"]
        else:
            body += [f"    val += _expect_{tag}{n}(theta)"]
    body.append("    return val, grad" if gradient else "    return val")
    rules = {(*t.rule(order), t.dim, t.half_width) for t in E.quad_terms}
    return "\n\n".join(parts) + "\n\n" + "\n".join(body) + "\n", rules


def gradient_matrix_lines(potential, var="g") -> list:
    """Lines filling GO = GΩ and GP = GΨ (K×K, full-matrix convention of derive.potential) from the
    plain partial derivatives ``var`` = ∂Φ/∂θ; a pair with Ω = Ψ = q splits ∂Φ/∂q evenly."""
    op, K = potential.op, potential.spec.K
    pos = {n: i for i, n in enumerate(potential.names)}
    lines = [f"    GO = np.zeros(({K}, {K}))", f"    GP = np.zeros(({K}, {K}))"]
    for k in range(K):
        for l in range(K):
            w = "" if k == l else "0.5 * "
            so, sq = op.omega(k, l), op.psi(k, l)
            half = "0.5 * " if so == sq else ""
            lines.append(f"    GO[{k}, {l}] = {half}{w}{var}[{pos[so.name]}]")
            lines.append(f"    GP[{k}, {l}] = {half}{w}{var}[{pos[sq.name]}]")
    return lines


def gamma_lines(potential, var="g", out="gamma"):
    """Lines filling the K×K Γ = GΩ + GΨ (off-diagonal halved; docs/theory.md §2) from ∂Φ/∂θ."""
    return gradient_matrix_lines(potential, var) + [f"    {out} = GO + GP"]





def module_source(system, kind: str, coefficient_lines: list, extra: str = "", expectations=()) -> str:
    """Source of the generated module of a MomentSystem-like object.

    Always emits ``phi_and_grad`` (Φ and ∂Φ/∂θ); ``expectations`` adds value-only functions
    (E, function name, tag), e.g. the SGD-noise constants ν.
    """
    from ..version import __version__

    P = system.potential
    spec_text = system.spec_text()
    words = system.word_names()
    quad = (f"Quadrature: {len(P.quad_terms)} terms, {P.order} nodes per dimension "
            f"(calibrated at the initial state, error estimate {P.error:.1e})\n") if P.quad_terms else ""
    head = template("header.py.tmpl").substitute(
        version=__version__, kind=kind[0].upper() + kind[1:], M=system.truncation, nmom=system.size,
        nterms=len(system.terms), digest=hashlib.sha256(spec_text.encode()).hexdigest()[:16],
        phi=sp.sstr(P.closed_form) + (" + E[non-polynomial terms]" if P.quad_terms else ""),
        quad=quad, spec=_indent(spec_text), words=_indent("\n".join(f"{i}: {w}" for i, w in enumerate(words))))
    T = system.terms
    src = [head]
    src.append(f"NAMES = {P.names!r}  # order parameters θ of Φ\n")
    src.append(f"COEF_NAMES = {system.coef_names!r}\n")
    src.append(f"N_MOMENTS = {system.size}\n")
    src.append(int_array("THETA_WORDS", system.theta_words))
    src.append(int_array("ROW", T["row"]))
    src.append(int_array("C1", T["c1"]))
    src.append(int_array("C2", T["c2"]))
    src.append(int_array("KEY", T["key"]))
    src.append(float_array("VAL", T["val"]))
    code, rules = expectation_code(P, "phi_and_grad", "phi", gradient=True)
    blocks = [code]
    for E, fname, tag in expectations:
        c, r = expectation_code(E, fname, tag, gradient=False)
        blocks.append(c)
        rules |= r
    if rules:
        blocks.insert(0, template("gauss_rule.py.tmpl").template + "\n".join(f"{rule_name(n, k, r, h)} = _gauss_rule({n}, {r}, {fnum(h)}, {k!r})"
                                                   for n, k, r, h in sorted(rules)) + "\n")
    src.append("\n" + "\n\n".join(blocks))
    jit = "" if any(E.quad_terms for E in [P] + [e[0] for e in expectations]) else "@njit(cache=True)\n"
    src.append(template("coefficients.py.tmpl").substitute(jit=jit, ncoef=len(system.coef_names),
                                                           lines="\n".join(coefficient_lines)))
    src.append(extra)
    src.append(template("rhs.py.tmpl").substitute(jit=jit))
    text = "\n".join(src)
    return re.sub(r"[ \t]+\n", "\n", text)


def _indent(text, pre="    "):
    return "\n".join(pre + line if line else line for line in text.splitlines())
