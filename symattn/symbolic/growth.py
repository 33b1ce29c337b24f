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


def axis_growth(expr, var, variables) -> float:
    """c of ``expr`` along ``var`` with the other ``variables`` at 0 (module docstring): 0.0, a positive
    float, ``math.inf``, or NaN where SymPy cannot tell."""
    g = expr.subs({v: 0 for v in variables if v != var})
    if var not in g.free_symbols or not _may_grow(g, var):
        return 0.0
    y = sp.Dummy("y", real=True)
    ratio = sp.log(sp.Abs(g.subs(var, y)) + 1) / y**2
    try:
        import mpmath
        fn = sp.lambdify(y, ratio, modules="mpmath")
        with mpmath.workdps(30):
            probe = {(s, p): abs(float(fn(mpmath.mpf(s * p)))) for s in (1, -1) for p in PROBES}
        if all(probe[s, PROBES[1]] < TAME and probe[s, PROBES[1]] <= probe[s, PROBES[0]] for s in (1, -1)):
            return 0.0
    except Exception:            # a function mpmath does not know, an overflow: SymPy's limit decides
        pass
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
    c = ∞, ``math.inf`` where c is unknown: left to the numerical check)."""
    out = []
    for v in variables:
        c = axis_growth(expr, v, variables)
        out.append(math.inf if (c == 0.0 or math.isnan(c)) else (0.0 if math.isinf(c) else 0.5 / c))
    return tuple(out)
