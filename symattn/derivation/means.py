"""Slaved means of uncentred (untied) indices: the critical manifold ∂Φ/∂m = 0 (docs/theory.md §6).

On the slow time the trainable means sit on ∂Φ/∂m_k = 0 at the current moments; they get there
through the fast phase dm_k/dt = −D_k ∂Φ/∂m_k (t = nα, moments frozen, D_k = t^A_k + t^B_k).
Written once for both the moment hierarchy (``derive.untied``) and the matrix-level solver
(``symattn.spectral``); Newton uses the exact Hessian ∂²Φ/∂m² of ``Potential.mean_hessian``.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.integrate import solve_ivp

from ..errors import NumericalFailure

NEWTON_TOL = 1e-12
NEWTON_STEPS = 60
FD_STEP = 1e-5


def mean_residual(potential, theta, pos) -> np.ndarray:
    """∂Φ/∂m at θ for the means at ``pos`` (positions in ``potential.names``)."""
    return potential.value_and_gradient(theta)[1][pos]


def solve_means(potential, theta, pos) -> np.ndarray:
    """θ with the means at ``pos`` moved by Newton (exact Hessian) from their value onto ∂Φ/∂m = 0."""
    theta = np.array(theta, dtype=float)
    if not len(pos):
        return theta
    for _ in range(NEWTON_STEPS):
        r = mean_residual(potential, theta, pos)
        if np.max(np.abs(r)) < NEWTON_TOL * (1.0 + np.max(np.abs(theta))):
            return theta
        try:
            step = np.linalg.solve(potential.mean_hessian(theta, pos), r)
        except np.linalg.LinAlgError:
            break
        theta[pos] -= step
        if not np.all(np.isfinite(theta)):
            break
    raise NumericalFailure("untied: no critical point ∂Φ/∂m = 0 of the slaved means near the current state")


def mean_velocity(potential, theta, pos, theta_dot) -> np.ndarray:
    """dm*/dτ = −H_mm⁻¹ ∂_τ(∂Φ/∂m) along θ̇ (implicit function theorem; the directional
    derivative by central differences of the exact gradient)."""
    tdot = np.asarray(theta_dot, dtype=float).copy()
    tdot[pos] = 0.0
    nrm = np.max(np.abs(tdot)) if tdot.size else 0.0
    if nrm == 0:
        return np.zeros(len(pos))
    h = FD_STEP / nrm
    b = (mean_residual(potential, theta + h * tdot, pos) - mean_residual(potential, theta - h * tdot, pos)) / (2 * h)
    return -np.linalg.solve(potential.mean_hessian(theta, pos), b)


def fast_flow(potential, theta, pos, rate, t_eval) -> np.ndarray:
    """m(t) of the fast phase dm/dt = −D ∂Φ/∂m(m, q) (moments frozen); rows = times."""
    theta0 = np.array(theta, dtype=float)
    D = np.asarray(rate, dtype=float)

    def f(t, m):
        th = theta0.copy()
        th[pos] = m
        return -D * mean_residual(potential, th, pos)

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
