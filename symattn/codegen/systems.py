"""Generated modules of the derived systems: what each system's module contains beyond the common
part of ``emit.module_source`` (its coefficient lines; for untied systems the slaved-mean Newton
solver and the right-hand side with the mean velocities), and their compilation.

``source(system)`` is the module text (deterministic: the same model structure and truncation give
the same bytes); ``compiled(system)`` imports it through the verified per-user cache (``load``),
once per system object. The derivation knows nothing of code: this module reads its data.
"""
from __future__ import annotations

from ..derivation.noise import noise_expectation_items
from ..derivation.untied import FD_STEP, NEWTON_STEPS, NEWTON_TOL, UntiedSystem
from .emit import gamma_lines, gradient_matrix_lines, module_source
from .load import cached_module


def noise_coefficient_lines(coef_names, nu: dict) -> list:
    """Generated-code version of :func:`fill_noise_coefficients` (params[1] = ε)."""
    lines = []
    for name, E in nu.items():
        fn = name + ("_cached" if E.quad_terms else "")
        lines.append(f"    coef[{coef_names.index(name)}] = params[1] * {fn}(theta)")
    return lines


def symmetric_coefficient_lines(system) -> list:
    """Generated-code version of ``MomentSystem.coefficients``."""
    K = system.spec.K
    lines = ["    coef[1] = params[0]"] + gamma_lines(system.potential)
    lines += [f"    coef[{2 + k * K + l}] = gamma[{k}, {l}]" for k in range(K) for l in range(K)]
    return lines + noise_coefficient_lines(system.coef_names, system.nu)


def untied_coefficient_lines(system) -> list:
    """Generated-code version of ``UntiedSystem.coefficients`` (the slaved means first)."""

    K, P = system.spec.K, system.potential
    lines = ["    theta = _solve_means(theta)", "    phi, g = phi_and_grad(theta)",
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
    return f'''
# ---- untied: means slaved to the critical manifold dΦ/dm = 0 (docs/theory.md §6) ----
MEAN_POS = np.array({mp!r}, dtype=np.int64)    # positions of the trainable means in θ
MEAN_STATE = np.array({ms!r}, dtype=np.int64)  # their entries in the state vector
N_MEANS = {len(mp)}


{jit}def _grad_m(theta):
    phi, g = phi_and_grad(theta)
    out = np.empty(N_MEANS)
    for j in range(N_MEANS):
        out[j] = g[MEAN_POS[j]]
    return out


{jit}def _jac_m(theta):
    J = np.empty((N_MEANS, N_MEANS))
    for j in range(N_MEANS):
        h = {FD_STEP!r} * max(1.0, abs(theta[MEAN_POS[j]]))
        tp = theta.copy()
        tm = theta.copy()
        tp[MEAN_POS[j]] += h
        tm[MEAN_POS[j]] -= h
        J[:, j] = (_grad_m(tp) - _grad_m(tm)) / (2.0 * h)
    return J


{jit}def _lin_solve(J, r):
    """Gaussian elimination with partial pivoting (tiny systems; no LAPACK in the compiled code)."""
    n = r.shape[0]
    a = J.copy()
    b = r.copy()
    for c in range(n):
        p = c
        for i in range(c + 1, n):
            if abs(a[i, c]) > abs(a[p, c]):
                p = i
        if p != c:
            for j in range(n):
                a[c, j], a[p, j] = a[p, j], a[c, j]
            b[c], b[p] = b[p], b[c]
        for i in range(c + 1, n):
            f = a[i, c] / a[c, c]
            for j in range(c, n):
                a[i, j] -= f * a[c, j]
            b[i] -= f * b[c]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        s = b[i]
        for j in range(i + 1, n):
            s -= a[i, j] * x[j]
        x[i] = s / a[i, i]
    return x


{jit}def _solve_means(theta):
    """Newton from the current means onto dΦ/dm = 0 (moments held fixed); NaN when it fails."""
    theta = theta.copy()
    if N_MEANS == 0:
        return theta
    for it in range({NEWTON_STEPS}):
        r = _grad_m(theta)
        if np.max(np.abs(r)) < {NEWTON_TOL!r} * (1.0 + np.max(np.abs(theta))):
            return theta
        step = _lin_solve(_jac_m(theta), r)
        for j in range(N_MEANS):
            theta[MEAN_POS[j]] -= step[j]
        if not np.all(np.isfinite(theta)):
            break
    for j in range(N_MEANS):
        theta[MEAN_POS[j]] = np.nan
    return theta


{jit}def _mean_velocity(theta, tdot):
    """dm*/dτ = −H_mm⁻¹ ∂_τ(dΦ/dm) at fixed m (implicit function theorem; central differences)."""
    nrm = np.max(np.abs(tdot))
    if N_MEANS == 0 or nrm == 0.0:
        return np.zeros(N_MEANS)
    h = {FD_STEP!r} / nrm
    b = (_grad_m(theta + h * tdot) - _grad_m(theta - h * tdot)) / (2.0 * h)
    return -_lin_solve(_jac_m(theta), b)
'''


def untied_rhs_source(system) -> str:
    """The untied right-hand side: the moments, then the velocities of the slaved means."""
    jit = "" if system.potential.quad_terms else "@njit(cache=True)\n"
    return f'''

# ---- untied right-hand side: moments, then the slaved means (redefines rhs above) ----
{jit}def _rhs_core(mu, params):
    theta = _solve_means(mu[THETA_WORDS])
    out = rhs_terms(mu, coefficients(mu, params))
    if N_MEANS > 0:
        vel = _mean_velocity(theta, out[THETA_WORDS])
        for j in range(N_MEANS):
            out[MEAN_STATE[j]] = vel[j]
    return out, np.all(np.isfinite(theta))


def rhs(t, mu, params):
    """dy/dτ on package time; y = [moments, means]; params = [weight decay γ, noise ratio ε]."""
    out, ok = _rhs_core(mu, params)
    if not ok:
        raise FloatingPointError("untied: no critical point dPhi/dm = 0 of the slaved means (t = %g)" % t)
    return out
'''


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
        return text + untied_rhs_source(system)
    return module_source(system, system.kind, symmetric_coefficient_lines(system), expectations=nus)


def compiled(system):
    """Import (compiling on first use) the generated module of ``system``, cached by content."""
    mod = getattr(system, "_module", None)
    if mod is None:
        mod = cached_module(source(system))
        system._module = mod
    return mod
