"""A Gaussian expectation as a SymPy object: E_{G ~ N(m(θ), C(θ))}[f(G)] (docs/theory.md §2).

Φ of a non-polynomial loss is not a closed form in the order parameters θ but it is still a function of
them through the mean and covariance of the pre-activations G (P Thm 1). ``GaussianMean`` keeps it as that
object: it prints as E_{G∼N(m, C)}[f(G)], and it differentiates by the chain rule through m(θ), C(θ) and
Price's theorem,

    ∂_s E f = Σ_a (∂_s m_a) E[∂_a f] + ½ Σ_{a,b} (∂_s C_ab) E[∂_a ∂_b f] + E[∂_s f]

(the last term for a parameter inside f, e.g. the softmax β), so ``sp.diff(Φ, q_st)`` is the expectation
form of the gradient Γ the package evaluates by quadrature. ``doit()`` integrates a polynomial f exactly
(Wick); ``mc(values, n)`` is a plain Monte Carlo estimate (tests).
"""
from __future__ import annotations

import numpy as np
import sympy as sp


class GaussianMean(sp.Expr):
    """E[f(G)] over G ~ N(mean, cov) (module docstring). Arguments: f, the tuple of variables G, the tuple of
    their means and the symmetric matrix of their covariances (expressions in θ)."""

    is_commutative = True

    def __new__(cls, f, variables, mean, cov):
        variables = sp.Tuple(*variables)
        mean = sp.Tuple(*[sp.sympify(m) for m in mean])
        cov = sp.ImmutableMatrix(cov)
        f = sp.sympify(f)
        if not f.has(*variables):
            return f
        return sp.Expr.__new__(cls, f, variables, mean, cov)

    @property
    def integrand(self):
        return self.args[0]

    @property
    def variables(self):
        return self.args[1]

    @property
    def mean(self):
        return self.args[2]

    @property
    def cov(self):
        return self.args[3]

    @property
    def free_symbols(self):
        return ((self.integrand.free_symbols - set(self.variables)) | self.mean.free_symbols
                | self.cov.free_symbols)

    def _with(self, f):
        return GaussianMean(f, self.variables, self.mean, self.cov)

    def _eval_derivative(self, s):
        if s in self.variables:
            return sp.Integer(0)
        out = self._with(sp.diff(self.integrand, s)) if self.integrand.has(s) else sp.Integer(0)
        G, m, C = self.variables, self.mean, self.cov
        for a, ga in enumerate(G):
            dm = sp.diff(m[a], s)
            if dm != 0:
                out += dm * self._with(sp.diff(self.integrand, ga))
            for b, gb in enumerate(G):
                dc = sp.diff(C[a, b], s)
                if dc != 0:
                    out += sp.Rational(1, 2) * dc * self._with(sp.diff(self.integrand, ga, gb))
        return out

    def doit(self, **hints):
        """Wick's exact integral for a polynomial integrand, else self."""
        f = self.integrand.doit(**hints) if hints.get("deep", True) else self.integrand
        if not f.is_polynomial(*self.variables):
            return self._with(f)
        from .gaussian import wick
        return wick(f, list(self.variables), list(self.mean), [[self.cov[a, b] for b in range(len(self.variables))]
                                                             for a in range(len(self.variables))])

    def mc(self, values: dict, n: int = 200_000, seed: int = 0) -> tuple:
        """(estimate, standard error) of E f by plain Monte Carlo at the parameter values ``values``
        ({symbol: number})."""
        m = np.array([float(x.xreplace(values)) for x in self.mean])
        C = np.array(self.cov.xreplace(values), dtype=float)
        w, U = np.linalg.eigh(0.5 * (C + C.T))
        z = np.random.default_rng(seed).standard_normal((n, len(m)))
        x = m + (z * np.sqrt(np.clip(w, 0, None))) @ U.T
        f = sp.lambdify([list(self.variables)], self.integrand.xreplace(values), modules="numpy")
        v = np.broadcast_to(np.asarray(f(x.T), dtype=float), (n,))
        return float(v.mean()), float(v.std() / np.sqrt(n))

    def _latex(self, printer):
        G = ", ".join(printer._print(g) for g in self.variables)
        m = printer._print(sp.Matrix(list(self.mean)))
        return (r"\mathbb{E}_{(%s)\sim\mathcal{N}\left(%s,\ %s\right)}\left[%s\right]"
                % (G, m, printer._print(self.cov), printer._print(self.integrand)))

    def _sympystr(self, printer):
        return "E[%s; (%s) ~ N(%s, %s)]" % (printer._print(self.integrand),
                                             ", ".join(printer._print(g) for g in self.variables),
                                             printer._print(list(self.mean)), printer._print(self.cov.tolist()))
