"""The generated module of a derived ``System``: its coefficient lines printed from the system's
coefficient rules, for systems with slaved (untied) means the Newton solver of ``derivation.means``
(the same text the NumPy reference runs) and the right-hand side with the mean velocities, and its
compilation.

``source(system)`` is the module text (deterministic: the same model structure and truncation give
the same bytes, whatever the initial laws, ε or β); ``compiled(system)`` imports it through the verified
per-user cache (``load``), once per system object, and sets the quadrature orders calibrated at the
system's initial state (``register_orders``). The derivation knows nothing of code: this module reads its data.
"""
from __future__ import annotations

import numpy as np

from ..derivation import system as S
from ..derivation.means import FD_STEP, algorithm_source
from ..derivation.split import quadrature_nu_names
from .load import cached_module

# printing a module needs SymPy (``emit``, ``derivation.potential``), imported where a module is printed or
# calibrated: ``compiled`` of a warm system (``codegen.warm``) imports neither


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
    from .emit import gradient_entries
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
    from .emit import template
    jit = _jit(system)
    return template("untied_means.py.tmpl").substitute(
        jit=jit, mean_pos=repr(list(system.mean_pos)), mean_state=repr([system.mean_state[k] for k in system.mean_trainable]),
        n_means=len(system.mean_pos), fd_step=repr(FD_STEP), algorithm=algorithm_source(jit))


def free_theta(spec, words, theta_words, size: int) -> np.ndarray:
    """θ at the free initial state of a state vector of ``size`` entries whose first are the ``words``' moments
    (means 0 before the fast phase): where the quadrature is calibrated."""
    from ..initial import free_moments
    y0 = np.zeros(size)
    y0[:len(words)] = free_moments(spec, words)
    return y0[theta_words]


def _theta0(system):
    return free_theta(system.spec, system.words, system.theta_words, system.size)


def _expectations(system) -> list:
    return [system.potential, *system.nu.values()]


def source(system) -> str:
    """The generated module of a derived system. It depends on the model's structure and truncation only: the
    quadrature orders are run-time data (``register_orders``), so every initial law and β share one module
    (imported and compiled once)."""
    from .emit import module_source, template
    slaved = bool(system.mean_indices)
    theta = "_solve_means(mu[THETA_WORDS], params[2:4])" if slaved else "mu[THETA_WORDS]"
    nus = [(E, name, name.replace("_", "")) for name, E in system.nu.items()]
    text = module_source(system, system.description, coefficient_lines(system), theta=theta,
                         extra=slaved_means_source(system) if slaved else "", expectations=nus)
    if slaved:
        text += template("untied_rhs.py.tmpl").substitute(jit=_jit(system))
    return text + noise_values_source(system)


def module_file(system) -> str:
    """The module ``symattn derive`` writes: ``source`` and, where Φ or ν has quadrature terms, a last line
    setting the orders calibrated at the spec's free initial state at β = 1, so that the file runs on its
    own there (another state or β: ``set_orders``)."""
    text = source(system)
    orders = calibrated_orders(system, beta=1.0)
    if not orders:
        return text
    from ..derivation.potential import at_beta
    P = system.potential
    with at_beta(_expectations(system), 1.0):
        error = P.error
    return text + (f"\n\n# the quadrature orders calibrated at {system.spec.name}'s free initial state, β = 1 (error "
                   f"estimate {error:.1e})\nset_orders(1.0, {orders!r})\n")


def calibrated_orders(system, beta: float | None = None, mod=None) -> dict:
    """{expectation: nodes per dimension of each term} calibrated at the free initial state of the system's
    spec at β (the spec's by default) — from the system when it holds them for this state, else
    calibrated now (by ``mod``'s compiled kernels when given, ``compiled_terms``: ≈ 100× cheaper than the
    Python quadrature); {} without quadrature terms."""
    P = system.potential
    quad = {"phi_and_grad": P, **system.nu}
    quad = {name: E for name, E in quad.items() if E.base_terms}
    if not quad:
        return {}
    from ..derivation.potential import at_beta
    b = P.beta if beta is None else float(beta)
    with at_beta(_expectations(system), b):
        theta0 = None
        for name, E in quad.items():
            if E.order is None:
                theta0 = _theta0(system) if theta0 is None else theta0
                with E.evaluated_by(compiled_terms(mod, name, b) if mod is not None else None):
                    E.calibrate(theta0)
        return {name: E.order for name, E in quad.items()}


def compiled_terms(mod, name: str, beta: float):
    """``(i, θ, (n, kind), half_width) -> (E f, ∂E f/∂θ)`` of term i of expectation ``name`` by the module's
    compiled kernels (the fallback kernel where the first returns NaN, as ``phi_and_grad`` does), its data
    packed for that rule and β: ``GaussianExpectation.evaluated_by``."""
    from ..symbolic.quadrature_rule import pack, rule_1d, scaled_law
    terms, kernels = mod._TERMS[name], mod._KERNELS[name]

    def evaluate(i, theta, rule, half_width=None):
        P, mu0, mut, cov0, covt, _, hw = terms[i]
        data = pack(P, *scaled_law(beta, mu0, mut, cov0, covt), rule_1d(rule[0], hw if half_width is None
                                                                         else half_width, rule[1]))
        theta = np.ascontiguousarray(theta, dtype=float)
        f, g = kernels[i][0](theta, data)
        if f != f and len(kernels[i]) > 1:
            f, g = kernels[i][1](theta, data)
        return f, np.asarray(g, dtype=float)
    return evaluate


def register_orders(system, mod) -> bool:
    """Give the module the quadrature orders of the system's spec — its β and initial state
    (``calibrated_orders``) — for the run about to start; the compiled integrands are β- and state-free, so
    nothing recompiles. True when they were calibrated now (the system then holds them: ``compiled`` stores
    it, so that a later process at this state and β skips the calibration)."""
    from .potential import CompiledPotential
    if isinstance(system.potential, CompiledPotential):    # a warm system (``codegen.warm``): its record's orders
        system.potential.own_orders()
        return False
    expectations = _expectations(system)
    known = sum(len(E._orders) for E in expectations)
    orders = calibrated_orders(system, mod=mod)
    if orders:
        mod.set_orders(system.potential.beta, orders)
    return sum(len(E._orders) for E in expectations) > known


def compiled(system):
    """Import (compiling on first use) the generated module of ``system``, cached by content, with the
    orders of the system's state set — at every call: one module serves every state of one structure."""
    mod = getattr(system, "_module", None)
    new = mod is None and getattr(system, "_source", None) is None
    if mod is None:
        system._source = getattr(system, "_source", None) or source(system)
        mod = system._module = cached_module(system._source)
    if register_orders(system, mod) or new:
        from ..derivation import store
        store.save(system)          # a later process skips the derivation, the printing and this calibration
    return mod
