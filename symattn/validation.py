"""The checks a spec's values pass, each failure one line naming the key (``SpecError``): numbers, tables of known
keys, expressions finite and real on the real line. ``spec`` and ``architecture.spec`` validate with them."""
from __future__ import annotations

import math
import re

import numpy as np

from .errors import SpecError


def fail(src, key, msg):
    """Raise SpecError "src: key: msg"."""
    raise SpecError(f"{src}: {key}: {msg}")


def number(src, key, value, *, low=None, strict=False, integer=False, high=None):
    """``value`` as a float (an int with ``integer``), or SpecError: a finite number ≥ ``low`` (> with ``strict``),
    at most ``high`` in magnitude."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(src, key, f"expected a {'whole number' if integer else 'number'}, got {short(repr(value))}")
    if isinstance(value, int) and abs(value) > 10**300:                 # beyond any float: one line, not a crash
        fail(src, key, f"a whole number of {len(str(abs(value)))} digits is out of range")
    if integer and not float(value).is_integer():
        fail(src, key, f"expected a whole number, got {value!r}")
    if not math.isfinite(value):
        fail(src, key, f"expected a finite number, got {value!r}")
    if low is not None and (value < low or (strict and value == low)):
        fail(src, key, f"must be {'>' if strict else '>='} {low}, got {value!r}")
    if high is not None and abs(value) > high:
        fail(src, key, f"must be at most {high:g} in magnitude, got {value!r}")
    return int(value) if integer else float(value)


def table(src, key, value, allowed):
    """``value`` if it is a table whose keys are all ``allowed``, else SpecError naming the first unknown key."""
    if not isinstance(value, dict):
        fail(src, key, f"expected a table, got {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        bad = unknown[0] if re.fullmatch(r"[A-Za-z0-9_\-]+", unknown[0]) else repr(unknown[0])   # one line
        where = f"{key}.{bad}" if key else bad
        fail(src, where, f"unknown key; allowed: {', '.join(sorted(allowed))}")
    return value


def short(text, n=60):
    """``text`` cut to ``n`` characters for an error line."""
    return text if len(text) <= n else text[:n] + "…"


def finite_at(expr, points) -> str | None:
    """The first point (as text) where ``expr`` is not a finite real number, else None. Evaluated in floating
    point (``lambdify``): a value beyond double precision (exp nested six deep) counts as not finite — no arbitrary
    precision evaluation that could run without end; SymPy's own evaluation only where NumPy has no printer."""
    import sympy as sp  # expressions only: a named activation needs no SymPy
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    try:
        with np.errstate(all="ignore"):
            f = sp.lambdify(syms, expr, modules="numpy")
    except Exception:
        f = None
    for sub in points:
        where = ", ".join(f"{k}={float(x):g}" for k, x in sub.items())
        if f is not None:
            try:
                with np.errstate(all="ignore"):
                    v = complex(f(*[float(sub.get(s, 0.0)) for s in syms]))
            except (TypeError, ValueError, ZeroDivisionError, OverflowError, AttributeError, NameError):
                return where
        else:
            try:
                v = complex(expr.xreplace(sub).evalf(15))
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                return where
        if abs(v.imag) > 1e-12 * max(1.0, abs(v.real)) or not math.isfinite(v.real):
            return where
    return None


def not_real_on(expr, z) -> str | None:
    """An interval of the real line where the activation is not a real number (SymPy's continuous domain: a
    branch point beyond the check grid, as in sqrt(36.0001 − z²)), else None; isolated points are the grid's."""
    import sympy as sp  # expressions only: a named activation needs no SymPy
    if sp.count_ops(expr) > 200:
        return None
    try:
        from sympy.calculus.util import continuous_domain
        missing = sp.Complement(sp.S.Reals, continuous_domain(expr, z, sp.S.Reals))
        if missing.measure > 0:
            return str(missing)
    except Exception:                 # SymPy cannot tell: the grid and the quadrature's own checks decide
        return None
    return None


