"""A derived system for a warm run: plain data and the compiled module, no SymPy (docs/theory.md §4–§7).

Integrating a moment hierarchy (``symattn.integration``) reads the system's state layout, sparse terms,
coefficient rules and columns, and evaluates Φ, ∇Φ and ν by the generated module only. A
:class:`SystemRecord` keeps exactly that — those arrays and tuples and the compiled potential's
``PotentialRecord`` (module source, names, gradient split, existence limits, quadrature orders per state) —
beside the pickled derivation in the per-user store (``derivation.store``, ``r_<key>.pkl``), so it loads
without importing SymPy. :func:`runnable` gives the system of (spec, M): warm, a ``System`` rebuilt from the
record whose potential and ν are the module's (``CompiledPotential``: Φ, ∇Φ, ν and Φ's Hessian in the means; the
symbolic parts — the equations, a calibration at another state — load from the derivation on first use); cold, the
same from the system just derived (or loaded from the store of derivations), compiled and calibrated, its record
then stored. So warm and cold runs compute the same numbers with the same module functions and orders
(``tests/test_warm.py``).
"""
from __future__ import annotations

import numpy as np

from ..derivation.system import System
from .potential import CompiledPotential, PotentialRecord


class SystemRecord:
    """A derived system as plain data (module docstring): everything ``System`` holds but the spec (the caller's)
    and the symbolic Φ and ν (their compiled functions' ``PotentialRecord`` instead)."""

    def __init__(self, system):
        self.description, self.truncation, self.alphabet = system.description, system.truncation, system.alphabet
        self.words, self.coefficient_rules, self.terms = system.words, system.coefficient_rules, system.terms
        self.theta_words, self.columns = system.theta_words, system.columns
        self.mean_indices, self.supports_noise = list(system.mean_indices), system.supports_noise
        self.potential = PotentialRecord(system)

    def calibrate(self, spec, module) -> dict:
        """{expectation: orders} of the quadrature terms calibrated at the spec's β and free initial state (means 0)
        by the module's compiled kernels (``codegen.potential.RecordCalibration``) — the orders
        ``codegen.systems.calibrated_orders`` gives the derived system there, without it."""
        from .potential import RecordCalibration
        from .systems import free_theta
        P = self.potential
        law = np.array([spec.label_noise_variance, spec.inverse_temperature])
        theta0 = free_theta(spec, self.words, self.theta_words, len(self.words) + len(self.mean_indices))
        quad = {name: E for name, E in {"phi_and_grad": P.phi, **P.nu}.items() if E.has_quadrature}
        return {name: RecordCalibration(E, module, name, law).calibrate(theta0)[0] for name, E in quad.items()}

    def system(self, spec, module, derived) -> System:
        """The runnable system at ``spec``'s state: Φ and ν by ``module`` with this record's orders for that state;
        ``derived()`` gives the derived system where a symbolic part is asked for."""
        P = CompiledPotential(self.potential, module, spec, derived)
        system = System(self.description, spec, self.truncation, self.alphabet, self.words, self.coefficient_rules,
                        self.terms, self.theta_words, P, self.columns, self.mean_indices, P.nu, self.supports_noise)
        system._module, system._source = module, self.potential.source
        return system


def derived(system) -> System:
    """The derived (symbolic) system behind a runnable one (loaded on first use when warm); a derived one itself."""
    P = system.potential
    return P._derived() if isinstance(P, CompiledPotential) else system


def runnable(spec, truncation: int | None = None, tol: float = 1e-8, build=None) -> System:
    """The system of ``spec`` at truncation M ready to integrate, its Φ and ν by the compiled module (module
    docstring): warm from its record when the store holds one with quadrature orders for the spec's β and initial
    laws, else from ``build()`` (default: ``derive``, itself from the store of derivations where possible) compiled,
    calibrated and recorded — the same object either way, so a warm run computes what the cold one did."""
    from ..derivation import check_size, derive, store
    from .load import cached_module
    M = truncation or spec.truncation
    check_size(spec, M)
    build = build or (lambda: derive(spec, M, tol=tol))
    key = store.key(spec, M, tol)
    record = store.load_record(key)
    if isinstance(record, SystemRecord):
        module = cached_module(record.potential.source)
        if record.potential.orders_at(spec) is None:                 # a new state: calibrate it here
            record.potential.orders[(spec.inverse_temperature, spec.initial_laws)] = record.calibrate(spec, module)
            store.save_record(key, record)
        return record.system(spec, module, build)
    from .systems import compiled
    system = build()
    module = compiled(system)
    record = SystemRecord(system)
    store.save_record(key, record)
    return record.system(spec, module, lambda: system)
