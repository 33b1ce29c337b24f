"""Slaved means of uncentred (untied) indices: the critical manifold ∂Φ/∂m = 0 (docs/theory.md §6).

On the slow time the trainable means sit on ∂Φ/∂m_k = 0 at the current moments; they get there
through the fast phase dm_k/dt = −D_k ∂Φ/∂m_k (t = nα, moments frozen, D_k = t^A_k + t^B_k).
The Newton solver and the mean velocity are written once, in ``slaved_means.py.tmpl``: the
generated module compiles that text (with its own ∂Φ/∂m and Jacobian), and this module runs it with
the exact gradient and Hessian ∂²Φ/∂m² of the potential it is given (``Potential``, or the compiled one's
``phi_mean_hessian``, ``codegen.potential``) — for the NumPy reference backend (``symattn.derivation.state``),
the hierarchies' initial state and observables, and the matrix-level solver (``symattn.spectral``).
"""
from __future__ import annotations

import string
import warnings
import weakref
from functools import cache
from pathlib import Path

import numpy as np

from ..errors import NumericalFailure

NEWTON_TOL = 1e-12
NEWTON_STEPS = 60
FD_STEP = 1e-5


def mean_residual(potential, theta, pos) -> np.ndarray:
    """∂Φ/∂m at θ for the means at ``pos`` (positions in ``potential.names``)."""
    return potential.value_and_gradient(theta)[1][pos]


ALGORITHM = Path(__file__).with_name("slaved_means.py.tmpl")


@cache
def algorithm_source(jit: str = "") -> str:
    """The Newton solver and the mean velocity as Python source (``jit``: the decorator line the
    generated module puts before each function, "" for the NumPy reference)."""
    return string.Template(ALGORITHM.read_text()).substitute(
        jit=jit, fd_step=repr(FD_STEP), newton_steps=NEWTON_STEPS, newton_tol=repr(NEWTON_TOL))


@cache
def _algorithm_code():
    return compile(algorithm_source(), str(ALGORITHM), "exec")


_BOUND = weakref.WeakKeyDictionary()      # potential -> {positions: namespace}: bound once, not per call


def _algorithms(potential, pos) -> dict:
    """The functions of ``slaved_means.py.tmpl`` bound to Φ's exact gradient and Hessian in the means
    (once per potential and positions: binding costs ≈ 26 µs, and Newton runs at every evaluation)."""
    pos = list(pos)
    bound = _BOUND.setdefault(potential, {})
    ns = bound.get(tuple(pos))
    if ns is None:
        P = weakref.proxy(potential)       # the cached functions must not keep their key alive
        ns = {"np": np, "MEAN_POS": np.array(pos, dtype=np.int64), "N_MEANS": len(pos),
              "_grad_m": lambda theta, law: mean_residual(P, theta, pos),
              "_jac_m": lambda theta, law: P.mean_hessian(theta, pos)}
        exec(_algorithm_code(), ns)
        bound[tuple(pos)] = ns
    return ns


def solve_means(potential, theta, pos) -> np.ndarray:
    """θ with the means at ``pos`` moved by Newton (exact Hessian) from their value onto ∂Φ/∂m = 0."""
    theta = np.array(theta, dtype=float)
    if not len(pos):
        return theta
    with np.errstate(all="ignore"):
        out = _algorithms(potential, pos)["_solve_means"](theta, None)
    if not np.all(np.isfinite(out)):
        raise NumericalFailure("untied: no critical point ∂Φ/∂m = 0 of the slaved means near the current state")
    return out


def mean_velocity(potential, theta, pos, theta_dot) -> np.ndarray:
    """dm*/dτ = −H_mm⁻¹ ∂_τ(∂Φ/∂m) along θ̇ (implicit function theorem; the directional
    derivative by central differences of the exact gradient)."""
    if not len(pos):
        return np.zeros(0)
    return _algorithms(potential, pos)["_mean_velocity"](np.asarray(theta, dtype=float),
                                                         np.asarray(theta_dot, dtype=float), None)


def fast_flow(potential, theta, pos, rate, t_eval) -> np.ndarray:
    """m(t) of the fast phase dm/dt = −D ∂Φ/∂m(m, q) (moments frozen); rows = times."""
    theta0 = np.array(theta, dtype=float)
    D = np.asarray(rate, dtype=float)

    def f(t, m):
        th = theta0.copy()
        th[pos] = m
        return -D * mean_residual(potential, th, pos)

    from scipy.integrate import solve_ivp
    sol = solve_ivp(f, (0.0, float(t_eval[-1])), theta0[pos], t_eval=t_eval, method="LSODA", rtol=1e-10, atol=1e-12)
    if sol.status < 0 or sol.y.shape[1] != len(t_eval):
        raise NumericalFailure(f"untied fast phase failed: {sol.message}")
    return sol.y.T


def relax_means(potential, theta, pos, rate, fast_time: float = 200.0) -> np.ndarray:
    """θ after the fast phase (to t = ``fast_time``), Newton-polished onto ∂Φ/∂m = 0; warns when
    the critical point reached is unstable (a symmetric start sitting on a saddle)."""
    theta = np.array(theta, dtype=float)
    if not len(pos):
        return theta
    theta[pos] = fast_flow(potential, theta, pos, rate, np.array([0.0, fast_time]))[-1]
    theta = solve_means(potential, theta, pos)
    H = potential.mean_hessian(theta, pos)
    if np.min(np.linalg.eigvalsh(0.5 * (H + H.T))) < 0:
        warnings.warn("untied fast phase: the means sit on an unstable critical point of Φ (a symmetric "
                      "start); pass means={...} or init='sample' to select a branch", RuntimeWarning, stacklevel=3)
    return theta
