"""How fast a quadrature term grows along each of its variables, and where its expectation exists
(docs/theory.md §2, "Tails").

Along a variable y (the others at 0) a term f grows like exp(c y²) with

    c = max_{±} lim_{y→±∞} log(|f| + 1)/y²   (0: slower than any Gaussian; ∞: faster than every one),

and E f(y) over y ~ N(μ, v) is finite only if 2cv < 1: the bound v < 1/(2c) on the variance of y. An
integrand that grows like exp(y³) or exp(e^y) has c = ∞, and no Gaussian expectation of it exists. SymPy
gives c (``sp.limit``); a cheap numerical probe first settles the common case of an integrand that grows
slower than any Gaussian (polynomials, softmax ratios, bounded functions) without calling it. Where SymPy
leaves the limit unevaluated, c is NaN (unknown) and the numerical tail check of the calibration
(``derivation.potential.GaussianExpectation._check_tails``) is the only guard.
"""
from __future__ import annotations

import math

import sympy as sp

PROBES = (30.0, 60.0)         # |y| where log(|f| + 1)/y² is probed before any limit is taken
TAME = 5e-3                   # a probe below this that does not grow from 30 to 60: c = 0 without SymPy's limit
FAST = ("exp", "cosh", "sinh", "gamma", "factorial", "erfi")     # the functions that can outgrow a polynomial


def _may_grow(g, y) -> bool:
    """Whether g could grow faster than a polynomial in y: it holds one of FAST or a power with y in its
    exponent."""
    if g.is_polynomial(y):
        return False
    for node in sp.preorder_traversal(g):
        if isinstance(node, sp.Function) and type(node).__name__ in FAST:
            return True
        if isinstance(node, sp.Pow) and node.exp.has(y):
            return True
        if node.func == sp.exp:
            return True
    return False


def _probe(fn, n: int, at: int) -> bool:
    """Whether log(|f| + 1)/y² stays below TAME at |y| = PROBES[1] and does not grow from PROBES[0] on, along
    variable ``at`` of the n (the others at 0) on both sides: the tame case, settled without SymPy."""
    import mpmath
    try:
        with mpmath.workdps(30):
            def ratio(y):
                x = [mpmath.mpf(0)] * n
                x[at] = mpmath.mpf(y)
                return abs(float(mpmath.log(abs(fn(*x)) + 1) / mpmath.mpf(y) ** 2))
            probe = {(s, p): ratio(s * p) for s in (1, -1) for p in PROBES}
    except Exception:            # a function mpmath does not know, an overflow: SymPy's limit decides
        return False
    return all(probe[s, PROBES[1]] < TAME and probe[s, PROBES[1]] <= probe[s, PROBES[0]] for s in (1, -1))


def axis_growth(expr, var, variables, fn=None) -> float:
    """c of ``expr`` along ``var`` with the other ``variables`` at 0 (module docstring): 0.0, a positive
    float, ``math.inf``, or NaN where SymPy cannot tell. ``fn``: ``expr`` lambdified in ``variables`` (mpmath),
    for the numerical probe."""
    variables = list(variables)
    if fn is None:
        if var not in expr.free_symbols or not _may_grow(expr, var):
            return 0.0
        fn = sp.lambdify(variables, expr, modules="mpmath")
    if _probe(fn, len(variables), variables.index(var)):
        return 0.0
    g = expr.xreplace({v: sp.Integer(0) for v in variables if v != var})
    if var not in g.free_symbols or not _may_grow(g, var):
        return 0.0
    y = sp.Dummy("y", real=True)
    ratio = sp.log(sp.Abs(g.subs(var, y)) + 1) / y**2
    out = 0.0
    for end in (sp.oo, -sp.oo):
        try:
            c = sp.limit(ratio, y, end)
        except Exception:
            return math.nan
        if c in (sp.oo, sp.zoo):
            return math.inf
        if not c.is_real or c.has(sp.Limit):
            return math.nan
        out = max(out, float(c))
    return out


def variance_bounds(expr, variables) -> tuple:
    """Per variable, the largest variance at which E f exists: 1/(2c) (``math.inf`` for c = 0, 0 for
    c = ∞, ``math.inf`` where c is unknown: left to the numerical check). ``expr`` is lambdified once for the
    probes of every axis; SymPy's limit runs only along an axis the probe does not settle."""
    variables = list(variables)
    out, fn = [], None
    for v in variables:
        if v not in expr.free_symbols or not _may_grow(expr, v):
            c = 0.0
        else:
            fn = fn or sp.lambdify(variables, expr, modules="mpmath")
            c = axis_growth(expr, v, variables, fn)
        out.append(math.inf if (c == 0.0 or math.isnan(c)) else (0.0 if math.isinf(c) else 0.5 / c))
    return tuple(out)
