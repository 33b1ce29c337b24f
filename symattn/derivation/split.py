"""What a derived Φ needs at run time besides its values, as plain arrays (no SymPy): the split of the plain
partials ∂Φ/∂θ into the full-matrix convention (docs/theory.md §2), and where a quadrature term's Gaussian
expectation exists. ``derivation.potential`` builds them from its symbols; the compiled potential of a warm
run (``codegen.potential``) loads them from the derivation store without importing SymPy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..symbolic.quadrature_rule import scaled_law


@dataclass
class Gradients:
    """∂Φ in the full-matrix convention: g_m (K,), g_omega (K,K), g_psi (K,K)."""

    m: np.ndarray
    omega: np.ndarray
    psi: np.ndarray

    @property
    def gamma(self) -> np.ndarray:
        """Γ of the symmetric (tied/direct) flows: ∇_q Φ with off-diagonal entries halved."""
        return self.omega + self.psi


@dataclass
class GradientSplit:
    """The full-matrix convention as data (``Potential.split_plan``): the indices k with a mean and the positions
    of their ∂Φ/∂m_k in θ; per entry (k, l), row-major, the positions of ∂Φ/∂Ω_kl and ∂Φ/∂Ψ_kl and the weight of
    both (½ off the diagonal, ½ again where Ω = Ψ = q)."""

    K: int
    m_at: np.ndarray
    m_pos: np.ndarray
    o_pos: np.ndarray
    p_pos: np.ndarray
    weight: np.ndarray

    def matrices(self, grads) -> tuple:
        """(GΩ, GΨ), each (R, K, K), from R rows of plain partials."""
        grads = np.asarray(grads, dtype=float)
        w, K = self.weight, self.K
        return (w * grads[:, self.o_pos]).reshape(-1, K, K), (w * grads[:, self.p_pos]).reshape(-1, K, K)

    def gradients(self, grad) -> Gradients:
        """g_m, GΩ, GΨ from one row of plain partials."""
        grad = np.asarray(grad, dtype=float)
        gm = np.zeros(self.K)
        gm[self.m_at] = grad[self.m_pos]
        omega, psi = self.matrices(grad[None])
        return Gradients(gm, omega[0], psi[0])


@dataclass
class GrowthLimit:
    """A quadrature term whose Gaussian expectation exists only below a variance of some of its variables
    (``symbolic.growth``), at β = 1: Var y_a = cov0[a, a] + θ·cov_theta[:, a, a] over the positions ``at``
    must stay below ``bound`` (every Var > 0 is too much where the bound is 0). ``expr``: the term, as text."""

    at: np.ndarray
    bound: np.ndarray
    cov0: np.ndarray             # (len(at),): the diagonal entries at ``at``
    cov_theta: np.ndarray        # (p, len(at))
    names: tuple
    expr: str

    def scaled(self, beta: float) -> GrowthLimit:
        """The same limit of the integrand at inverse temperature β (Σ scaled by β², ``scaled_law``)."""
        _, _, cov0, cov_theta = scaled_law(beta, 0.0, 0.0, self.cov0, self.cov_theta)
        return GrowthLimit(self.at, self.bound, cov0, cov_theta, self.names, self.expr)

    def check(self, theta) -> None:
        """Raise ExpectationUndefined naming the first variable whose variance reaches its bound at θ."""
        var = self.cov0 + theta @ self.cov_theta
        bad = np.flatnonzero(np.where(self.bound > 0, var >= self.bound, var > 0))
        if bad.size:
            from ..errors import ExpectationUndefined
            i = int(bad[0])
            name, bound = self.names[i], self.bound[i]
            if bound == 0:
                why = f"it grows faster than any Gaussian decays along {name} (c = ∞), so no variance > 0 holds it"
            else:
                why = (f"it grows like exp({0.5 / bound:.4g}·{name}²) along {name}, and Var {name} = "
                       f"{var[i]:.4g} ≥ 1/(2c) = {bound:.4g}")
            raise ExpectationUndefined(f"the Gaussian expectation of the term {self.expr} does not exist "
                                       f"at these order parameters: {why}")


def growth_limits(terms) -> list:
    """The ``GrowthLimit`` of each quadrature term (``symbolic.quadrature.QuadTerm``) that has one; [] for
    most losses."""
    out = []
    for t in terms:
        bounds = np.array(t.variance_bounds)
        at = np.flatnonzero(np.isfinite(bounds))
        if at.size:
            import sympy as sp
            out.append(GrowthLimit(at, bounds[at], t.cov0[at, at], t.cov_theta[:, at, at],
                                   tuple(t.variables[i].name for i in at), sp.sstr(t.expr)))
    return out


def theta_of(names, values) -> np.ndarray:
    """Order parameters as an array in ``names`` order from a dict (keys: names or SymPy symbols) or an array."""
    if isinstance(values, dict):
        values = {str(k): v for k, v in values.items()}
        missing = [n for n in names if n not in values]
        if missing:
            raise KeyError(f"missing order parameters: {', '.join(missing)}")
        return np.array([float(values[n]) for n in names])
    return np.asarray(values, dtype=float)


def nu_name(spec, k: int, l: int, kinds: str = "dd") -> str:
    """Coefficient name of the SGD-noise contraction of δ_k and δ_l (``derivation.noise``): nu (a symmetric
    member), else nu1 / nu2."""
    a, b = sorted((k, l))
    if spec.indices[a].symmetric or spec.indices[b].symmetric:
        return f"nu_{a}_{b}"
    return f"nu{1 if kinds[0] == kinds[1] else 2}_{a}_{b}"


def quadrature_nu_names(nu: dict) -> list:
    """The non-polynomial ν (``has_quadrature``): the generated right-hand side reads them from params[4:] (in this
    order), so that it holds no state; the integrator evaluates and refreshes them (``derivation.state.params``)."""
    return [name for name, E in nu.items() if E.has_quadrature]
