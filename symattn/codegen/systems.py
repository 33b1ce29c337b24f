"""Generated modules of the derived systems: what each system's module contains beyond the common
part of ``emit.module_source`` (its coefficient lines; for untied systems the slaved-mean Newton
solver and the right-hand side with the mean velocities), and their compilation.

``source(system)`` is the module text (deterministic: the same model structure and truncation give
the same bytes); ``compiled(system)`` imports it through the verified per-user cache (``load``),
once per system object. The derivation knows nothing of code: this module reads its data.
"""
from __future__ import annotations

from ..derivation.noise import noise_expectation_items, quadrature_nu_names
from ..derivation.untied import FD_STEP, NEWTON_STEPS, NEWTON_TOL, UntiedSystem
from .emit import gamma_lines, gradient_matrix_lines, module_source, template
from .load import cached_module


def noise_coefficient_lines(coef_names, nu: dict) -> list:
    """Generated-code version of :func:`fill_noise_coefficients` (params[1] = ε, params[2] = s²; a
    non-polynomial ν from params[3:], ``quadrature_nu_names`` order, so that the right-hand side holds
    no state)."""
    quad = quadrature_nu_names(nu)
    lines = []
    for name in nu:
        value = f"params[{3 + quad.index(name)}]" if name in quad else f"{name}(theta, params[2])"
        lines.append(f"    coef[{coef_names.index(name)}] = params[1] * {value}")
    return lines


def noise_values_source(system) -> str:
    """``noise_values(mu, s2)``: the non-polynomial ν at the state, for the caller to pass as params[3:]."""
    quad = quadrature_nu_names(system.nu)
    if not quad:
        return ""
    means = "    theta = _solve_means(theta, s2)\n" if isinstance(system, UntiedSystem) else ""
    return ("\n\ndef noise_values(mu, s2):\n"
            '    """Non-polynomial SGD-noise constants ν at the state (s2: the label-noise variance): params[3:]\n'
            '    of ``rhs``."""\n'
            f"    theta = mu[THETA_WORDS]\n{means}"
            f"    return np.array([{', '.join(f'{n}(theta, s2)' for n in quad)}])\n")


def symmetric_coefficient_lines(system) -> list:
    """Generated-code version of ``MomentSystem.coefficients``."""
    K = system.spec.K
    lines = ["    coef[1] = params[0]"] + gamma_lines(system.potential)
    lines += [f"    coef[{2 + k * K + l}] = gamma[{k}, {l}]" for k in range(K) for l in range(K)]
    return lines + noise_coefficient_lines(system.coef_names, system.nu)


def untied_coefficient_lines(system) -> list:
    """Generated-code version of ``UntiedSystem.coefficients`` (the slaved means first)."""

    K, P = system.spec.K, system.potential
    lines = ["    theta = _solve_means(theta, params[2])", "    phi, g = phi_and_grad(theta, params[2])",
             "    coef[1] = params[0]"] + gradient_matrix_lines(P)
    o = 2 + K
    for k in range(K):
        for l in range(K):
            lines.append(f"    coef[{o + k * K + l}] = GO[{k}, {l}]")
            lines.append(f"    coef[{o + K * K + k * K + l}] = GP[{k}, {l}]")
            lines.append(f"    coef[{o + 2 * K * K + k * K + l}] = GO[{k}, {l}] + GP[{k}, {l}]")
    for k in system.mean_trainable:
        A, B = (k, "A"), (k, "B")
        parts = []
        for l in range(K):
            Ml, Tl = system.letter(l, "S"), system.letter(l, "T")
            parts.append(f"GO[{k}, {l}] * (mu[{system.index((Ml, B))}] + mu[{system.index((A, Ml))}])")
            parts.append(f"GP[{k}, {l}] * (mu[{system.index((Tl, B))}] + mu[{system.index((A, Tl))}])")
        lines.append(f"    psi = 2.0 * ({' + '.join(parts)})")
        lines.append(f"    coef[{2 + k}] = -psi / (mu[{system.index((A,))}] + mu[{system.index((B,))}])")
    return lines + noise_coefficient_lines(system.coef_names, system.nu)


def untied_extra_source(system) -> str:
    """The slaved means: Newton onto dΦ/dm = 0 and their velocity (docs/theory.md §6)."""
    jit = "" if system.potential.quad_terms else "@njit(cache=True)\n"
    mp = list(system.mean_pos)
    ms = [system.mean_state[k] for k in system.mean_trainable]
    return template("untied_means.py.tmpl").substitute(
        jit=jit, mean_pos=repr(mp), mean_state=repr(ms), n_means=len(mp), fd_step=repr(FD_STEP),
        newton_steps=NEWTON_STEPS, newton_tol=repr(NEWTON_TOL))


def untied_rhs_source(system) -> str:
    """The untied right-hand side: the moments, then the velocities of the slaved means."""
    jit = "" if system.potential.quad_terms else "@njit(cache=True)\n"
    return template("untied_rhs.py.tmpl").substitute(jit=jit)


def source(system) -> str:
    """The generated module of a derived system; quadrature calibrated at the free initial state."""
    P = system.potential
    untied = isinstance(system, UntiedSystem)
    theta0 = (system.pre_fast_state("free") if untied else system.initial("free"))[system.theta_words]
    if P.quad_terms and P.order is None:
        P.calibrate(theta0)
    nus = noise_expectation_items(system.nu, theta0)
    if untied:
        text = module_source(system, system.kind, untied_coefficient_lines(system),
                             extra=untied_extra_source(system), expectations=nus)
        return text + untied_rhs_source(system) + noise_values_source(system)
    return module_source(system, system.kind, symmetric_coefficient_lines(system), expectations=nus) + \
        noise_values_source(system)


def compiled(system):
    """Import (compiling on first use) the generated module of ``system``, cached by content."""
    mod = getattr(system, "_module", None)
    if mod is None:
        stored = getattr(system, "_source", None)
        system._source = stored or source(system)
        mod = cached_module(system._source)
        system._module = mod
        if stored is None:
            from ..derivation import store
            store.save(system)                  # a later process skips the derivation and the printing
    return mod
