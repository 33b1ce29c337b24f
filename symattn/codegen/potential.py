"""Φ, ∇Φ and the SGD-noise constants ν of a spec, evaluated by its generated module (compiled).

The matrix-level flow (``symattn.spectral``) needs ∇Φ at every evaluation of its vector field and ν
at every noise step; the Python quadrature of ``derivation.potential`` costs ≈ 1 ms per ∇Φ on a
softmax L = 2 model, the generated module's ``phi_and_grad`` ≈ 26 µs. :func:`compiled_potential`
returns the spec's :class:`~symattn.derivation.potential.Potential` with those evaluations routed
to the module of the spec's smallest hierarchy (truncation 2: Φ, ∇Φ and ν do not depend on the
truncation). That system comes from the per-user derivation store (``derivation.store``), so a
second run of a model neither derives (SymPy) nor compiles (Numba): it loads both.

Everything else — names, the full-matrix split of the gradient, the Hessian in the means, the
quadrature orders — is the Python potential's own, so the two agree to the quadrature's round-off
(``tests/test_spectral.py`` compares them).
"""
from __future__ import annotations

import numpy as np

MIN_TRUNCATION = 2          # the smallest hierarchy every kind derives; its module holds Φ, ∇Φ and ν


class CompiledExpectation:
    """A value-only expectation (ν) of the Python potential evaluated by a compiled function."""

    def __init__(self, base, fn, law):
        self._base, self._fn, self._law = base, fn, law

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._base, name)

    def value(self, values) -> float:
        th = self._base.theta(values)
        if self._base.quad_terms:
            self._base.check_existence(th)
        return float(self._fn(th, self._law))


class CompiledPotential:
    """``Potential`` with Φ, ∇Φ (``phi_and_grad``) and ν (``nu``: name → expectation) compiled; every
    other attribute is the Python potential's."""

    def __init__(self, system, module):
        base = system.potential
        self._base, self._phi_and_grad = base, module.phi_and_grad
        self._law = np.array([base.label_noise, base.beta])
        self.nu = {name: CompiledExpectation(E, getattr(module, name), self._law) for name, E in system.nu.items()}

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._base, name)

    def value_and_gradient(self, values):
        """(Φ(θ), ∂Φ/∂θ) in ``names`` order, as ``Potential.value_and_gradient``."""
        th = self._base.theta(values)
        if self._base.quad_terms:
            self._base.check_existence(th)
        val, grad = self._phi_and_grad(th, self._law)
        return float(val), np.array(grad, dtype=float)

    def value(self, values) -> float:
        return self.value_and_gradient(values)[0]

    def gradients(self, values):
        return self._base.split_gradient(self.value_and_gradient(values)[1])

    def gradient_matrices(self, thetas) -> tuple:
        """(GΩ, GΨ), each (R, K, K), at the R rows of ``thetas`` (``Potential.gradient_matrices``)."""
        base, f, law = self._base, self._phi_and_grad, self._law
        thetas = np.asarray(thetas, dtype=float)
        if base.quad_terms:
            for row in thetas:
                base.check_existence(row)
        return base.split_gradients(np.array([f(row, law)[1] for row in thetas]))

    def gamma(self, values) -> np.ndarray:
        return self.gradients(values).gamma


def compiled_potential(spec, tol: float = 1e-8) -> CompiledPotential:
    """The compiled Φ, ∇Φ and ν of ``spec`` (module docstring); derived and compiled on first use."""
    from ..derivation import derive
    from ..derivation.hierarchy import min_truncation
    from ..spec import require_spec
    from .systems import compiled
    spec = require_spec(spec, "compiled_potential")
    system = derive(spec, max(MIN_TRUNCATION, min_truncation(spec)), tol=tol)
    return CompiledPotential(system, compiled(system))
