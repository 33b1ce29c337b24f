"""Smooth, kinked or jumping: what Price's theorem may differentiate (docs/theory.md §2, "Jumps and kinks").

The gradient of a Gaussian expectation, ∂E f/∂θ = ∂μ·E∇f + ½ ∂Σ : E∇²f, holds for the *distributional*
derivatives of f. SymPy's ``diff`` does not take them everywhere: it differentiates a ``Piecewise`` branch
by branch (the step ``Piecewise((1, z > 1), (0, True))`` gets derivative 0) and leaves z·δ(z) in the
derivative of z·Heaviside(z). So the integrand is first written in Heaviside form (``distributional``):
sign(a) = 2H(a) − 1, |a| = a(2H(a) − 1), Max/Min by SymPy's rewrite, a Piecewise as Σ_m e_m 1[c_m] Π_{l<m}
(1 − 1[c_l]) with 1[a > b] = H(a − b) (an equality holds on a null set). Its derivative along a variable v
then holds δ(a) terms; f **jumps** across {a = 0} when a δ(a)'s coefficient does not vanish there (checked
at the roots of a in v, the other variables at random points, H(0) = ½). A kink (relu, |z|) has δ only in
the second derivative.

- smooth: the term's derivatives as SymPy gives them;
- kink: E∇f from the a.e. gradient (the δ terms of ∂f vanish on their hyperplanes), E∇²f by Stein's lemma;
- jump: both by Stein's lemma from f alone (``quadrature_rule.score_moments``); and the *per-sample*
  gradient that online SGD takes is the a.e. one, whose mean is not ∇Φ — the dynamics are refused
  (``symbolic.loss.Loss.require_pathwise_gradient``).
"""
from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

NONSMOOTH = (sp.Heaviside, sp.sign, sp.Abs, sp.Max, sp.Min, sp.Piecewise, sp.DiracDelta)
PROBES = 6          # random points per hyperplane at which a δ coefficient is evaluated


def is_smooth(expr) -> bool:
    """No piecewise-defined function anywhere in expr (then SymPy's derivatives are the true ones)."""
    return not expr.has(*NONSMOOTH)


def _indicator(cond):
    """1[cond] in Heaviside form (null sets ignored)."""
    if cond is sp.true or cond == sp.true:
        return sp.Integer(1)
    if cond is sp.false or cond == sp.false:
        return sp.Integer(0)
    if isinstance(cond, (sp.StrictGreaterThan, sp.GreaterThan)):
        return sp.Heaviside(cond.lhs - cond.rhs)
    if isinstance(cond, (sp.StrictLessThan, sp.LessThan)):
        return sp.Heaviside(cond.rhs - cond.lhs)
    if isinstance(cond, sp.Eq):
        return sp.Integer(0)
    if isinstance(cond, sp.Ne):
        return sp.Integer(1)
    if isinstance(cond, sp.And):
        return sp.Mul(*[_indicator(c) for c in cond.args])
    if isinstance(cond, sp.Or):
        return 1 - sp.Mul(*[1 - _indicator(c) for c in cond.args])
    if isinstance(cond, sp.Not):
        return 1 - _indicator(cond.args[0])
    raise ValueError(f"a Piecewise condition that is not a comparison: {cond}")


def _piecewise(*pairs):
    out, rest = sp.Integer(0), sp.Integer(1)
    for e, c in pairs:
        ind = _indicator(c)
        out += e * ind * rest
        rest = rest * (1 - ind)
    return out


def distributional(expr):
    """expr in Heaviside form (module docstring): equal to expr off a null set, and SymPy's derivatives of
    it are the distributional ones."""
    if is_smooth(expr):
        return expr
    e = expr.replace(sp.Piecewise, _piecewise)
    e = e.replace(sp.sign, lambda a: 2 * sp.Heaviside(a) - 1)
    e = e.replace(sp.Abs, lambda a: a * (2 * sp.Heaviside(a) - 1))
    e = e.replace(lambda x: isinstance(x, (sp.Max, sp.Min)), lambda x: x.rewrite(sp.Heaviside))
    return e


def _even(*args):
    """δ(−a) = δ(a): one sign of the argument (derivatives of δ, two arguments, kept as they are)."""
    if len(args) == 1 and args[0].could_extract_minus_sign():
        return sp.DiracDelta(-args[0])
    return sp.DiracDelta(*args)


def _jumps_along(D, v, others, rng) -> bool:
    d = sp.diff(D, v).replace(sp.DiracDelta, _even)         # δ(1 − z) and δ(z − 1) are one atom
    deltas = [a for a in d.atoms(sp.DiracDelta) if len(a.args) == 1 and a.args[0].has(v)]
    t = sp.Dummy("t")
    for delta in deltas:
        arg = delta.args[0]
        coef = sp.diff(d.xreplace({delta: t}).replace(sp.DiracDelta, lambda *a: sp.Integer(0)), t)
        if coef == 0:
            continue
        try:
            roots = [r for r in sp.solve(arg, v) if not r.has(sp.I)]
        except (NotImplementedError, ValueError):
            return True                               # cannot locate the hyperplane: assume the worst
        for root in roots:
            c = coef.xreplace({v: root})
            for _ in range(PROBES):
                at = {o: sp.Float(float(x)) for o, x in zip(others, rng.standard_normal(len(others)))}
                try:
                    val = complex(sp.N(c.xreplace(at), 15))
                except (TypeError, ValueError):
                    val = complex(np.nan)
                if not np.isfinite(val.real):       # 0·∞ on the hyperplane (|a|^½: a/√|a|): its limits decide
                    val = _two_sided_limit(coef.xreplace(at), v, root)
                if val is None or abs(val) > 1e-9:
                    return True
    return False


def _two_sided_limit(expr, v, root):
    """The common limit of ``expr`` as v → root from both sides (a complex number), or None."""
    out = []
    for side in ("+", "-"):
        try:
            lim = sp.limit(expr, v, root, side)
            out.append(complex(sp.N(lim, 15)))
        except (TypeError, ValueError, NotImplementedError):
            return None
    if not all(np.isfinite(x.real) and np.isfinite(x.imag) for x in out) or abs(out[0] - out[1]) > 1e-9:
        return None
    return out[0]


@cache
def smoothness(expr, variables: tuple, along: tuple | None = None) -> str:
    """"smooth", "kink" or "jump" (module docstring) of a term in ``variables``; ``along``: only jumps
    across a hyperplane that these variables cross count (default: all)."""
    if is_smooth(expr):
        return "smooth"
    D = distributional(expr)
    rng = np.random.default_rng(2024)
    for v in variables if along is None else along:
        if _jumps_along(D, v, [o for o in variables if o != v], rng):
            return "jump"
    return "kink"


def ae_gradient(expr, variables) -> list:
    """∂f/∂v almost everywhere, one per variable, without Dirac terms (exact for a kink; for a jump it
    misses the δ mass, which is the point of ``smoothness``); SymPy's own derivatives where f is smooth."""
    if is_smooth(expr):
        return [sp.diff(expr, v) for v in variables]
    D = distributional(expr)
    return [sp.diff(D, v).replace(sp.DiracDelta, lambda *a: sp.Integer(0)) for v in variables]
