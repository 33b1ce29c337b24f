"""Φ, ∇Φ and the SGD-noise constants ν of a spec, evaluated by its generated module (compiled).

The matrix-level flow (``symattn.spectral``) needs ∇Φ at every evaluation of its vector field and ν
at every noise step; the Python quadrature of ``derivation.potential`` costs ≈ 1 ms per ∇Φ on a
softmax L = 2 model, the generated module's ``phi_and_grad`` ≈ 26 µs. :func:`compiled_potential`
returns a :class:`CompiledPotential`: those evaluations by the module of the spec's smallest hierarchy
(truncation 2: Φ, ∇Φ and ν do not depend on the truncation), and what else the flow reads — the names,
the full-matrix split of the gradient, the existence checks, the quadrature orders of the spec's state — from
a :class:`PotentialRecord`, plain data kept with the system's record in the per-user derivation store
(``codegen.warm``, ``derivation.store``). So a second run of a model neither derives (SymPy) nor compiles (Numba),
and a warm one does not even import SymPy: it loads the record and the module. The moment hierarchies integrate a
system whose potential is this one too (``codegen.warm.runnable``), and an untied student's slaved means take Φ's
exact Hessian in the means from it (the module's ``phi_mean_hessian``). The split and the checks are the Python
potential's own objects (``derivation.split``), so the two agree to the quadrature's round-off
(``tests/test_spectral.py``, ``tests/test_warm.py``).
"""
from __future__ import annotations

import numpy as np

from ..derivation.split import growth_limits, theta_of
from ..symbolic.calibration import Calibrated, TermRecord

MIN_TRUNCATION = 2          # the smallest hierarchy every kind derives; its module holds Φ, ∇Φ and ν


class Name:
    """An order parameter by name (what the flow reads of ``symbolic.gaussian.OrderParameters``' symbols)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return getattr(other, "name", None) == self.name

    def __hash__(self):
        return hash(self.name)


class NamedParameters:
    """The order parameters m_k, Ω_kl, Ψ_kl of a potential by their names (``OrderParameters`` without SymPy)."""

    def __init__(self, op, K: int):
        self._m = {k: op.m(k).name for k in range(K) if op.m(k) != 0}
        self._omega = {(a, b): op.omega(a, b).name for a in range(K) for b in range(K)}
        self._psi = {(a, b): op.psi(a, b).name for a in range(K) for b in range(K)}

    def m(self, k):
        return Name(self._m[k]) if k in self._m else 0

    def omega(self, a, b):
        return Name(self._omega[a, b])

    def psi(self, a, b):
        return Name(self._psi[a, b])


class ExpectationRecord:
    """What evaluating one expectation by its compiled function needs besides the function: its θ names, whether
    it has quadrature terms, and where those exist (``split.GrowthLimit`` at β = 1); and what calibrating its orders
    at a new state needs (``RecordCalibration``): the terms' ``calibration.TermRecord``, the tolerance, the start
    order and whether the tolerance is relative."""

    def __init__(self, E):
        self.names = tuple(E.names)
        self.has_quadrature = bool(E.base_terms)
        self.limits = growth_limits(E.base_terms)
        self.terms = [TermRecord(t) for t in E.base_terms]
        self.tol, self.start_order, self.relative = E.tol, E.start_order, E.relative


class _Checked:
    """θ by names and the existence checks of a record's growth limits (``split.GrowthLimit``, scaled to β)."""

    names: tuple
    _limits: list

    def theta(self, values) -> np.ndarray:
        return theta_of(self.names, values)

    def check_existence(self, theta) -> None:
        for limit in self._limits:
            limit.check(theta)


class RecordCalibration(Calibrated, _Checked):
    """The calibration (``symbolic.calibration.Calibrated``) of one expectation of a record at a new state, by the
    generated module's compiled kernels (``codegen.systems.compiled_terms``) — the same steps, evaluations and so
    orders as the derived expectation's calibration by those kernels, without SymPy."""

    def __init__(self, record: ExpectationRecord, module, name: str, law):
        from .systems import compiled_terms
        self.quad_terms, self.names = record.terms, record.names
        self.tol, self.start_order, self.relative = record.tol, record.start_order, record.relative
        self._limits = [limit.scaled(law[1]) for limit in record.limits]
        self._term_values = compiled_terms(module, name, law[1])
        self._module, self._name, self._law = module, name, law
        self.order, self.error = None, 0.0

    def value_at_order(self, values) -> float:
        """The expectation at θ with the orders just calibrated (the module's function, those orders set)."""
        self._module.set_orders(self._law[1], {self._name: self.order})
        out = getattr(self._module, self._name)(self.theta(values), self._law)
        return float(out[0] if isinstance(out, tuple) else out)


class PotentialRecord:
    """The compiled potential of a derived system as plain data — no SymPy object, so a warm run loads it without
    importing SymPy (part of ``codegen.warm.SystemRecord``): Φ's ``ExpectationRecord`` and quadrature tolerance, the
    order parameters' names (``NamedParameters``), the gradient split (``split.GradientSplit``), each ν's
    ``ExpectationRecord``, the generated module's source and the quadrature orders calibrated so far, per
    (β, initial laws)."""

    def __init__(self, system):
        P = system.potential
        self.phi, self.tol = ExpectationRecord(P), P.tol
        self.op = NamedParameters(P.op, P.spec.K)
        self.split = P.split
        self.nu = {name: ExpectationRecord(E) for name, E in system.nu.items()}
        self.source = system._source
        quad = {"phi_and_grad": P, **system.nu}
        quad = {name: E for name, E in quad.items() if E.base_terms}
        states = set.intersection(*(set(E._orders) for E in quad.values())) if quad else set()
        self.orders = {state: {name: E._orders[state][0] for name, E in quad.items()} for state in states}

    def orders_at(self, spec):
        """{expectation: orders} calibrated at the spec's β and initial laws; {} without quadrature; None where
        not calibrated yet."""
        if not self.phi.has_quadrature and not any(E.has_quadrature for E in self.nu.values()):
            return {}
        return self.orders.get((spec.inverse_temperature, spec.initial_laws))


class _Compiled(_Checked):
    """What a compiled expectation shares: θ by names, the existence checks of its record, and every other attribute
    from the symbolic expectation (``_fallback``, loaded on first use)."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._fallback(), name)


class CompiledExpectation(_Compiled):
    """A value-only expectation (ν) evaluated by a compiled function; anything else from the Python
    expectation (``fallback``: loaded on first use)."""

    def __init__(self, record: ExpectationRecord, fn, law, order, fallback, own=lambda: None):
        self.names, self.has_quadrature, self.order = record.names, record.has_quadrature, order
        self._limits = [limit.scaled(law[1]) for limit in record.limits]
        self._fn, self._law, self._fallback, self._own = fn, law, fallback, own

    def value(self, values) -> float:
        th = theta_of(self.names, values)
        if self.has_quadrature:
            self.check_existence(th)
            self._own()
        return float(self._fn(th, self._law))


class CompiledPotential(_Compiled):
    """Φ, ∇Φ (``phi_and_grad``) and ν (``nu``: name → ``CompiledExpectation``) of a spec by its generated module,
    with the names, the gradient split and the existence checks of its ``PotentialRecord``, and Φ's Hessian in the
    means (``phi_mean_hessian``): all the matrix-level flow and the hierarchies read. Anything else (calibration,
    the symbols) is the Python potential's (``system()``: the derived system, loaded on first use — a warm run never
    needs it)."""

    def __init__(self, record: PotentialRecord, module, spec, system):
        self.spec, self.names, self.op, self.split = spec, record.phi.names, record.op, record.split
        self.tol = record.tol
        self.has_quadrature = record.phi.has_quadrature
        self.label_noise, self.beta = spec.label_noise_variance, spec.inverse_temperature
        self._law = np.array([self.label_noise, self.beta])
        self._limits = [limit.scaled(self.beta) for limit in record.phi.limits]
        self._phi_and_grad, self._system, self._derive = module.phi_and_grad, None, system
        self._mean_hessian = getattr(module, "phi_mean_hessian", None)
        self._mean_index = {int(p): i for i, p in enumerate(getattr(module, "MEAN_PARAMS", ()))}
        orders = record.orders_at(spec) or {}
        self.order = orders.get("phi_and_grad")
        # the module serves every state of its structure, its orders are set per β: each evaluation sets this
        # state's (a dictionary assignment), so two potentials of one structure can be used in turn
        self._own = (lambda: module.set_orders(self.beta, orders)) if orders else (lambda: None)
        self.nu = {name: CompiledExpectation(E, getattr(module, name), self._law, orders.get(name),
                                             lambda name=name: self._derived().nu[name], self._own)
                   for name, E in record.nu.items()}

    def own_orders(self) -> None:
        """Set this state's quadrature orders in the module (before calling its functions directly)."""
        self._own()

    def _derived(self):
        """The derived system (loaded from the store on first use)."""
        if self._system is None:
            self._system = self._derive()
        return self._system

    def _fallback(self):
        return self._derived().potential

    def value_and_gradient(self, values):
        """(Φ(θ), ∂Φ/∂θ) in ``names`` order, as ``Potential.value_and_gradient``."""
        th = theta_of(self.names, values)
        if self.has_quadrature:
            self.check_existence(th)
            self._own()
        val, grad = self._phi_and_grad(th, self._law)
        return float(val), np.array(grad, dtype=float)

    def value(self, values) -> float:
        return self.value_and_gradient(values)[0]

    def mean_hessian(self, values, positions) -> np.ndarray:
        """∂²Φ/∂θ_a∂θ_b over ``positions`` (means m_k), exact, by the module's ``phi_mean_hessian``
        (``Potential.mean_hessian``: the slaved means' Newton step and velocity, docs/theory.md §6)."""
        th = theta_of(self.names, values)
        if self._mean_hessian is None or any(int(p) not in self._mean_index for p in positions):
            return self._fallback().mean_hessian(th, positions)
        if self.has_quadrature:
            self.check_existence(th)
            self._own()
        idx = [self._mean_index[int(p)] for p in positions]
        return np.asarray(self._mean_hessian(th, self._law), dtype=float)[np.ix_(idx, idx)]

    def split_gradients(self, grads) -> tuple:
        return self.split.matrices(grads)

    def split_gradient(self, grad):
        return self.split.gradients(grad)

    def gradients(self, values):
        return self.split.gradients(self.value_and_gradient(values)[1])

    def gradient_matrices(self, thetas) -> tuple:
        """(GΩ, GΨ), each (R, K, K), at the R rows of ``thetas`` (``Potential.gradient_matrices``)."""
        f, law = self._phi_and_grad, self._law
        thetas = np.asarray(thetas, dtype=float)
        if self.has_quadrature:
            for row in thetas:
                self.check_existence(row)
            self._own()
        return self.split.matrices(np.array([f(row, law)[1] for row in thetas]))

    def gamma(self, values) -> np.ndarray:
        return self.gradients(values).gamma


def compiled_potential(spec, tol: float = 1e-8) -> CompiledPotential:
    """The compiled Φ, ∇Φ and ν of ``spec`` (module docstring). Warm — the store holds the model's record with
    orders for this β and initial state — it loads the record and the module only (no SymPy, no derivation);
    else it derives (or loads the derivation), compiles, calibrates and stores the record."""
    from ..derivation import min_truncation
    from ..spec import require_spec
    from .warm import runnable
    spec = require_spec(spec, "compiled_potential")
    return runnable(spec, max(MIN_TRUNCATION, min_truncation(spec)), tol).potential
