"""The moment hierarchy's state vector and its NumPy backend (docs/theory.md §4–§7), for a derived ``System``.

The NumPy backend interprets the
system's data — coefficient rules, sparse terms, columns — with Φ, ν and their derivatives from the
Python expectations (closed forms and quadrature), and runs the slaved-mean Newton of
``derivation.means``. The generated module (``codegen``) computes the same from the same data; the
tests compare the two. Also here: the initial state (free law, a simulation's matrices, or explicit;
for untied means the fast phase) and the observables of a trajectory.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import system as S
from .means import fast_flow, mean_velocity, relax_means, solve_means
from .split import quadrature_nu_names


def theta(system, y) -> np.ndarray:
    """θ = y[theta_words] with the trainable means moved onto ∂Φ/∂m = 0 (§6)."""
    return solve_means(system.potential, np.asarray(y, dtype=float)[system.theta_words], system.mean_pos)


def law(system) -> np.ndarray:
    """(label-noise variance s², inverse temperature β) = params[2:4]: the run-time parameters of the
    loss's law that the generated expectations take."""
    P = system.potential
    return np.array([P.label_noise, P.beta])


PARAM_GAMMA, PARAM_EPSILON = 0, 1        # their positions in ``params`` (a schedule rescales them in time)


def params(system, epsilon: float = 0.0, y=None, values=None) -> np.ndarray:
    """Run-time parameters [γ, ε, s², β, ν_quadrature(θ(y))...] of the right-hand side, s² the label-noise
    variance and β the softmax inverse temperature (``law``); the non-polynomial ν (``quadrature_nu_names``
    order) are 0 at ε = 0, else evaluated at θ(y) or taken from ``values`` (e.g. the generated
    ``noise_values``)."""
    names = quadrature_nu_names(system.nu)
    base = [system.spec.weight_decay, epsilon, *law(system)]
    if not names:
        return np.array(base)
    if values is None:
        if not epsilon:
            values = np.zeros(len(names))
        elif y is None:
            raise ValueError("params: y (the state) is needed for the non-polynomial noise constants ν at ε > 0")
        else:
            th = theta(system, y)
            values = [system.nu[n].value(th) for n in names]
    return np.concatenate([base, np.asarray(values, dtype=float)])


def coefficients(system, y, params, th=None) -> np.ndarray:
    """coef[key] of the sparse terms at state y (``System.coefficient_rules``)."""
    y = np.asarray(y, dtype=float)
    th = theta(system, y) if th is None else th
    gr = system.potential.gradients(th)
    G = {"GO": gr.omega, "GP": gr.psi, "Gamma": gr.gamma}
    coef = np.zeros(len(system.coefficient_rules))
    for j, c in enumerate(system.coefficient_rules):
        if c.source == S.ONE:
            coef[j] = 1.0
        elif c.source == S.DECAY:
            coef[j] = params[0]
        elif c.source == S.GRADIENT:
            mat, k, l = c.args
            coef[j] = G[mat][k, l]
        elif c.source == S.MEAN_FORCE:
            k, parts, (a, b) = c.args
            psi = 2.0 * sum(G[mat][k, l] * (y[i] + y[i2]) for mat, l, i, i2 in parts)
            coef[j] = -psi / (y[a] + y[b])
        elif c.source == S.NOISE:
            coef[j] = params[1] * system.nu[c.args[0]].value(th)
        elif c.source != S.ZERO:
            raise ValueError(f"unknown coefficient source {c.source!r}")
    return coef


def rhs(system, t, y, params) -> np.ndarray:
    """dy/dτ: the sparse terms, then the velocities of the slaved means (§6)."""
    y = np.asarray(y, dtype=float)
    th = theta(system, y)
    coef = coefficients(system, y, params, th)
    T = system.terms
    out = np.zeros_like(y)
    np.add.at(out, T["row"], T["val"] * coef[T["key"]] * y[T["c1"]] * y[T["c2"]])
    if system.mean_pos:
        vel = mean_velocity(system.potential, th, system.mean_pos, out[system.theta_words])
        for j, k in enumerate(system.mean_trainable):
            out[system.mean_state[k]] = vel[j]
    return out


# ------------------------------------------------------------------------------------ initial state
def pre_fast_state(system, init="free", dim=None, seed=0, means=None) -> np.ndarray:
    """y(0) before the fast phase: moments (free probability / a simulation's seed matrices at ``dim``
    / an explicit vector of the moments or of the whole state); means 0 (free), √d μ(M_k) (sample)
    or the vector's, ``means`` = {name: value} overriding them."""
    from ..initial import free_moments, sample_moments
    n = system.n_moments
    y = np.zeros(system.size)
    if isinstance(init, str) and init == "free":
        y[:n] = free_moments(system.spec, system.words)
    elif isinstance(init, str) and init == "sample":
        if dim is None:
            raise ValueError("init='sample' needs the dimension d")
        y[:n] = sample_moments(system.spec, system.words, dim, seed)
        for k in system.mean_indices:
            y[system.mean_state[k]] = np.sqrt(dim) * y[system.index(((k, "S"),))]
    else:
        v = np.asarray(init, dtype=float)
        if v.shape == (system.size,):
            y[:] = v
        elif v.shape == (n,):
            y[:n] = v
        else:
            raise ValueError(f"init: an explicit initial state must have {n} (moments) or {system.size} entries")
    for name, val in (means or {}).items():
        y[system.mean_state[system.spec.names.index(name)]] = float(val)
    return y


def fast_rate(system, y) -> dict:
    """D_k = t^A_k + t^B_k of the trainable untied indices (§6); whitened μ(ΣA_k) + μ(ΣB_k) (§1)."""
    from ..kinds import metric_letters
    m = metric_letters(system.spec)
    return {k: y[system.index(m + ((k, "A"),))] + y[system.index(m + ((k, "B"),))] for k in system.mean_trainable}


def relax(system, y, fast_time: float = 200.0) -> np.ndarray:
    """y with the trainable means after the fast phase to t = ``fast_time``, on ∂Φ/∂m = 0."""
    y = np.array(y, dtype=float)
    if not system.mean_pos:
        return y
    D = [fast_rate(system, y)[k] for k in system.mean_trainable]
    th = relax_means(system.potential, y[system.theta_words], system.mean_pos, D, fast_time)
    for j, k in enumerate(system.mean_trainable):
        y[system.mean_state[k]] = th[system.mean_pos[j]]
    return y


def initial(system, init="free", dim=None, seed=0, means=None, fast_time: float = 200.0) -> np.ndarray:
    """y(0): ``pre_fast_state`` with the trainable means relaxed by the fast phase (a symmetric free
    start m = 0 may sit on an unstable critical point: ``means`` selects a branch); for ``sample``
    μ(M_k) follows the relaxed mean, μ(M_k) = m_k/√d."""
    y = relax(system, pre_fast_state(system, init, dim, seed, means), fast_time)
    if isinstance(init, str) and init == "sample":
        for k in system.mean_trainable:
            y[system.index(((k, "S"),))] = y[system.mean_state[k]] / np.sqrt(dim)
    return y


def restrict(system, y, other) -> np.ndarray:
    """The state y of ``system`` as a state of ``other`` (the same model at a lower truncation): its
    words' moments and the means."""
    y = np.asarray(y, dtype=float)
    out = np.array([y[system.index(w)] for w in other.words] + [0.0] * len(other.mean_indices))
    for k in other.mean_indices:
        out[other.mean_state[k]] = y[system.mean_state[k]]
    return out


@dataclass
class FastPhaseResult:
    table: dict
    m_star: dict
    rate: dict


def fast_phase(system, time: float = 20.0, points: int = 101, init="free", dim: int | None = None, seed: int = 0,
               means: dict | None = None) -> FastPhaseResult:
    """The fast phase dm_k/dt = −(t^A_k(0) + t^B_k(0)) ∂Φ/∂m_k(m, q(0)) on t = nα, moments frozen (§6),
    of a derived system or of a spec (derived at M = 2).

    Columns: ``time_fast`` (= nα), ``time`` (= nα/d with the given ``dim``; 0 in the limit d → ∞)
    and ``m_<name>`` of every untied index. ``m_star``: the critical point reached (Newton-polished).
    """
    if not isinstance(system, S.System):
        from ..spec import load_spec
        from .untied import derive_untied
        system = derive_untied(load_spec(system), 2)
    y = pre_fast_state(system, init, dim, seed, means)
    t = np.linspace(0.0, time, points)
    pos, trainable = system.mean_pos, system.mean_trainable
    if pos:
        D = [fast_rate(system, y)[k] for k in trainable]
        m = fast_flow(system.potential, y[system.theta_words], pos, D, t)
    else:
        m = np.zeros((points, 0))
    table = {"time_fast": t, "time": t / dim if dim else np.zeros_like(t)}
    names = system.spec.names
    for k in system.mean_indices:
        table[f"m_{names[k]}"] = m[:, trainable.index(k)] if k in trainable else np.full(points, y[system.mean_state[k]])
    yr = y.copy()
    for j, k in enumerate(trainable):
        yr[system.mean_state[k]] = m[-1, j]
    th = theta(system, yr)
    where = {n: i for i, n in enumerate(system.potential.names)}
    m_star = {names[k]: float(th[where[f"m_{names[k]}"]]) for k in system.mean_indices}
    rate = {names[k]: float(v) for k, v in fast_rate(system, y).items()}
    return FastPhaseResult(table, m_star, rate)


# ------------------------------------------------------------------------------------ observables
def observables(system, Y, phi=None, loss: bool = True) -> dict:
    """CSV columns (``System.columns``, docs/interface.md) of state trajectories Y[time, entry]; the loss
    (unless not ``loss``) by ``phi`` (θ ↦ Φ, e.g. the compiled module's), else by the reference potential."""
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    needs_theta = any(c.source == S.THETA or (loss and c.source == S.LOSS) for c in system.columns)
    thetas = np.array([theta(system, row) for row in Y]) if needs_theta and len(Y) else \
        np.zeros((len(Y), len(system.theta_words)))
    out = {}
    for c in system.columns:
        if c.source == S.STATE:
            out[c.name] = Y[:, c.args[0]]
        elif c.source == S.CENTRED:
            i, a, b, *factor = c.args
            out[c.name] = Y[:, i] - (factor[0] if factor else 1.0) * Y[:, a] * Y[:, b]
        elif c.source == S.THETA:
            out[c.name] = thetas[:, c.args[0]]
        elif c.source == S.OVERLAP:
            (i, j), (a, b), (e, f) = c.args
            den = np.sqrt(np.abs((Y[:, a] + Y[:, b]) * (Y[:, e] + Y[:, f])))
            out[c.name] = (Y[:, i] + Y[:, j]) / np.where(den > 0, den, np.nan)
        elif c.source == S.LOSS:
            if loss:
                out[c.name] = np.array([(phi or system.potential.value)(th) for th in thetas])
        else:
            raise ValueError(f"unknown column source {c.source!r}")
    return out
