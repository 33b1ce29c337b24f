"""Untied attention S_k = M_k = U_k V_kᵀ: fast means, slow moments (docs/theory.md §6), on package time.

Derivation (one SGD step, batch-mean gradient, step α, weight decay γ; G *not* centred):

    ∂𝓛/∂S_k = Σ_ij e_ijk x_i x_jᵀ/√d,  ∇_U = (∂𝓛/∂S) V,  ∇_V = (∂𝓛/∂S)ᵀ U,
    E ∂𝓛/∂S_k = ∇_{S_k}Φ = g_k I/√d + (2/d) Σ_l (GΩ_kl S_l + GΨ_kl S_lᵀ)

(g_k = ∂Φ/∂m_k; GΩ, GΨ in the full-matrix convention of ``derive.potential``: Ω_kl and Ω_lk both
carry GΩ_kl, hence the 2). On the slow time τ = nα/d (= package time):

    U̇_k = −β̃_k V_k − 2 X_k V_k − γ U_k,   V̇_k = −β̃_k U_k − 2 X_kᵀ U_k − γ V_k,
    X_k = Σ_l (GΩ_kl M_l + GΨ_kl M_lᵀ),   β̃_k = √d g_k  (the O(√d) mean force).

The letter flows follow from Ṁ = U̇Vᵀ + UV̇ᵀ, Ȧ = U̇Uᵀ + UU̇ᵀ, Ḃ = V̇Vᵀ + VV̇ᵀ:

    Ṁ_k  = −β_k (A_k + B_k) − 2 Σ_l [GΩ_kl (M_l B_k + A_k M_l) + GΨ_kl (M_lᵀ B_k + A_k M_lᵀ)] − 2γ M_k
    Ṁ_kᵀ = −β_k (A_k + B_k) − 2 Σ_l [GΩ_kl (B_k M_lᵀ + M_lᵀ A_k) + GΨ_kl (B_k M_l + M_l A_k)] − 2γ M_kᵀ
    Ȧ_k  = −β_k (M_k + M_kᵀ) − 2 Σ_l [GΩ_kl (M_l M_kᵀ + M_k M_lᵀ) + GΨ_kl (M_lᵀ M_kᵀ + M_k M_l)] − 2γ A_k
    Ḃ_k  = −β_k (M_k + M_kᵀ) − 2 Σ_l [GΩ_kl (M_lᵀ M_k + M_kᵀ M_l) + GΨ_kl (M_l M_k + M_kᵀ M_lᵀ)] − 2γ B_k

The mean m_k = √d μ(M_k) obeys dm_k/dτ = −d D_k g_k − √d ψ_k − 2γ m_k with D_k = t^A_k + t^B_k and
ψ_k = 2 Σ_l [GΩ_kl (μ(M_l B_k) + μ(A_k M_l)) + GΨ_kl (μ(M_lᵀ B_k) + μ(A_k M_lᵀ))]. On the fast time
t = nα this is dm_k/dt = −D_k g_k (moments frozen); on the slow scale m_k is slaved to the
critical manifold ∂Φ/∂m_k = 0, to the order g_k = β_k/√d with

    β_k = −ψ_k / D_k       (exactly the value that keeps dμ(M_k)/dτ = −2γ μ(M_k)).

The slaved mean moves with the moments, m*(q(τ)); it is part of the state vector (after the
moments) with dm*/dτ = −H_mm⁻¹ ∂_τ(∂Φ/∂m)|_m (implicit function theorem), and every evaluation of
the coefficients re-solves ∂Φ/∂m = 0 by Newton from the state value (``_solve_means``).
Symmetric (tied/direct) trainable indices in the same model use the flows of ``hierarchy`` with
S_l → (M_l + M_lᵀ)/2 for untied l.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..kinds import alphabet_of
from ..spec import Spec, load_spec
from ..symbolic.words import Alphabet, word_name
from ..transient import PicklesWithoutCaches
from .hierarchy import apply_flows, pack_terms
from .means import FD_STEP, NEWTON_STEPS, NEWTON_TOL, fast_flow, mean_residual, mean_velocity, relax_means, solve_means
from .noise import (
    fill_noise_coefficients,
    noise_params,
    noise_terms,
    nu_expectations,
    nu_names,
)
from .potential import Potential

__all__ = ["UntiedSystem", "derive_untied", "fast_phase", "FD_STEP", "NEWTON_STEPS", "NEWTON_TOL"]


# ------------------------------------------------------------------------------------ flows
def untied_coef_names(K) -> list:
    names = ["1", "gamma"] + [f"beta_{k}" for k in range(K)]
    names += [f"GO_{k}_{l}" for k in range(K) for l in range(K)]
    names += [f"GP_{k}_{l}" for k in range(K) for l in range(K)]
    names += [f"Gamma_{k}_{l}" for k in range(K) for l in range(K)]
    return names


def untied_letter_flows(spec: Spec, cidx: dict) -> dict:
    """letter -> [(coef key, replacement letters, factor)] for every trainable letter (module doc;
    each student's kind, symattn.kinds)."""
    sym = [ix.symmetric for ix in spec.indices]
    flows = {}
    for k in spec.students:
        flows.update(spec.indices[k].kind.letter_flow(k, spec.K, cidx, sym))
    return flows


# ------------------------------------------------------------------------------------ system
@dataclass
class UntiedSystem(PicklesWithoutCaches):
    """State y = [μ_words (words[0] = () ≡ 1) ..., m_k of the untied indices]; dy/dτ on package time."""

    TRANSIENT = ("_module", "_retruncated")           # the imported module; lower truncations

    spec: Spec
    truncation: int
    alphabet: Alphabet
    words: list
    coef_names: list
    terms: np.ndarray
    theta_words: list                 # state index of every potential parameter (Potential.names order)
    potential: Potential
    mean_indices: list                # untied k, in spec order; state entry n_moments + j
    nu: dict = field(default_factory=dict)   # name -> GaussianExpectation of ν, ν1, ν2 (derive.noise)
    notes: list = field(default_factory=list)

    kind = "untied fast-mean/slow-moment hierarchy"
    supports_noise = True

    def __post_init__(self):
        self._index = {w: i for i, w in enumerate(self.words)}
        P, spec = self.potential, self.spec
        self.n_moments = len(self.words)
        self.mean_state = {k: self.n_moments + j for j, k in enumerate(self.mean_indices)}
        pos = {n: i for i, n in enumerate(P.names)}
        # positions (in θ) of the trainable means that are slaved to ∂Φ/∂m = 0
        self.mean_pos = [pos[f"m_{spec.names[k]}"] for k in self.mean_indices if spec.indices[k].trainable]
        self.mean_trainable = [k for k in self.mean_indices if spec.indices[k].trainable]

    # ---------------------------------------------------------------- bookkeeping
    @property
    def size(self) -> int:
        return self.n_moments + len(self.mean_indices)

    def index(self, word) -> int:
        return self._index[self.alphabet.canonical(tuple(word))]

    def letter(self, k, op):
        return (k, "S") if self.alphabet.symmetric[k] else (k, op)

    def word_names(self) -> list:
        out = ["1"] + [word_name(w, self.spec.names) for w in self.words[1:]]
        return out + [f"m_{self.spec.names[k]}" for k in self.mean_indices]

    def spec_text(self) -> str:
        return json.dumps(self.spec.structure, indent=1, sort_keys=True, default=str)

    def params(self, epsilon: float = 0.0, y=None, values=None) -> np.ndarray:
        """[weight decay γ, noise ratio ε, non-polynomial ν at θ(y)...] (``derive.noise.noise_params``)."""
        return noise_params(self, epsilon, y, values)

    def theta_of(self, y) -> np.ndarray:
        """θ at state y with the slaved means."""
        return self.solve_means(np.asarray(y, dtype=float)[self.theta_words])

    def retruncate(self, M: int):
        return derive_untied(self.spec, M, potential=self.potential, nu=self.nu)

    # ---------------------------------------------------------------- slaved means (derive.means)
    def _gm(self, theta):
        return mean_residual(self.potential, theta, self.mean_pos)

    def _jac(self, theta):
        return self.potential.mean_hessian(theta, self.mean_pos)

    def solve_means(self, theta) -> np.ndarray:
        """θ with the trainable means moved (Newton from their value) onto ∂Φ/∂m = 0."""
        return solve_means(self.potential, theta, self.mean_pos)

    def gradients(self, y):
        """(θ at the slaved means, Potential.Gradients there)."""
        theta = self.solve_means(np.asarray(y, dtype=float)[self.theta_words])
        _, g = self.potential.value_and_gradient(theta)
        return theta, self.potential.split_gradient(g)

    def psi(self, y, grads) -> np.ndarray:
        """ψ_k = 2 Σ_l [GΩ_kl (μ(M_l B_k) + μ(A_k M_l)) + GΨ_kl (μ(M_lᵀ B_k) + μ(A_k M_lᵀ))]."""
        K, out = self.spec.K, np.zeros(self.spec.K)
        for k in self.mean_trainable:
            s = 0.0
            for l in range(K):
                Ml, Tl = self.letter(l, "S"), self.letter(l, "T")
                A, B = (k, "A"), (k, "B")
                s += grads.omega[k, l] * (y[self.index((Ml, B))] + y[self.index((A, Ml))])
                s += grads.psi[k, l] * (y[self.index((Tl, B))] + y[self.index((A, Tl))])
            out[k] = 2.0 * s
        return out

    def coefficients(self, y, params) -> np.ndarray:
        """Reference (NumPy) coefficients; the generated module computes the same."""
        y = np.asarray(y, dtype=float)
        K = self.spec.K
        theta, gr = self.gradients(y)
        psi = self.psi(y, gr)
        coef = np.zeros(len(self.coef_names))
        coef[0], coef[1] = 1.0, params[0]
        for k in self.mean_trainable:
            D = y[self.index(((k, "A"),))] + y[self.index(((k, "B"),))]
            coef[2 + k] = -psi[k] / D
        o = 2 + K
        coef[o:o + K * K] = gr.omega.reshape(-1)
        coef[o + K * K:o + 2 * K * K] = gr.psi.reshape(-1)
        coef[o + 2 * K * K:o + 3 * K * K] = gr.gamma.reshape(-1)
        fill_noise_coefficients(coef, self.coef_names, self.nu, theta, params[1])
        return coef

    def rhs(self, t, y, params):
        """Reference right-hand side (moments and slaved means)."""
        y = np.asarray(y, dtype=float)
        coef = self.coefficients(y, params)
        T = self.terms
        out = np.zeros_like(y)
        np.add.at(out, T["row"], T["val"] * coef[T["key"]] * y[T["c1"]] * y[T["c2"]])
        if self.mean_pos:
            theta = self.solve_means(y[self.theta_words])
            vel = mean_velocity(self.potential, theta, self.mean_pos, out[self.theta_words])
            for j, k in enumerate(self.mean_trainable):
                out[self.mean_state[k]] = vel[j]
        return out

    # ---------------------------------------------------------------- initial state
    def initial(self, init="free", dim=None, seed=0, means=None, fast_time: float = 200.0) -> np.ndarray:
        """y(0): moments (free probability / sampled / explicit) and the means after the fast phase.

        Means before the fast phase: 0 (free), √d μ(M_k) of the sampled matrices (sample), or an
        explicit vector's entries; ``means`` = {name: value} overrides them (e.g. to select a
        branch when the free start m = 0 sits on a symmetric, unstable critical point). The
        trainable means are then relaxed by the fast flow and polished onto ∂Φ/∂m = 0.
        """
        y = self.pre_fast_state(init, dim, seed, means)
        y = self.relax_means(y, fast_time)
        if isinstance(init, str) and init == "sample":
            for k in self.mean_trainable:
                y[self.index(((k, "S"),))] = y[self.mean_state[k]] / np.sqrt(dim)
        return y

    def pre_fast_state(self, init="free", dim=None, seed=0, means=None) -> np.ndarray:
        from ..initial import free_moments, sample_moments
        n = self.n_moments
        y = np.zeros(self.size)
        if isinstance(init, str) and init == "free":
            y[:n] = free_moments(self.spec, self.words)
        elif isinstance(init, str) and init == "sample":
            if dim is None:
                raise ValueError("init='sample' needs the dimension d")
            y[:n] = sample_moments(self.spec, self.words, dim, seed)
            for k in self.mean_indices:
                y[self.mean_state[k]] = np.sqrt(dim) * y[self.index(((k, "S"),))]
        else:
            v = np.asarray(init, dtype=float)
            if v.shape == (self.size,):
                y[:] = v
            elif v.shape == (n,):
                y[:n] = v
            else:
                raise ValueError(f"explicit initial state must have {n} (moments) or {self.size} entries")
        for name, val in (means or {}).items():
            k = self.spec.names.index(name)
            y[self.mean_state[k]] = float(val)
        return y

    def fast_rate(self, y) -> dict:
        """D_k = t^A_k + t^B_k of the trainable untied indices."""
        return {k: y[self.index(((k, "A"),))] + y[self.index(((k, "B"),))] for k in self.mean_trainable}

    def fast_flow(self, y, t_eval):
        """m(t) of dm_k/dt = −D_k ∂Φ/∂m_k(m, q(0)), moments frozen; rows = times, cols = trainable means."""
        D = [self.fast_rate(y)[k] for k in self.mean_trainable]
        return fast_flow(self.potential, np.asarray(y, dtype=float)[self.theta_words], self.mean_pos, D, t_eval)

    def relax_means(self, y, fast_time: float = 200.0) -> np.ndarray:
        y = np.array(y, dtype=float)
        if not self.mean_pos:
            return y
        D = [self.fast_rate(y)[k] for k in self.mean_trainable]
        theta = relax_means(self.potential, y[self.theta_words], self.mean_pos, D, fast_time)
        for j, k in enumerate(self.mean_trainable):
            y[self.mean_state[k]] = theta[self.mean_pos[j]]
        return y

    # ---------------------------------------------------------------- observables
    def observables(self, Y, phi=None, loss: bool = True) -> dict:
        """CSV columns (docs/interface.md) from state trajectories Y[time, entry]; the loss (unless not
        ``loss``) by ``phi`` (θ ↦ Φ, e.g. the compiled module's), else by the reference potential."""
        Y = np.atleast_2d(np.asarray(Y, dtype=float))
        spec, out = self.spec, {}
        names, sym = spec.names, self.alphabet.symmetric
        thetas = np.array([self.solve_means(row[self.theta_words]) for row in Y]) if len(Y) else \
            np.zeros((0, len(self.theta_words)))
        pos = {n: i for i, n in enumerate(self.potential.names)}
        tr = {}
        for k, name in enumerate(names):
            tr[k] = Y[:, self.index(((k, "S"),))]
            out[f"tr_{name}"] = tr[k]
            if not spec.indices[k].centred:
                out[f"m_{name}"] = thetas[:, pos[f"m_{name}"]]
                out[f"trA_{name}"] = Y[:, self.index(((k, "A"),))]
                out[f"trB_{name}"] = Y[:, self.index(((k, "B"),))]
        for k in range(spec.K):
            for l in range(k, spec.K):
                pair = f"{names[k]}_{names[l]}"
                q2 = Y[:, self.index(((k, "S"), (l, "S")))]
                out[f"q_{pair}"] = q2
                out[f"p_{pair}"] = q2 - tr[k] * tr[l]
                if not sym[k] and not sym[l]:
                    out[f"q1_{pair}"] = Y[:, self.index(((k, "S"), (l, "T")))]
                    out[f"q2_{pair}"] = q2
        for k in range(spec.K):
            for l in range(k + 1, spec.K):
                if sym[k] or sym[l]:
                    continue
                out[f"overlap_{names[k]}_{names[l]}"] = self.overlap(Y, k, l)
        if loss:
            out["loss"] = np.array([(phi or self.potential.value)(th) for th in thetas])
        return out

    def sym_product(self, Y, k, l):
        """Tr((M_k + M_kᵀ)(M_l + M_lᵀ))/d = 2(q1_kl + q2_kl)."""
        return 2.0 * (Y[:, self.index(((k, "S"), (l, "T")))] + Y[:, self.index(((k, "S"), (l, "S")))])

    def overlap(self, Y, k, l):
        Y = np.atleast_2d(Y)
        num = self.sym_product(Y, k, l)
        den = np.sqrt(np.abs(self.sym_product(Y, k, k) * self.sym_product(Y, l, l)))
        return num / np.where(den > 0, den, np.nan)


# ------------------------------------------------------------------------------------ derive
def derive_untied(spec, truncation: int | None = None, potential: Potential | None = None,
                  nu: dict | None = None) -> UntiedSystem:
    """The untied slow hierarchy of a spec with at least one untied index (docs/theory.md §6)."""
    spec = load_spec(spec)
    M = truncation or spec.truncation
    # flows that preserve the word length (direct, general S) close the system at M = 2 (§4)
    M = 2 if all(spec.indices[k].kind.closes for k in spec.students) else M
    P = potential or Potential(spec)
    alphabet = alphabet_of(spec)
    words = [()] + alphabet.words(M)
    coef_names = untied_coef_names(spec.K) + nu_names(spec)
    cidx = {n: i for i, n in enumerate(coef_names)}
    acc = apply_flows(words, alphabet, untied_letter_flows(spec, cidx), M)
    for key, val in noise_terms(spec, words, alphabet, cidx, M).items():
        acc[key] += val
    nu = nu if nu is not None else nu_expectations(P)
    index = {w: i for i, w in enumerate(words)}
    mean_indices = [k for k, ix in enumerate(spec.indices) if not ix.centred]       # the O(1/√d) means
    mean_state = {k: len(words) + j for j, k in enumerate(mean_indices)}
    theta_words = []
    for name in P.names:
        kind, *pair = name.split("_")
        ks = [spec.names.index(n) for n in pair]
        if kind == "m":
            theta_words.append(mean_state[ks[0]])
            continue
        a, b = ks
        second = "T" if kind == "q1" else "S"
        lb = (b, "S") if alphabet.symmetric[b] else (b, second)
        theta_words.append(index[alphabet.canonical(((a, "S"), lb))])
    return UntiedSystem(spec, M, alphabet, words, coef_names, pack_terms(acc), theta_words, P, mean_indices, nu)


# ------------------------------------------------------------------------------------ fast phase
@dataclass
class FastPhaseResult:
    table: dict
    m_star: dict
    rate: dict


def fast_phase(spec, time: float = 20.0, points: int = 101, init="free", dim: int | None = None, seed: int = 0,
               means: dict | None = None, system: UntiedSystem | None = None) -> FastPhaseResult:
    """The fast phase dm_k/dt = −(t^A_k(0) + t^B_k(0)) ∂Φ/∂m_k(m, q(0)) on t = nα, moments frozen.

    Columns: ``time_fast`` (= nα), ``time`` (= nα/d with the given ``dim``; 0 in the limit d → ∞)
    and ``m_<name>`` of every untied index. ``m_star``: the critical point reached (Newton-polished).
    """
    sysm = system or derive_untied(spec, 2)
    y = sysm.pre_fast_state(init, dim, seed, means)
    t = np.linspace(0.0, time, points)
    m = sysm.fast_flow(y, t) if sysm.mean_pos else np.zeros((points, 0))
    table = {"time_fast": t, "time": t / dim if dim else np.zeros_like(t)}
    names = sysm.spec.names
    for k in sysm.mean_indices:
        if k in sysm.mean_trainable:
            table[f"m_{names[k]}"] = m[:, sysm.mean_trainable.index(k)]
        else:
            table[f"m_{names[k]}"] = np.full(points, y[sysm.mean_state[k]])
    yr = y.copy()
    for j, k in enumerate(sysm.mean_trainable):
        yr[sysm.mean_state[k]] = m[-1, j]
    theta = sysm.solve_means(yr[sysm.theta_words]) if sysm.mean_pos else yr[sysm.theta_words]
    pos = {n: i for i, n in enumerate(sysm.potential.names)}
    m_star = {names[k]: float(theta[pos[f"m_{names[k]}"]]) for k in sysm.mean_indices}
    rate = {names[k]: float(v) for k, v in sysm.fast_rate(y).items()}
    return FastPhaseResult(table, m_star, rate)
