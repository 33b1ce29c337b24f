"""The generated module of a derived ``System``: its coefficient lines printed from the system's
coefficient rules, for systems with slaved (untied) means the Newton solver of ``derivation.means``
(the same text the NumPy reference runs) and the right-hand side with the mean velocities, and its
compilation.

``source(system)`` is the module text (deterministic: the same model structure and truncation give
the same bytes); ``compiled(system)`` imports it through the verified per-user cache (``load``),
once per system object. The derivation knows nothing of code: this module reads its data.
"""
from __future__ import annotations

import numpy as np

from ..derivation import system as S
from ..derivation.means import FD_STEP, algorithm_source
from ..derivation.noise import noise_expectation_items, quadrature_nu_names
from .emit import gradient_entries, module_source, template
from .load import cached_module


def noise_value(name: str, nu: dict) -> str:
    """Generated-code value of ν_name: a closed form at (θ, s², β = params[2:4]), or for a non-polynomial
    ν params[4 + j] (``quadrature_nu_names`` order), so that the right-hand side holds no state."""
    quad = quadrature_nu_names(nu)
    return f"params[{4 + quad.index(name)}]" if name in quad else f"{name}(theta, params[2:4])"


def noise_values_source(system) -> str:
    """``noise_values(mu, law)``: the non-polynomial ν at the state, for the caller to pass as params[4:]."""
    quad = quadrature_nu_names(system.nu)
    if not quad:
        return ""
    means = "    theta = _solve_means(theta, law)\n" if system.mean_pos else ""
    return ("\n\ndef noise_values(mu, law):\n"
            '    """Non-polynomial SGD-noise constants ν at the state (law = (label-noise variance s², inverse\n'
            '    temperature β) = params[2:4]): params[4:] of ``rhs``."""\n'
            f"    theta = mu[THETA_WORDS]\n{means}"
            f"    return np.array([{', '.join(f'{n}(theta, law)' for n in quad)}])\n")


def coefficient_lines(system) -> list:
    """Generated-code version of ``derivation.state.coefficients``: one line (or two) per coefficient rule."""
    G = gradient_entries(system.potential)
    lines = []
    for j, c in enumerate(system.coefficient_rules):
        if c.source == S.ONE:
            lines.append(f"    coef[{j}] = 1.0")
        elif c.source == S.DECAY:
            lines.append(f"    coef[{j}] = params[0]")
        elif c.source == S.GRADIENT:
            lines.append(f"    coef[{j}] = {G[c.args]}")
        elif c.source == S.MEAN_FORCE:
            k, parts, (a, b) = c.args
            psi = " + ".join(f"{G[mat, k, l]} * (mu[{i}] + mu[{i2}])" for mat, l, i, i2 in parts)
            lines += [f"    psi = 2.0 * ({psi})", f"    coef[{j}] = -psi / (mu[{a}] + mu[{b}])"]
        elif c.source == S.NOISE:
            lines.append(f"    coef[{j}] = params[1] * {noise_value(c.args[0], system.nu)}")
        elif c.source != S.ZERO:
            raise ValueError(f"unknown coefficient source {c.source!r}")
    return lines


def _jit(system) -> str:
    """The decorator of the module-level functions: none when Φ has quadrature terms (their compiled
    expectations are called from Python; Numba would re-optimise the integrands)."""
    return "" if system.potential.quad_terms else "@njit(cache=True)\n"


def slaved_means_source(system) -> str:
    """The slaved means: ∂Φ/∂m, its Jacobian, and the Newton solver and velocity of ``derivation.means``."""
    jit = _jit(system)
    return template("untied_means.py.tmpl").substitute(
        jit=jit, mean_pos=repr(list(system.mean_pos)), mean_state=repr([system.mean_state[k] for k in system.mean_trainable]),
        n_means=len(system.mean_pos), fd_step=repr(FD_STEP), algorithm=algorithm_source(jit))


def _theta0(system):
    """θ at the free initial state (means 0 before the fast phase): where the quadrature is calibrated."""
    from ..initial import free_moments
    y0 = np.zeros(system.size)
    y0[:system.n_moments] = free_moments(system.spec, system.words)
    return y0[system.theta_words]


def _expectations(system) -> list:
    return [system.potential, *system.nu.values()]


def source(system) -> str:
    """The generated module of a derived system; quadrature calibrated at the free initial state, at
    β = 1: the module does not depend on β (``compiled`` registers the orders of the spec's β)."""
    from ..derivation.potential import at_beta
    P = system.potential
    theta0 = _theta0(system)
    with at_beta(_expectations(system), 1.0):
        if P.quad_terms and P.order is None:
            P.calibrate(theta0)
        nus = noise_expectation_items(system.nu, theta0)
        slaved = bool(system.mean_indices)
        theta = "_solve_means(mu[THETA_WORDS], params[2:4])" if slaved else "mu[THETA_WORDS]"
        text = module_source(system, system.description, coefficient_lines(system), theta=theta,
                             extra=slaved_means_source(system) if slaved else "", expectations=nus)
    if slaved:
        text += template("untied_rhs.py.tmpl").substitute(jit=_jit(system))
    return text + noise_values_source(system)


def register_orders(system, mod) -> None:
    """At a β other than 1, the quadrature orders calibrated there (at the free initial state), given
    to the module (``set_orders``); the compiled integrands are β-free, so nothing recompiles."""
    P = system.potential
    if not P.base_terms or P.beta == 1.0:
        return
    fresh = P.order is None or any(E.base_terms and E.order is None for E in system.nu.values())
    theta0 = _theta0(system)
    if P.order is None:
        P.calibrate(theta0)
    noise_expectation_items(system.nu, theta0)
    orders = {"phi_and_grad": P.order, **{name: E.order for name, E in system.nu.items() if E.base_terms}}
    mod.set_orders(P.beta, orders)
    if fresh and getattr(system, "_source", None) is not None:
        from ..derivation import store
        store.save(system)                      # a later process at this β skips the calibration


def compiled(system):
    """Import (compiling on first use) the generated module of ``system``, cached by content."""
    mod = getattr(system, "_module", None)
    if mod is None:
        stored = getattr(system, "_source", None)
        system._source = stored or source(system)
        mod = cached_module(system._source)
        register_orders(system, mod)
        system._module = mod
        if stored is None:
            from ..derivation import store
            store.save(system)                  # a later process skips the derivation and the printing
    return mod
