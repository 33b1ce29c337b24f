"""The matrix-level ("spectral") limit: the d → ∞ flow of the trained matrices at size N, all times.

The zero-truncated moment hierarchy (docs/theory.md §5) converges only in a finite time window. Here
the limit flow is integrated at matrix level on one realisation of size N of the asymptotically
free initial laws, with quantile (not random) spectra, so that the only finite-N effects are the
discretisation of the spectra and the O(1/N) fluctuations of the Haar rotations:

each trainable index moves by its kind's ``matrix_velocity`` (package time ``t = nα/d``):

* tied ``dW_k/dt = −4 (Σ_l Γ_kl S_l) W_k − γ W_k`` (so that ``d(W W^T)/dt`` is the S flow
  ``−4 Σ_l Γ_kl (S_l S_k + S_k S_l) − 2γ S_k``, PSD by construction; an atom at 0 stays at 0);
* direct ``dS_k/dt = −2 Σ_l Γ_kl S_l − γ S_k``; general ``−2 Σ_l (GΩ_kl S_l + GΨ_kl S_lᵀ) − γ S_k``;
* untied (the slow phase, docs/theory.md §6) ``U̇ = −βV − 2XV − γU``, ``V̇ = −βU − 2XᵀU − γV``,
  ``X_k = Σ_l (GΩ_kl M_l + GΨ_kl M_lᵀ)``, β the force that keeps tr M fixed, and Φ's gradients
  at the means slaved to ∂Φ/∂m = 0 (``derivation.means``: Newton with the exact Hessian,
  warm-started from the last solution; the fast phase relaxes them first);
* frozen teachers; the order parameters are traces of the current matrices and the gradients come
  from :class:`symattn.derivation.potential.Potential`. ``init="sample"`` starts from the very
  matrices a simulation seed draws instead of the quantile realisation below.

Realisation of the initial laws (docs/theory.md §7): the first frozen, non-identity index is diagonal
with exact quantile eigenvalues ``λ_i = F^{-1}((i − ½)/N)`` of its law; every other index is
``O diag(λ) O^T`` with its own quantile eigenvalues and an independent Haar rotation O (QR of a
Gaussian matrix with sign fix), so the family is asymptotically free. Laws: tied (Wishart
``W W^T``, W N×κN with entries N(0, σ²/N)) = free Poisson of rate κ and jump σ² (Marchenko–Pastur,
atom 1 − κ at 0 when κ < 1); direct (``σ·GOE`` with ``Tr Z²/N → 1``) = semicircle of radius 2σ;
identity teacher = ``scale·I``.

Representations (``symattn.matrix``): ``scalar`` c·I, ``diag`` (a frozen diagonal teacher),
``factor`` W (S = W W^T never formed: products are ``W_l (W_l^T W_k)``; a tied index of width
κ ≤ 0.618), ``dense`` S (direct, and tied of width κ > 0.618, where one product S·S per evaluation
costs fewer flops than WᵀW and W(WᵀW): its flow is the S flow above and its noise map the congruence
below), ``ndense`` S (general), ``pair`` (U, V) (untied, M = UVᵀ never formed). All N³ work is BLAS.

Finite-N error: the same flow at N and N/2 (independent rotations); ``<col>_err = |f(N) − f(N/2)|``
estimates the O(1/N) error of f(N); ``extrapolate`` reports 2f(N) − f(N/2).

SGD noise (optional, ``epsilon = ε = αd/B > 0``; docs/theory.md §7, ``derive/noise.py``). Route chosen: a
*matrix-level Gaussian-equivalent stochastic flow*. Of the batch-gradient fluctuation δ_k only its
second moments enter the O(ε) limit, ``E Tr(X δ_k Y δ_l)/d → (ν_kl/B) tr X tr Y``, so δ is replaced
by a Gaussian matrix with exactly these second moments (symmetric for symmetric kinds; for
non-symmetric ones a symmetric part of covariance (ν1 + ν2)/2 and a skew part of (ν2 − ν1)/2,
``_Noise.increments``); summed over the d·dt/α
SGD steps of a time step dt the fluctuation α·δ becomes dΞ_k with

    E Tr(X dΞ_k Y dΞ_l)/N = ε ν_kl(q) dt · tr X tr Y   (leading order in 1/N).

For a GOE, ``E[Ξ_ab Ξ_cd] = s²(δ_ac δ_bd + δ_ad δ_bc)`` gives ``E Tr(XΞYΞ) = s²(Tr X Tr Y + Tr XYᵀ)``
and ``E[ΞYΞ] = s²(Tr Y·I + Y)``, hence ``s² = ε ν dt / N``: ``dΞ_k = √(ε dt/N) Σ_m C_km Z_m`` with
independent ``Z_m = (G + Gᵀ)/√2`` (G i.i.d. N(0, 1), drawn by Box–Muller, so ``E[Z_ab Z_cd] = δ_ac δ_bd + δ_ad δ_bc``) and
``C Cᵀ = ν`` (Cholesky of the trainable ν matrix at the current q; eigenvalue-clipped square root if
ν is not numerically positive definite). The drift takes adaptive embedded Runge–Kutta steps
(``symattn.stepping``: Bogacki–Shampine 3(2), Cash–Karp 5(4) once the error control bounds a step); the exact
SGD-shaped noise map

    tied    W_k ← (I − 2 dΞ_k) W_k      ⇔  S_k ← (I − 2dΞ_k) S_k (I − 2dΞ_k)
    direct, general  S_k ← S_k − dΞ_k;   untied  U_k ← U_k − dΞ_k V_k,  V_k ← V_k − dΞ_kᵀ U_k

is applied in the symmetric (Strang) order around each drift step, with ν at the state it acts on
(Itô). The Itô drift is then automatic:
``E[(I − 2dΞ)S(I − 2dΞ)] = S + 4 E[dΞ S dΞ] = S + 4εν_kk dt (tr(S) I + S/N)``, i.e.
``4εν_kk tr(S_k) I`` of the hierarchy up to O(1/N); the pair contractions of two insertions
(``E Tr(X dΞ Y dΞ)/N``) reproduce the hierarchy's split words in the same way. Why this route:
it is the SGD update itself with Gaussian fluctuations of the right covariance, so it carries the
O(ε) physics at all times without truncation (and keeps S = WWᵀ PSD and of fixed rank), while
an effective *deterministic* matrix ODE cannot: the pair-contraction terms act on trace moments as
products of two traces, which no single-matrix ODE of S reproduces for all words.
The price: trace moments of one noise realisation fluctuate at O(1/N) (√dt/N per step, linear
in dΞ); ``noise_realisations = R`` averages R independent noise paths on the same initial
matrices and reports their standard error in ``info['noise_sem']``. The leading-order physics
needs εν·dt ≪ 1 and N ≫ 1 only; O(1/N) terms (e.g. the 4εν S/N above) are finite-size effects of
the same order as the ones the deterministic solver has already.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .derivation.means import relax_means, solve_means
from .errors import ExpectationUndefined, NumericalFailure, UsageError
from .matrix import Mat, from_state, inner, pair_trace, stack, syrk
from .spec import Spec, load_spec
from .stepping import BogackiShampine, CashKarp
from .symbolic.spectra import (  # noqa: F401 (re-exported)
    free_poisson_density,
    free_poisson_moments,
    free_poisson_quantiles,
    haar_orthogonal,
    semicircle_quantiles,
)

__all__ = [
    "SpectralResult", "solve_spectral", "plot_spectra", "initial_realisation", "Mat",
    "free_poisson_quantiles", "free_poisson_moments", "free_poisson_density",
    "semicircle_quantiles", "haar_orthogonal", "run_spectral_from_args",
]

_BLOWUP = 1e12          # |q| beyond this is a divergence
MIN_STEP = 1e-14        # a step below this (relative to the horizon) cannot advance the time: a numerical failure
FLOAT32_RANGE = (1e-8, 1e8)   # entries of the trained matrices in which the noisy flow's float32 products neither
                              # underflow nor overflow (cubes of the entries stay within 1e±24); else float64
_CHEAP_BOUND = 1e3      # entries below this/N keep every order parameter below _BLOWUP: the largest is
                        # quartic in a factor's entries, Tr((WWᵀ)²)/N ≤ N (N·(1e3/N)²)² = 1e12/N


# ============================================================================ initial matrices
def initial_realisation(spec, size: int, seed: int = 0, init: str = "free", odd=()) -> list:
    """The size-N matrices :func:`solve_spectral` starts from (list of :class:`symattn.matrix.Mat`).

    ``init="free"``: the quantile realisation of the free initial laws (module docstring; the first
    frozen index with factors is diagonal, the rotations come from
    ``numpy.random.default_rng(SeedSequence([seed, size]))`` in spec order). ``init="sample"``: the
    very matrices ``simulate`` draws for dimension d = ``size`` and seed ``seed``. ``odd``: frozen
    indices decoupled from the students (:func:`decoupled_teachers`); then every index is built
    from two independent realisations of size N/2, block-diagonally, and those in ``odd``
    off-diagonally (:func:`_blocks`)."""
    spec = load_spec(spec)
    if init == "sample":
        from .initial import draw_initial
        return [from_state(ix.kind, s) for ix, s in zip(spec.indices, draw_initial(spec, int(size), int(seed)))]
    if init != "free":
        raise ValueError(f"init {init!r}: must be 'free' or 'sample'")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(size)]))
    f = spec.features
    if odd:
        n = int(size) // 2
        mats = [_blocks(Mat(*ix.kind.realise(ix, n, rng, False)), Mat(*ix.kind.realise(ix, n, rng, False)), k in odd)
                for k, ix in enumerate(spec.indices)]
        return mats if f.identity else [m.whitened(np.tile(f.root(n, matched=True), 2)) for m in mats]
    # Σ (diagonal) is free from every index: then no index may be diagonal in Σ's basis
    diag_k = next((k for k in spec.teachers if spec.indices[k].kind.factors), None) if f.identity else None
    mats = [Mat(*ix.kind.realise(ix, size, rng, k == diag_k)) for k, ix in enumerate(spec.indices)]
    return mats if f.identity else [m.whitened(f.root(size, matched=True)) for m in mats]


ODD_FORMS = ("pair", "ndense")     # the realisations :func:`_blocks` can write off-diagonally


def _blocks(a: Mat, b: Mat, odd: bool) -> Mat:
    """Two independent size-n realisations of one law joined into a size-2n one: block-diagonal
    diag(a, b), or (``odd``) off-diagonal [[0, a], [b, 0]] — an untied pair as U = [[0, U_a], [U_b, 0]],
    V = [[V_b, 0], [0, V_a]], so that M = UVᵀ = [[0, U_a V_aᵀ], [U_b V_bᵀ, 0]]. With O = diag(I, −I),
    O M Oᵀ = −M for the odd indices and = M for the others (docs/theory.md §7)."""
    from scipy.linalg import block_diag
    if a.kind == "scalar":
        return a
    if a.kind == "pair":
        (Ua, Va), (Ub, Vb) = a.value, b.value
        if not odd:
            return Mat("pair", (block_diag(Ua, Ub), block_diag(Va, Vb)))
        U = np.block([[np.zeros((Ua.shape[0], Ub.shape[1])), Ua], [Ub, np.zeros((Ub.shape[0], Ua.shape[1]))]])
        return Mat("pair", (U, block_diag(Vb, Va)))
    if odd:
        if a.kind != "ndense":
            raise ValueError(f"an index realised as {a.kind!r} cannot be odd")
        z = np.zeros_like(a.value)
        return Mat("ndense", np.block([[z, a.value], [b.value, z]]))
    return Mat(a.kind, block_diag(a.value, b.value))


def decoupled_teachers(spec, P, trials: int = 4) -> list:
    """The frozen indices t of the free start that the students do not see at zero overlap: t's law
    has mean 0 and can be realised odd (``ODD_FORMS``), and on the set {Ω_st = Ψ_st = 0 for every
    student s and every such t, m_t = 0} Φ's coupling vanishes, GΩ_st = GΨ_st = 0 — checked at
    ``trials`` random points of the set (odd realisations at N = 8, random student means). The flow
    then leaves the set invariant, so in the limit the overlap with t stays exactly 0 (the paper's
    uninformative h2 teacher); a Haar realisation at finite N starts O(1/N) off the set, and
    where the set is unstable it escapes (docs/theory.md §7)."""
    cand = []
    rng = np.random.default_rng(0)
    for k in spec.teachers:
        ix = spec.indices[k]
        form = Mat(*ix.kind.realise(ix, 4, rng, False)).kind
        if form in ODD_FORMS:
            cand.append(k)
    if not cand or not spec.students:
        return []
    names = {n: i for i, n in enumerate(P.names)}
    fresh = bool(P.quad_terms) and P.order is None        # calibrated here for the check only
    flow = _Flow(spec, initial_realisation(spec, 8, seed=1000, odd=cand), 8, P)   # reads the order parameters
    for trial in range(trials):
        mats = [stack([m]) for m in initial_realisation(spec, 8, seed=1000 + trial, odd=cand)]
        th = flow.theta(mats, 0.0, slave=False)[0][0]
        for k in spec.students:
            if not spec.indices[k].centred:
                th[names[P.op.m(k).name]] = rng.uniform(-0.7, 0.7)
        G = P.gradients(th)
        scale = 1.0 + max(float(np.max(np.abs(G.omega))), float(np.max(np.abs(G.psi))))
        cand = [t for t in cand if all(abs(G.omega[s, t]) + abs(G.psi[s, t]) <= 1e-10 * scale
                                       for s in spec.students)]
        if not cand:
            break
    if fresh:
        P.order = None
    return cand


# ============================================================================ BLAS threads
SINGLE_THREAD_UP_TO = 1024   # N at or below which the flow runs its BLAS single-threaded (docs/results/theory_cost.md:
                             # at N = 128 two OpenBLAS threads made the README example 2.6–7× slower beside a busy
                             # process, and never paid below N = 1024 on an idle 2-core machine)


def blas_threads(N: int):
    """A threadpoolctl context limiting the BLAS to one thread for matrices of size N ≤ SINGLE_THREAD_UP_TO (small
    products spin threads for nothing, and against any other load lose by factors), else a no-op; the
    realisations and grid points run in parallel across processes instead."""
    import contextlib
    if N > SINGLE_THREAD_UP_TO:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


# ============================================================================ the flow
class _Context:
    """What a kind's ``matrix_velocity`` reads: the matrices (a batch of R realisations,
    ``symattn.matrix``), Φ's gradient matrices GΩ, GΨ, Γ at their order parameters (and slaved means),
    shape (R, K, K), the weight decay γ."""

    def __init__(self, mats, grads, grams, wd, K, metric=None):
        self.mats, self.grams, self.wd, self.K = mats, grams, wd, K
        self.omega, self.psi = grads
        self.gamma = self.omega + self.psi
        self.metric = metric        # Σ's diagonal on whitened variables (symattn.features), None for Σ = I

    def precondition_dense(self, G):
        """Σ G Σ (a matrix trained as it is, on whitened variables), G itself for Σ = I."""
        m = self.metric
        return G if m is None else m[:, None] * G * m[None, :]

    def sym_apply(self, l: int, X, k: int | None = None):
        """S_l X, with S_l → (M_l + M_lᵀ)/2 for a non-symmetric S_l (the Gram W_lᵀW_k reused)."""
        Ml = self.mats[l]
        if not Ml.symmetric:
            return 0.5 * (Ml.apply(X) + Ml.apply_t(X))
        gram = None
        if Ml.kind == "factor" and k is not None:
            gram = self.grams.get((l, k))
            if gram is None and (k, l) in self.grams:
                gram = self.grams[(k, l)].swapaxes(-1, -2)
        return Ml.apply(X, gram)

    def sym_anticommutator(self, l: int, k: int, c):
        """c·(S_l S_k + S_k S_l) for a dense symmetric S_k (c one number per realisation), exactly symmetric
        (S_l → (M_l + M_lᵀ)/2 if non-symmetric): 2c·S_k S_kᵀ for l = k (a SYRK per realisation, or the one
        ``_Flow.theta`` made for the trace), c(λ_i + λ_j) S_ij for a scalar or diagonal S_l; a fresh array."""
        Ml, S = self.mats[l], self.mats[k].value
        c = np.asarray(c)[..., None, None]
        if l == k:
            out = self.grams.pop((k, k), None)     # S Sᵀ from the order parameters' traces (``_Flow.theta``)
            out = syrk(S) if out is None else out
            out *= 2.0 * c
            return out
        if Ml.kind == "scalar":
            return (2.0 * Ml.value * c) * S
        if Ml.kind == "diag":
            out = Ml.pair_sum * S
        else:
            A = self.sym_apply(l, S, k)
            out = A + A.swapaxes(-1, -2)
        out *= c
        return out

    def add_sym(self, acc, l: int, c) -> None:
        """acc += c·S_l (c·(M_l + M_lᵀ)/2 for a non-symmetric S_l); c one number per realisation."""
        Ml = self.mats[l]
        if Ml.symmetric:
            Ml.add_to(acc, c)
        else:
            Ml.add_to(acc, 0.5 * c)
            Ml.add_to(acc, 0.5 * c, transpose=True)


class _Flow:
    """dY/dτ of the trainable matrices' parts (each kind's ``matrix_velocity``) for a batch of R
    independent realisations integrated as one flow (``symattn.matrix``: every array has a leading
    axis R; the order parameters, Φ's gradients and the slaved means are per realisation, so the
    realisations do not interact — one vector field instead of R saves R − 1 times the per-evaluation
    overhead). The order parameters θ are traces of the current matrices, the trainable means of
    uncentred indices are slaved to ∂Φ/∂m = 0 (Newton, warm-started from the last solution) and the
    frozen ones fixed. ``mats``: one realisation (a list of Mat) or R of them (a list of lists)."""

    def __init__(self, spec: Spec, mats: list, N: int, potential, fixed_means: dict | None = None):
        if mats and isinstance(mats[0], Mat):
            mats = [mats]
        self.R = len(mats)
        self.spec, self.N, self.P = spec, N, potential
        self.mats = [stack([m[k] for m in mats]) for k in range(len(mats[0]))]
        self.K = spec.K
        self.gamma_wd = spec.weight_decay
        self.train = list(spec.students)
        self.cuts, o = [], 0                # per trainable index, (start, end, shape) of each part in the packed vector
        for k in self.train:
            cuts = []
            for p in self.mats[k].parts():
                cuts.append((o, o + p.size, p.shape))
                o += p.size
            self.cuts.append((k, cuts))
        self.names = spec.names
        self.pairs = [(a, b) for a in range(self.K) for b in range(a, self.K)]
        op, pos = potential.op, {n: i for i, n in enumerate(potential.names)}
        self.mean_pos = [pos[op.m(k).name] for k in self.train if not spec.indices[k].centred]
        self.mean_of = {k: pos[op.m(k).name] for k in range(self.K) if not spec.indices[k].centred}
        self.theta_fixed = {self.mean_of[k]: np.broadcast_to(np.asarray((fixed_means or {}).get(k, 0.0), dtype=float),
                                                             (self.R,))
                            for k in self.mean_of if k not in self.train}
        self.pair_pos = []
        for a, b in self.pairs:
            so, sq = op.omega(a, b), op.psi(a, b)
            self.pair_pos.append((a, b, pos.get(so.name), None if sq == so else pos.get(sq.name)))
        self.m_warm = np.zeros((self.R, len(self.mean_pos)))
        self.frozen_pairs = {}           # (a, b) of two frozen indices → their matrices, θ columns and Gram
        self.nevals = 0
        self.blocks = None              # N/2 for a realisation in two independent halves (``_blocks``)
        self.metric = None              # Σ's diagonal (whitened variables, symattn.features): ``set_metric``
        self.dtype = np.dtype(np.float64)

    @property
    def squares(self) -> set:
        """The trainable indices whose vector field reads S Sᵀ (``Kind.reads_square``, with the flow's Σ)."""
        return {k for k in self.train if self.spec.indices[k].kind.reads_square(self.mats[k], self.metric)}

    def set_metric(self, blocks: bool = False, matched: bool = True) -> None:
        """Σ at this size from the spec's feature covariance (two copies of the N/2 one for a realisation
        in halves), None for Σ = I; ``matched``: the limit law's realisation (features.eigenvalues), else the
        spec's Σ at d = N (a start from simulate's matrices)."""
        f = self.spec.features
        if not f.identity:
            self.metric = (np.tile(f.eigenvalues(self.N // 2, matched), 2) if blocks
                           else f.eigenvalues(self.N, matched))

    # ---------------------------------------------------------------- packing
    def pack(self) -> np.ndarray:
        return np.concatenate([np.asarray(p, dtype=self.dtype).ravel() for k in self.train for p in self.mats[k].parts()])

    def to_dtype(self, dtype) -> None:
        """Every matrix (and Σ's diagonal) in ``dtype``: the noisy flow's float32 (``NOISY_DTYPE``)."""
        self.dtype = np.dtype(dtype)
        self.mats = [m if m.kind == "scalar" else m.with_parts([np.asarray(p, dtype=self.dtype) for p in m.parts()])
                     for m in self.mats]
        if self.metric is not None:
            self.metric = np.asarray(self.metric, dtype=self.dtype)

    def unpack(self, y) -> list:
        mats = list(self.mats)
        for k, cuts in self.cuts:
            mats[k] = mats[k].with_parts([y[a:b].reshape(sh) for a, b, sh in cuts])
        return mats

    # ---------------------------------------------------------------- order parameters
    def theta(self, mats, t, slave: bool = True, squares=()):
        """(θ in ``Potential.names`` order with the slaved means, shape (R, #θ); the Grams of the factor
        pairs, and S Sᵀ of the indices in ``squares``, whose vector field reads it: ``Kind.reads_square``)."""
        grams, th = {}, np.zeros((self.R, len(self.P.names)))
        for a, b, po, pq in self.pair_pos:
            frozen = self.frozen_pairs.get((a, b))
            if frozen is not None and frozen[0] is mats[a] and frozen[1] is mats[b]:    # two frozen matrices
                _, _, cols, gram = frozen
                for p, v in cols:
                    th[:, p] = v
                if gram is not None:
                    grams[(a, b)] = gram
                continue
            if po is not None:
                th[:, po] = pair_trace(mats[a], mats[b], self.N, grams, (a, b), transpose=pq is not None,
                                       square=a == b and a in squares)
            if pq is not None:
                th[:, pq] = pair_trace(mats[a], mats[b], self.N, grams, (a, b))
            if a not in self.train and b not in self.train:
                self.frozen_pairs[(a, b)] = (mats[a], mats[b], [(p, th[:, p].copy()) for p in (po, pq) if p is not None],
                                             grams.get((a, b)))
        for p, v in self.theta_fixed.items():
            th[:, p] = v
        if self.mean_pos:
            th[:, self.mean_pos] = self.m_warm
        biggest = max(float(th.max()), -float(th.min())) if th.size else 0.0
        if not biggest <= _BLOWUP:                                  # NaN fails too
            raise NumericalFailure(f"spectral flow diverged (order parameters {biggest:.3g}) at time {t:.6g}", t)
        if slave and self.mean_pos:
            try:
                th = np.array([solve_means(self.P, row, self.mean_pos) for row in th])
            except NumericalFailure as exc:
                raise NumericalFailure(f"spectral flow: {exc} at time {t:.6g}", t) from None
        return th, grams

    def relax(self, mats, fast_time: float = 200.0, initial_means: dict | None = None):
        """Start of the slow phase: the trainable means after the fast phase dm/dt = −D ∂Φ/∂m."""
        if not self.mean_pos:
            return
        given = initial_means or {}
        self.m_warm = np.stack([np.broadcast_to(np.asarray(given.get(k, 0.0), dtype=float), (self.R,))
                                for k in self.train if not self.spec.indices[k].centred], axis=1)
        th, _ = self.theta(mats, 0.0, slave=False)
        D = []                                   # fast rates t^A + t^B (whitened: tr ΣÃ + tr ΣB̃), per realisation
        m = 1.0 if self.metric is None else self.metric[:, None]
        for k in self.train:
            if not self.spec.indices[k].centred:
                D.append(sum(inner(m * p, p) for p in mats[k].parts()) / self.N)
        D = np.array(D).T
        th = np.array([relax_means(self.P, th[r], self.mean_pos, list(D[r]), fast_time) for r in range(self.R)])
        self.m_warm = th[:, self.mean_pos]

    def gradients(self, th, t):
        """(GΩ, GΨ), each (R, K, K): Φ's gradient matrices at each realisation's θ."""
        omega, psi = self.P.gradient_matrices(th)
        if not math.isfinite(float(omega.sum() + psi.sum())):
            raise NumericalFailure(f"spectral flow: non-finite gradient of Φ at time {t:.6g}", t)
        return omega, psi

    # ---------------------------------------------------------------- right-hand side
    def rhs(self, t, y):
        # A trial stage of a too-large step may overflow: return NaN so that the integrator
        # rejects the step and shrinks it; divergence is declared on accepted steps only.
        self.nevals += 1
        mats = self.unpack(y)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                th, grams = self.theta(mats, t, squares=self.squares)
                G = self.gradients(th, t)
        except ExpectationUndefined as exc:
            raise NumericalFailure(f"spectral flow: {exc} (at time {t:.6g})", t) from None
        except NumericalFailure:
            return np.full_like(y, np.nan)
        if self.mean_pos:
            self.m_warm = th[:, self.mean_pos]
        sched = self.spec.schedule
        wd = self.gamma_wd if sched.constant else self.gamma_wd * float(sched.gamma_factor(t))
        with np.errstate(over="ignore", invalid="ignore"):    # an overflow is a non-finite field: the steps see it
            if self.dtype != np.float64:     # per-realisation coefficients in the arrays' precision: NumPy's mixed
                G = tuple(g.astype(self.dtype) for g in G)     # float32 ∘ float64 in-place path is 7× slower
            ctx = _Context(mats, G, grams, wd, self.K, self.metric)
            parts = [v.ravel() for k in self.train for v in self.spec.indices[k].kind.matrix_velocity(k, ctx)]
        out = (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(self.dtype, copy=False)
        return out if sched.constant else float(sched(t)) * out      # docs/theory.md §3, "Schedules"

    def check(self, y, t):
        """Raise NumericalFailure(t) on an accepted state that diverged or lost its slaved means."""
        big = max(float(y.max()), -float(y.min())) if y.size else 0.0      # NaN if any entry is NaN
        if not math.isfinite(big):
            raise NumericalFailure(f"spectral flow: NaN/inf at time {t:.6g}", t)
        if not self.mean_pos and big * self.N < _CHEAP_BOUND:
            return                              # no means to update, and no trace can be near _BLOWUP
        th, _ = self.theta(self.unpack(y), t)
        if self.mean_pos:
            self.m_warm = th[:, self.mean_pos]

    def observe(self, y, t, spectra: bool = True):
        """(column → one value per realisation, eigenvalues of realisation 0's students if ``spectra``)."""
        mats = self.unpack(y)
        th, _ = self.theta(mats, t)
        N, names, R = self.N, self.names, self.R
        tr = [np.broadcast_to(m.trace(N), (R,)) for m in mats]
        row = {"time": t}
        for a, n in enumerate(names):
            row[f"tr_{n}"] = tr[a]
        for a, n in enumerate(names):
            if a in self.mean_of:
                U, V = mats[a].parts() if mats[a].kind == "pair" else (None, None)
                row[f"m_{n}"] = th[:, self.mean_of[a]]
                if U is not None:
                    row[f"trA_{n}"] = inner(U, U) / N
                    row[f"trB_{n}"] = inner(V, V) / N
        split = {(a, b): (po, pq) for a, b, po, pq in self.pair_pos if pq is not None}
        for a, b, po, pq in self.pair_pos:
            pair = f"{names[a]}_{names[b]}"
            q = th[:, pq] if pq is not None else th[:, po]
            row[f"q_{pair}"] = q
            row[f"p_{pair}"] = q - self.spec.features.second_moment * tr[a] * tr[b]   # φ(Σ²): features.py
            if pq is not None:
                row[f"q1_{pair}"] = th[:, po]
                row[f"q2_{pair}"] = th[:, pq]

        def sym_product(i, j):          # Tr((M_i + M_iᵀ)(M_j + M_jᵀ))/N = 2(q1 + q2)
            return 2.0 * sum(th[:, p] for p in split[i, j])

        for a, b in split:
            if a < b:
                den = np.sqrt(np.abs(sym_product(a, a) * sym_product(b, b)))
                with np.errstate(invalid="ignore", divide="ignore"):
                    row[f"overlap_{names[a]}_{names[b]}"] = np.where(den > 0, sym_product(a, b) / np.where(den > 0, den, 1.0),
                                                                     math.nan)
        row["loss"] = np.array([float(self.P.value(r)) for r in th])
        return row, ({names[k]: mats[k].take(0).eigenvalues(N) for k in self.train} if spectra else {})


def _start(spec, P, N, seeds, init, odd=()):
    """The flow of the realisations of ``seeds`` (one batch; a seed repeated gives the same initial
    matrices) at their first slow-phase state: matrices, calibrated quadrature, relaxed means."""
    seeds = [seeds] if isinstance(seeds, (int, np.integer)) else seeds
    made = {}
    for s in seeds:
        if s not in made:
            made[s] = initial_realisation(spec, N, s, init, odd=odd)
    mats = [made[s] for s in seeds]
    means = {k: np.array([math.sqrt(N) * float(m[k].trace(N)) for m in mats])
             for k, ix in enumerate(spec.indices) if not ix.centred} if init == "sample" else {}
    flow = _Flow(spec, mats, N, P, fixed_means=means)
    flow.blocks = N // 2 if odd else None         # two independent halves: the noise stays block-diagonal
    flow.set_metric(bool(odd), matched=init != "sample")
    if P.quad_terms and P.order is None:
        P.calibrate(flow.theta(flow.mats, 0.0, slave=False)[0][0])
    flow.relax(flow.mats, initial_means=means)
    return flow


def _finite_start(flow, t, y) -> None:
    """NumericalFailure(t) unless the vector field is finite at the start (an adaptive integrator sizes its first
    step from it: a NaN there is a NaN step, which no step-size control ever leaves)."""
    with np.errstate(all="ignore"):
        k = flow.rhs(t, y)
    if not np.all(np.isfinite(k)):
        raise NumericalFailure(f"spectral flow: the vector field is not finite at the start (time {t:.6g}): Φ's "
                               f"gradient overflows at the initial order parameters", t)


def _integrate(spec, P, N, seeds, times, method, rtol, atol, spectra=True, init="free", odd=()):
    """The deterministic flow of the realisations ``seeds`` as one batch (scipy's ``method``):
    (column → (R, points) array, ``time`` → (points,); realisation 0's spectra; evaluations of one
    realisation's vector field)."""
    flow = _start(spec, P, N, seeds, init, odd)
    y0 = flow.pack()
    if atol is None:
        atol = rtol * 1e-2 * max(float(np.sqrt(np.mean(y0 ** 2))), 1e-300) if y0.size else rtol
    rows, spec_rows = [], {spec.names[k]: [] for k in spec.students}

    def record(y, t):
        row, sp_ = flow.observe(y, t, spectra=spectra)
        rows.append(row)
        if spectra:
            for n, ev in sp_.items():
                spec_rows[n].append(ev)

    record(y0, float(times[0]))
    T = float(times[-1])
    if T > times[0]:
        _finite_start(flow, float(times[0]), y0)
        from scipy import integrate
        solver_cls = {"RK45": integrate.RK45, "DOP853": integrate.DOP853, "RK23": integrate.RK23}[method]
        def quiet():                              # a trial step that overflows is rejected: no warning for it
            return np.errstate(over="ignore", invalid="ignore")
        with quiet():
            solver = solver_cls(flow.rhs, float(times[0]), y0, T, rtol=rtol, atol=atol)
        nxt = 1
        while nxt < len(times):
            with quiet():
                msg = solver.step()
            if msg is not None or solver.status == "failed":
                raise NumericalFailure(f"spectral flow: integrator failed at time {solver.t:.6g} ({msg})", solver.t)
            if not (solver.step_size or 0.0) >= MIN_STEP * max(1.0, T) and solver.status != "finished":
                raise NumericalFailure(f"spectral flow: the step is {solver.step_size:.2g} at time {solver.t:.6g}: the "
                                       f"flow is too fast to integrate (Φ's gradient too large, or a blow-up)", solver.t)
            flow.check(solver.y, solver.t)                 # raises beyond _BLOWUP
            if nxt < len(times) and times[nxt] <= solver.t:
                dense = solver.dense_output()
                while nxt < len(times) and times[nxt] <= solver.t:
                    y = solver.y if times[nxt] == solver.t else dense(times[nxt])
                    record(y, float(times[nxt]))
                    nxt += 1
            if solver.status == "finished":          # float round-off at T: the rest is T
                while nxt < len(times):
                    record(solver.y, float(times[nxt]))
                    nxt += 1
    table = {c: (np.array([r[c] for r in rows]) if c == "time" else np.array([r[c] for r in rows]).T) for c in rows[0]}
    return table, {n: np.array(v) for n, v in spec_rows.items()}, flow.nevals * flow.R


# ============================================================================ SGD noise (stochastic flow)
def _normals(rng, m: int, dtype=np.float64, scale: float = 1.0) -> np.ndarray:
    """m i.i.d. N(0, scale²) numbers by the Box–Muller transform of uniforms in ``dtype``: exactly Gaussian, and
    in float32 twice as fast as NumPy's ziggurat (whose float32 draw is scalar; log, sqrt, cos and sin here are
    vectorised). Tails reach ≈ 5.8σ in float32 (uniforms of 24 bits), beyond it a probability of 10⁻⁸."""
    h = (m + 1) // 2
    u = rng.random(2 * h, dtype=dtype)
    r = np.log1p(-u[:h])                      # u < 1: log(1 − u) is finite
    r *= -2.0
    np.sqrt(r, out=r)
    r *= scale
    angle = u[h:]
    angle *= 2.0 * math.pi
    out = np.empty(2 * h, dtype=dtype)
    np.cos(angle, out=out[:h])
    out[:h] *= r
    np.sin(angle, out=out[h:])
    out[h:] *= r
    return out[:m]


def _pair_sum(rng, n: int, sign: float, dtype=np.float64, scale: float = 1.0, out=None) -> np.ndarray:
    """scale·(G + sign·Gᵀ)/√2 for G with i.i.d. N(0, 1) entries, drawn as its upper triangle: off the diagonal
    i.i.d. N(0, 1) (mirrored, times sign), on it √2·N(0, 1) for sign +1 and 0 for −1 — half the Gaussian draws
    (:func:`_normals`). Written into ``out`` (every entry; a C-contiguous n × n array) when given."""
    plan = _TRIANGLES.get(n)
    if plan is None:
        i, j = np.triu_indices(n, 1)
        plan = _TRIANGLES[n] = (i * n + j, j * n + i)
    upper, lower = plan
    v = _normals(rng, upper.size + (n if sign > 0 else 0), dtype, scale)
    Z = np.empty((n, n), dtype=dtype) if out is None else out
    if not Z.flags.c_contiguous:                  # the flat view below would be a copy
        raise ValueError("out: the increment is written through a flat view, so it must be C-contiguous")
    flat = Z.reshape(-1)
    flat[upper] = v[:upper.size]
    flat[lower] = v[:upper.size] if sign > 0 else -v[:upper.size]
    flat[::n + 1] = math.sqrt(2.0) * v[upper.size:] if sign > 0 else 0.0
    return Z


_TRIANGLES: dict = {}      # n → flat indices of the strict upper triangle of an n × n matrix and of its mirror


class _Noise:
    """Gaussian-equivalent SGD noise of the trainable indices (module docstring, "SGD noise") for the
    flow's batch of realisations: realisation r draws from ``rngs[r]`` with sign ``signs[r]``
    (antithetic pairs share a stream with opposite signs)."""

    def __init__(self, flow: _Flow, nu: dict, epsilon: float, rngs, signs=None):
        from .derivation.noise import nu_name

        if not isinstance(rngs, (list, tuple)):
            rngs = [rngs]
        self.flow, self.eps, self.rngs = flow, float(epsilon), list(rngs)
        self.signs = np.ones(len(self.rngs)) if signs is None else np.asarray(signs, dtype=float)
        spec, tr = flow.spec, flow.train
        self.sym = [flow.mats[k].symmetric for k in tr]
        self.names = [[(nu_name(spec, k, l, "dd"), nu_name(spec, k, l, "dt")) for l in tr] for k in tr]
        self.nu = nu

    def nu_matrices(self, theta):
        """(ν_s, ν_a), each (R, n, n) over the trainable indices: the covariances of the symmetric and the
        skew part of δ, ν_s = (ν1 + ν2)/2, ν_a = (ν2 − ν1)/2 (a pair with a symmetric member: ν_s = ν,
        ν_a = 0), at each realisation's θ (rows of ``theta``)."""
        theta = np.atleast_2d(theta)
        n = len(self.flow.train)
        names = self.flow.P.names
        Vs, Va = np.zeros((len(theta), n, n)), np.zeros((len(theta), n, n))
        for r, row in enumerate(theta):
            cache = {}

            def nu(name):
                if name not in cache:
                    E = self.nu[name]                     # the row itself where E reads θ in the same order
                    cache[name] = float(E.value(row if E.names == names else dict(zip(names, row))))
                return cache[name]

            for i in range(n):
                for j in range(n):
                    dd, dt = self.names[i][j]
                    if dd == dt:
                        Vs[r, i, j] = nu(dd)
                    else:
                        Vs[r, i, j] = 0.5 * (nu(dd) + nu(dt))
                        Va[r, i, j] = 0.5 * (nu(dt) - nu(dd))
        return Vs, Va

    @staticmethod
    def factor(V: np.ndarray) -> np.ndarray:
        """C with C Cᵀ = V for each realisation's V (Cholesky; eigenvalue-clipped symmetric root if not
        positive definite)."""
        if not np.any(V):
            return V
        if V.ndim == 3:
            try:
                return np.linalg.cholesky(V)              # all realisations at once
            except np.linalg.LinAlgError:
                return np.array([_Noise.factor(v) for v in V])
        try:
            return np.linalg.cholesky(V)
        except np.linalg.LinAlgError:
            w, U = np.linalg.eigh(0.5 * (V + V.T))
            return U * np.sqrt(np.clip(w, 0.0, None))[None, :]

    def increments(self, Cs: np.ndarray, Ca: np.ndarray, dt: float, N: int) -> list:
        """dΞ_k = √(ε dt/N) Σ_m (Cs_km Zs_m + Ca_km Za_m), Zs/Za the symmetric/skew parts
        (G ± Gᵀ)/√2 of i.i.d. N(0, 1) matrices: E Tr(X dΞ_k Y dΞ_l)/N ≈ ε ν1_kl dt trX trY and
        E Tr(X dΞ_k Y dΞ_lᵀ)/N ≈ ε ν2_kl dt trX trY. For a realisation in two independent halves
        (``flow.blocks`` = N/2, :func:`decoupled_teachers`) each half gets its own, of size N/2. One
        (R, N, N) array per trainable index; realisation r from its own stream."""
        from scipy.linalg import block_diag
        R, n = Cs.shape[0], Cs.shape[1]
        blocks, dtype = self.flow.blocks, self.flow.dtype
        size = blocks or N
        single = n == 1 and not blocks and not (Cs.any() and Ca.any())     # one draw a realisation, in place
        which = 0 if Cs.any() else 1                                       # (the symmetric or the skew part)
        out = [(np.empty if single else np.zeros)((R, N, N), dtype=dtype) for _ in range(n)]
        for r in range(R):
            rng, scale = self.rngs[r], self.signs[r] * math.sqrt(self.eps * dt / size)
            for part, (C, s) in enumerate(((Cs[r], 1.0), (Ca[r], -1.0))):
                if single:
                    if part == which:
                        _pair_sum(rng, N, s, dtype, scale * float(C[0, 0]), out=out[0][r])
                    continue
                if not C.any():
                    continue
                for m in range(n):
                    if blocks:
                        Z = block_diag(*(_pair_sum(rng, size, s, dtype, scale) for _ in range(2)))
                    else:
                        Z = _pair_sum(rng, N, s, dtype, scale)
                    for i in range(n):
                        if C[i, m] != 0.0:
                            out[i][r] += float(C[i, m]) * Z
        return out

    def apply(self, mats: list, dXi: list) -> list:
        """The SGD-shaped noise map of each kind (``Kind.noise_map``): tied W ← (I − 2dΞ)W,
        direct/general S ← S − dΞ, untied (U, V) ← (U − dΞ V, V − dΞᵀ U)."""
        out = list(mats)
        for i, k in enumerate(self.flow.train):
            out[k] = self.flow.spec.indices[k].kind.noise_map(mats[k], dXi[i], self.flow.metric)
        return out


NOISE_STEP = 0.01      # εν_max·dt per noise step: the kick's operator norm stays ≈ 2√0.01 = 0.2
SPLIT_STEP = 0.04      # relative change of the trained parameters per step; with the symmetric (Strang) order the O(ε)
                       # effect of tests/test_spectral_noise.py is the same (within 0.2 %) at 0.01, 0.02, 0.04


# The drift's embedded pair (symattn.stepping): Bogacki–Shampine 3(2) (four evaluations a step) while the caps bound
# its steps (the output knots, the noise and splitting caps), Cash–Karp 5(4) (six, 4th order, a stability interval
# 1.7× as long) from the first step it rejects or its error control shortens: where stability or accuracy bound the
# steps (the stiff tied h2 flow, long horizons) Cash–Karp takes fewer evaluations.
DRIFTS = (BogackiShampine, CashKarp)
NOISY_DTYPE = np.float32


KNOTS = 8              # a noise path's drift steps are at most horizon/KNOTS: its outputs are interpolated between ≥ 9 knots
PASS_TOL = 3e-3        # a step passes over output times only where the knots interpolate them to this (relative; a
                       # noise path's knots fluctuate by more than 1e-4, which would refuse nearly every pass)


def _integrate_noisy(spec, P, nu, N, seeds, times, epsilon, rngs, dt_max, spectra=True, signs=None, init="free",
                     rtol=1e-4, odd=(), land=None):
    """Noise paths of the stochastic flow, one per entry of ``seeds`` (its initial realisation) and ``rngs``
    (its noise stream; ``signs``: ±1 each, antithetic pairs), integrated as one batch with common steps: adaptive steps of the drift (``DRIFTS``; error
    control at ``rtol``; a step is also kept ≤ NOISE_STEP/(εν_max), ≤ SPLIT_STEP/(relative speed of the
    trained parameters, each array's divided by its kind's ``split_degree``), ≤ ``dt_max`` and ≤ the
    horizon/KNOTS), the noise maps in the symmetric (Strang) order around them (Itô: ν at the state each
    map acts on): before a step the map brings the noise clock to the step's midpoint; at a *knot* also to
    the step's end, so that the state there is a complete state of the path, recorded.

    A step that reaches an output time lands on it (a knot) unless that would more than halve it; then it
    passes over it, if the knots interpolate the outputs it passes to PASS_TOL (``interpolable``; else it
    lands after all), and its end is a knot. The output table holds the knots' values at the knots and cubics
    through the four nearest knots between them (an O(h⁴) error of the mean path, far below its O(1/N)
    error; docs/theory.md §7): the steps follow the flow, not the output grid — 10 steps instead of 53
    output-bound ones on the README example. With ``land`` (default ``spectra``: all paths of a run alike)
    every output time is a knot, where the eigenvalues are recorded. Returns (table, spectra, evaluations,
    steps)."""
    land = spectra if land is None else land
    flow = _start(spec, P, N, seeds, init, odd)
    big = max((float(np.max(np.abs(p))) for k in flow.train for p in flow.mats[k].parts()), default=1.0)
    if FLOAT32_RANGE[0] <= big <= FLOAT32_RANGE[1]:     # else products of the matrices under/overflow in float32
        flow.to_dtype(NOISY_DTYPE)
    noise = _Noise(flow, nu, epsilon, rngs, signs)
    theta0 = flow.theta(flow.mats, 0.0)[0][0]
    for E in nu.values():                  # non-polynomial ν: quadrature order chosen at the start
        if E.quad_terms and E.order is None:
            E.calibrate(dict(zip(P.names, theta0)))
    knots, rows, spec_rows = [], [], {spec.names[k]: [] for k in spec.students}
    times = [float(t) for t in times]
    outputs = iter(times)
    next_out = next(outputs)

    def record(y, t):
        nonlocal next_out
        row, sp_ = flow.observe(y, t, spectra=spectra)
        knots.append(t)
        rows.append(row)
        while next_out is not None and next_out <= t + 1e-12 * max(1.0, abs(t)):
            if spectra:
                for n, ev in sp_.items():
                    spec_rows[n].append(ev)
            next_out = next(outputs, None)

    y = flow.pack()
    t, T = times[0], times[-1]
    atol = rtol * 1e-2 * max(float(np.sqrt(np.mean(y ** 2))), 1e-300)
    per_degree = np.concatenate([np.full(np.size(p), 1.0 / spec.indices[k].kind.split_degree(flow.mats[k]))
                                 for k in flow.train for p in flow.mats[k].parts()])

    def rate_of(k1, y):
        """Relative speed of the trained parameters (an array of degree p in them changes p times as fast)."""
        return float(np.linalg.norm(k1 * per_degree)) / max(float(np.linalg.norm(y)), 1e-300)

    sched = spec.schedule

    def kick(y, length, t_now, start=None):
        """(state after the noise map of the ``length`` time units from ``start`` (the noise clock), the
        noise step cap at the old state); ``length`` 0: the cap only. With a schedule the noise of the
        interval is ε₀ ∫ s² (docs/theory.md §3, "Schedules")."""
        th, _ = flow.theta(flow.unpack(y), t_now)                 # raises beyond _BLOWUP
        Vs, Va = noise.nu_matrices(th)
        V = Vs + Va                                               # over the realisations:
        nu_max = max(float(np.max(np.abs(V if V.shape[-1] == 1 else np.linalg.eigvalsh(V)))), 1e-300)
        if length > 0:
            dt = length if sched.constant else length * sched.mean_square(start, start + length)
            flow.mats = noise.apply(flow.unpack(y), noise.increments(noise.factor(Vs), noise.factor(Va), dt, N))
            y = flow.pack()
        rate = 1.0 if sched.constant else max(float(sched(t_now)) ** 2, 1e-300)
        return y, NOISE_STEP / (noise.eps * nu_max * rate)

    record(y, t)
    stages = np.empty((max(len(m.B) for m in DRIFTS), y.size), dtype=y.dtype)
    pair = {"method": DRIFTS[0]}
    h_max = min(dt_max or np.inf, (T - t) / KNOTS) if T > t else np.inf
    steps, s = 0, t                           # s: the noise clock (≥ t; ahead only after a rejected step)
    _finite_start(flow, t, y)
    k1 = flow.rhs(t, y)
    _, noise_cap = kick(y, 0.0, t)
    cap = min(noise_cap, SPLIT_STEP / max(rate_of(k1, y), 1e-300), h_max)
    h = min(cap, 1e-2 * (T - t) + 1e-3 * cap)
    tiny = 1e-12 * max(1.0, abs(T))

    def drift(h):
        """One error-controlled drift step from (t, y) (k1 = f(t, y)): (y_new, error norm, h taken, the pair)."""
        while True:
            method = pair["method"]
            with np.errstate(over="ignore", invalid="ignore"):
                y_new, err = method.step(flow.rhs, t, y, h, k1, stages)
                scale = np.abs(y)                                  # err/(atol + rtol·max(|y|, |y_new|)), RMS
                np.maximum(scale, np.abs(y_new), out=scale)
                scale *= rtol
                scale += atol
                np.divide(err, scale, out=scale)
                e = math.sqrt(float(np.dot(scale, scale)) / scale.size)
            if np.isfinite(e) and e <= 1.0:
                return y_new, e, h, method
            pair["method"] = DRIFTS[-1]                  # a rejection: the pair with the longer stability interval
            h *= 0.2 if not np.isfinite(e) else max(0.2, 0.9 * e ** (-1.0 / method.error_order))
            if not h >= MIN_STEP * max(1.0, t):                 # (NaN-safe: a NaN step is an underflow too)
                raise NumericalFailure(f"spectral flow: step size underflow at time {t:.6g} (the vector field is "
                                       f"not finite or too fast to follow there)", t)

    def interpolable(y1, t1):
        """Whether the knots interpolate the outputs a step to t1 passes over: the cubic through the last
        three knots and the step's end and the quadratic through the last two and the end differ there
        by at most PASS_TOL of each column's scale (with fewer than three knots: no; the step lands). The
        columns are the means over the batch: what the outputs report."""
        if len(knots) < 3:
            return False
        row, _ = flow.observe(y1, t1, spectra=False)
        cols = [c for c in row if c != "time"]
        x = np.array(knots[-3:] + [t1])
        v = np.array([[np.mean(r[c]) for c in cols] for r in rows[-3:]] + [[np.mean(row[c]) for c in cols]])
        inside = np.array([o for o in times if x[2] < o < t1])
        cubic, quad = _lagrange(x, v, inside), _lagrange(x[1:], v[1:], inside)
        scale = np.maximum(np.max(np.abs(v), axis=0), 1e-3)
        return bool(np.all(np.abs(cubic - quad) <= PASS_TOL * scale))

    floor = MIN_STEP * max(1.0, abs(T))
    while t < T - tiny:
        h_free = min(h, cap)
        if not h_free >= floor:                 # a step that cannot move t (or NaN): the flow is too fast to follow
            raise NumericalFailure(f"spectral flow: the step would be {h_free:.2g} at time {t:.6g} (the noise, the "
                                   f"parameters' speed or the error control allow no more): the flow is too fast to "
                                   f"integrate — Φ's gradient is too large or the state has left the stable range", t)
        h = min(h_free, T - t)
        to_out = next_out - t if next_out is not None else np.inf
        if to_out <= h and (land or h <= 2.0 * to_out):          # land on the output it reaches, unless that
            h = to_out                                           # would more than halve the step
        if t + 0.5 * h > s:                                    # noise up to the step's midpoint
            y, noise_cap = kick(y, t + 0.5 * h - s, t, s)
            s = t + 0.5 * h
        k1 = flow.rhs(t, y)
        while True:
            h_try = h
            y_new, e, h, method = drift(h)
            if h <= to_out + tiny or interpolable(y_new, t + h):
                break
            h = to_out                                             # too fast to interpolate: land
        cut = h_try < h_free and h == h_try        # shortened to reach an output time or T, not by the error control
        flow.check(y_new, t + h)
        rate = rate_of(k1, y)
        y, t = y_new, t + h
        if t >= T - tiny:
            t = T
        if t == T or t >= next_out - tiny or h > to_out:          # a knot: complete the state, record it
            if s < t:                                          # the step's second half noise
                y, noise_cap = kick(y, t - s, t, s)
                s = t
            flow.mats = flow.unpack(y)
            record(y, t)
        cap = min(noise_cap, SPLIT_STEP / max(rate, 1e-300), h_max)
        steps += 1
        grow = 0.9 * e ** (-1.0 / method.error_order) if e > 0 else np.inf
        h *= min(5.0, grow)
        if cut:                        # a step shortened to an output time does not shrink the next
            h = max(h, h_free)
        if grow < 5.0 and h < cap:     # the error control, not a cap, bounds the steps: the higher-order pair
            pair["method"] = DRIFTS[-1]
    knots = np.array(knots)
    out_t = np.array(times)
    table = {"time": out_t}
    for c in rows[0]:
        if c != "time":
            vals = np.array([r[c] for r in rows])                  # (knots, R)
            table[c] = _at_times(knots, vals, out_t).T
    return table, {n: np.array(v) for n, v in spec_rows.items()}, flow.nevals * flow.R, steps * flow.R


def _lagrange_weights(x, at):
    """Weights w[i, l] of the values at the nodes x[i, l] in the polynomial through them, at the time at[i]."""
    n = x.shape[-1]
    w = np.ones(x.shape)
    for l in range(n):
        for m in range(n):
            if m != l:
                w[..., l] *= (at - x[..., m]) / (x[..., l] - x[..., m])
    return w


def _lagrange(x, v, at):
    """Values at the times ``at`` of the polynomial through (x_i, v_i) (v: knots × columns)."""
    return _lagrange_weights(np.broadcast_to(x, (len(at), len(x))), np.asarray(at, dtype=float)) @ v


def _at_times(knots, vals, out_t):
    """The knots' values at the output times (``vals``: knots × columns, or knots): exact at a knot,
    between knots the cubic through the four nearest (two on each side where there are; O(h⁴)), linear
    with fewer than four knots."""
    n = len(knots)
    if n < 4:
        return np.stack([np.interp(out_t, knots, v) for v in vals.T], axis=-1) if vals.ndim == 2 \
            else np.interp(out_t, knots, vals)
    j = np.searchsorted(knots, out_t)
    nearest = np.clip(j - 2, 0, n - 4)[:, None] + np.arange(4)          # (outputs, 4) nearest knots
    w = _lagrange_weights(knots[nearest], out_t)
    got = (w.reshape(w.shape + (1,) * (vals.ndim - 1)) * vals[nearest]).sum(axis=1)
    hit = (j < n) & (knots[np.minimum(j, n - 1)] == out_t)
    got[hit] = vals[j[hit]]
    return got


# Student's t at 97.5 % for 1 … 30 degrees of freedom (beyond: the 30's, a little above the normal 1.96)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(dof: int) -> float:
    """Student's t quantile at 97.5 % (a two-sided 95 % interval) for ``dof`` ≥ 1 degrees of freedom."""
    return _T975[min(int(dof), len(_T975)) - 1]


# ============================================================================ result
@dataclass
class SpectralResult:
    """Columns of the theory CSV (docs/interface.md) plus ``<col>_err``; spectra of the students."""

    table: dict
    spectra: dict
    size: int
    seed: int
    spec_name: str = ""
    info: dict = field(default_factory=dict)

    @property
    def time(self) -> np.ndarray:
        return self.table["time"]

    def columns(self) -> list:
        return list(self.table)

    def to_csv(self, path):
        from .integration import write_csv
        write_csv(self.table, path, digits=None)
        return Path(path)

    def __repr__(self):
        n = len(self.table.get("time", ()))
        return (f"<SpectralResult {self.spec_name}: matrix-level limit, N = {self.size}, "
                f"{self.info.get('rotations', 1)} realisation(s), ε = {self.info.get('epsilon') or 0:g}, {n} rows>")

    def _repr_html_(self):
        from .integration import table_html
        return table_html(self.table, repr(self)[1:-1])

    def spectra_to_csv(self, path, quantiles=None, full: bool = False):
        """Rows (time, index); columns ``q_0.01 … q_0.99`` (empirical quantiles of the N eigenvalues),
        or with ``full=True`` all sorted eigenvalues ``e_0 … e_{N−1}``. Written atomically."""
        from .files import atomic_write
        if quantiles is None:
            quantiles = np.round(np.arange(1, 100) / 100, 2)
        quantiles = np.asarray(quantiles, dtype=float)
        buf = io.StringIO()
        w = csv.writer(buf)
        n0 = next(iter(self.spectra.values())).shape[1] if self.spectra else 0
        head = [f"e_{i}" for i in range(n0)] if full else [f"q_{p:g}" for p in quantiles]
        w.writerow(["time", "index"] + head)
        for i, t in enumerate(self.time):
            for name, ev in self.spectra.items():
                vals = ev[i] if full else np.quantile(ev[i], quantiles)
                w.writerow([repr(float(t)), name] + [repr(float(v)) for v in vals])
        return atomic_write(path, buf.getvalue())


def solve_spectral(spec, time: float = 1.0, points: int = 51, size: int = 1000, seed: int = 0,
                   error_estimate: bool = True, method: str = "RK45", rtol: float = 1e-7,
                   atol: float | None = None, potential=None, epsilon: float | None = None,
                   noise_seed: int | None = None, noise_dt: float | None = None,
                   noise_realisations: int = 1, noise_antithetic: bool = False,
                   extrapolate: bool = False, init: str = "free", spectra: bool = True,
                   rotations: int = 1) -> SpectralResult:
    """Integrate the d → ∞ flow at matrix level on a size-N realisation (module docstring).

    Returns the theory columns (``time`` = package time nα/d, ``tr_a``, ``q_a_b``, ``p_a_b``,
    ``loss``; for uncentred indices ``m_a``, ``trA_a``, ``trB_a``; for non-symmetric pairs ``q1_…``,
    ``q2_…`` and ``overlap_…``), with ``error_estimate`` also ``<col>_err`` (below), and
    ``spectra``: student name → (points × N) sorted eigenvalues (of the symmetric part); ``spectra=False``
    records none (and lets a noise path's steps pass over the output times). Raises
    NumericalFailure(message, time) on divergence.

    ``rotations`` = R: the columns are the mean over R independent realisations of the initial laws
    (seeds ``seed`` … ``seed + R − 1``: their own rotations and noise streams), ``info['rotation_sem']``
    its standard error. ``<col>_err``, with the same R realisations at N/2 (means m):
    ``|m(N) − m(N/2)|`` (the systematic O(1/N) error) combined in quadrature with t·√(2 SEM² + SEM_{N/2}²)
    (Student's t at 97.5 % for R − 1 degrees of freedom: 3.18 for R = 4; the random error of m(N) and that
    of the systematic estimate); for R = 1 it is ``|f(N) − f(N/2)|``.
    The random O(1/N) error of one realisation's rotations is as large as the systematic one (README
    example: seed-to-seed spread of q_student_teacher 0.005 at N = 128, systematic shift from N = 128
    to 512 0.002), which is why the default ``theory`` averages 4 realisations at N = 128 (docs/theory.md §7).

    ``extrapolate``: the columns are the 1/N extrapolation 2m(N) − m(N/2) (Richardson; it removes
    the systematic O(1/N) error of the quantile spectra but doubles the random one of the rotations),
    ``<col>_err`` as above with the extrapolation's random error. ``init="sample"``: start from the
    matrices ``simulate`` draws at d = ``size`` for ``seed`` (no N/2 run: the columns then carry no
    ``_err``), the frozen means at their sampled values √d tr M.

    ``epsilon`` (noise ratio ε = αd/B; None or 0: the deterministic flow, unchanged) adds the
    O(ε) SGD noise as the Gaussian-equivalent stochastic flow of the module docstring: adaptive
    embedded Runge–Kutta drift steps (``DRIFTS``) with error control (rtol 1e-4: below the O(1/N) noise spread), the
    noise maps in the symmetric (Strang) order, a step never longer than 0.01/(εν_max) nor ``noise_dt`` (when given;
    ``method``/``rtol``/``atol`` are then unused), from the noise stream ``noise_seed`` (default
    ``seed``). ``noise_realisations`` = R
    independent noise paths on the same initial matrices are averaged (spectra: the first path);
    ``info['noise_sem']``: column → standard error of that mean (NaN for R = 1). With
    ``noise_antithetic`` (R even) the paths come in pairs driven by ±dΞ, which cancels the
    leading O(√dt/N)-per-step fluctuation of the mean (the error is that of the R/2 pair means). The N/2 error
    estimate uses its own R paths, so ``<col>_err`` then also contains the O(1/(N√R)) noise spread."""
    from .codegen.potential import compiled_potential

    spec = load_spec(spec)
    size = int(size)
    if size < 4:
        raise UsageError(f"size {size}: must be >= 4")
    if not (time >= 0 and math.isfinite(time)):
        raise UsageError(f"time {time}: must be a finite number >= 0")
    if points < 1:
        raise UsageError(f"points {points}: must be >= 1")
    if init not in ("free", "sample"):
        raise UsageError(f"init {init!r}: must be 'free' or 'sample'")
    if int(rotations) < 1:
        raise UsageError(f"rotations {rotations}: must be >= 1")
    rotations = int(rotations)
    if init == "sample":
        error_estimate = extrapolate = False
    P = potential if potential is not None else compiled_potential(spec)
    times = np.linspace(0.0, float(time), int(points)) if points > 1 else np.array([float(time)])
    if points == 1:
        times = np.array([0.0, float(time)])
    # teachers the students do not see at zero overlap: realised odd (exactly on the invariant set)
    odd = decoupled_teachers(spec, P) if init == "free" and size % 2 == 0 else []
    noisy = epsilon is not None and float(epsilon) != 0.0
    if noisy:
        epsilon = float(epsilon)
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise UsageError(f"epsilon {epsilon}: the noise ratio must be a finite number >= 0")
        if noise_dt is not None and not (noise_dt > 0 and math.isfinite(noise_dt)):
            raise UsageError(f"noise_dt {noise_dt}: must be a finite number > 0")
        if int(noise_realisations) < 1:
            raise UsageError(f"noise_realisations {noise_realisations}: must be >= 1")
        if noise_antithetic and int(noise_realisations) % 2:
            raise UsageError(f"noise_realisations {noise_realisations}: must be even with noise_antithetic")
        from .derivation.noise import nu_expectations
        nu = getattr(P, "nu", None) or nu_expectations(P)
    nseed = int(seed if noise_seed is None else noise_seed)
    R = int(noise_realisations) if noisy else 1
    antithetic = noisy and bool(noise_antithetic)

    def run(n, want_spectra=True):
        """One batch (one flow): the ``rotations`` realisations (seeds seed, seed + 1, …) × R noise paths
        each (realisation r's path j: stream [nseed + r, n, j]; antithetic pairs share one with ±). Returns
        the mean over the realisations of their path means, realisation 0's spectra, the evaluations, the
        noise information of realisation 0's paths, and the standard error over the realisations."""
        seeds = [seed + r for r in range(rotations) for _ in range(R)]
        with blas_threads(n):
            return _run(n, seeds, want_spectra)

    def _run(n, seeds, want_spectra):
        if noisy:
            rngs, signs = [], []
            for r in range(rotations):
                for j in range(R):
                    jj, sg = (j // 2, (-1.0) ** j) if antithetic else (j, 1.0)
                    rngs.append(np.random.default_rng(np.random.SeedSequence([nseed + r, int(n), jj, 0x5eed])))
                    signs.append(sg)
            tab, sp_, nev_, steps_ = _integrate_noisy(spec, P, nu, n, seeds, times, epsilon, rngs, noise_dt,
                                                      spectra=want_spectra, signs=signs, init=init, odd=odd,
                                                      land=want_spectra)
        else:
            tab, sp_, nev_ = _integrate(spec, P, n, seeds, times, method, rtol, atol, spectra=want_spectra,
                                        init=init, odd=odd)
            steps_ = 0
        if points == 1:
            tab, sp_ = {c: v[..., -1:] for c, v in tab.items()}, {k: v[-1:] for k, v in sp_.items()}
        mean, sem, noise_sem = {}, {}, {}
        for c, v in tab.items():
            if c == "time":
                mean[c], sem[c] = v, np.zeros_like(v)
                continue
            v = v.reshape(rotations, R, -1)
            if noisy:
                paths = 0.5 * (v[0, 0::2] + v[0, 1::2]) if antithetic else v[0]
                m = paths.shape[0]
                noise_sem[c] = paths.std(axis=0, ddof=1) / math.sqrt(m) if m > 1 else np.full(paths.shape[1], np.nan)
            per_realisation = v.mean(axis=1)
            mean[c] = per_realisation.mean(axis=0)
            sem[c] = (per_realisation.std(axis=0, ddof=1) / math.sqrt(rotations) if rotations > 1
                      else np.zeros(per_realisation.shape[1]))
        return mean, sp_, nev_, {"noise_steps": steps_ // rotations, "noise_sem": noise_sem}, sem

    table, spectra, nev, extra, sem = run(size, spectra)
    info = {"rhs_evaluations": nev, "method": method, "rtol": rtol, "init": init, "extrapolated": False,
            "decoupled": [spec.names[k] for k in odd], "rotations": rotations}
    if rotations > 1:
        info["rotation_sem"] = sem
    if noisy:
        info.update({"method": "adaptive Bogacki-Shampine / Cash-Karp drift + noise maps (Strang order)", "rtol": 1e-4,
                     "epsilon": epsilon, "noise_seed": nseed, "noise_dt": noise_dt, "noise_realisations": R,
                     "noise_antithetic": bool(noise_antithetic),
                     "noise_steps": extra["noise_steps"],
                     "noise_sem": extra["noise_sem"]})
    if error_estimate or extrapolate:
        nhalf = max(4, 2 * (size // 4))      # even, so that an atom of mass ½ is resolved alike
        half, _, nev2, _, sem_half = run(nhalf, False)
        # f∞ = f(N) + (f(N) − f(N'))/((N/N')^p − 1) for an error ∝ N^(−p): p = 1 (N'/(N − N')), less for a
        # heavy power-law feature covariance (features.convergence_order); the systematic part of _err is that
        # distance, |f(N) − f(N/2)|/(2^p − 1)
        order = spec.features.convergence_order
        c_ex = 1.0 / ((size / nhalf) ** order - 1.0)
        c_sys = 1.0 / (2.0 ** order - 1.0)
        t_factor = t975(rotations - 1) if rotations > 1 else 0.0
        for c in list(table):
            if c != "time":
                diff = table[c] - half[c]
                # the random part: of the extrapolation; else of m(N) and of the systematic estimate itself,
                # c_sys·(m(N) − m(N/2)), whose noise (SEM ⊕ SEM_{N/2}) is as large as its signal where it
                # crosses zero (docs/theory.md §5)
                rand = (np.hypot((1 + c_ex) * sem[c], c_ex * sem_half[c]) if extrapolate
                        else np.hypot(sem[c], c_sys * np.hypot(sem[c], sem_half[c])))
                sys = c_sys * np.abs(diff)
                table[f"{c}_err"] = np.hypot(sys, t_factor * rand) if rotations > 1 else sys
                if extrapolate:
                    table[c] = table[c] + diff * c_ex
        info.update({"rhs_evaluations_half": nev2, "size_half": nhalf, "extrapolated": bool(extrapolate)})
    return SpectralResult(table=table, spectra=spectra, size=size, seed=seed, spec_name=spec.name, info=info)


# ============================================================================ plotting
def plot_spectra(result: SpectralResult, sim_eigs=None, path="spectra.png", times=None, bins: int = 60,
                 drop_zero_atom: bool = True):
    """Histograms of the evolving eigenvalue density of each student at a few times.

    ``sim_eigs`` (optional): eigenvalues of simulated students, ``{student: {time: eigs}}`` or, for
    a single student, ``{time: eigs}``; they are drawn next to the spectral solution at the result
    time nearest to each given time. The exact zero atom of a rank-deficient tied student is left
    out of the histograms (its mass is written in the legend)."""
    import matplotlib
    from matplotlib.figure import Figure

    names = list(result.spectra)
    if sim_eigs is not None and names and not isinstance(next(iter(sim_eigs.values())), dict):
        sim_eigs = {names[0]: sim_eigs}
    tgrid = result.time
    fig = Figure(figsize=(7, 3.2 * max(1, len(names))))
    axes = fig.subplots(len(names), 1, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        sims = (sim_eigs or {}).get(name, {})
        ts = list(sims) if sims else (times if times is not None else np.linspace(tgrid[0], tgrid[-1], 4))
        colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(ts)))
        idx = [int(np.argmin(np.abs(tgrid - float(t)))) for t in ts]
        pool = [result.spectra[name][i] for i in idx] + [np.asarray(sims[t], float) for t in sims]
        lo = min(float(np.min(v)) for v in pool)
        hi = max(float(np.max(v)) for v in pool)
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)      # common bins
        width = edges[1] - edges[0]

        def _hist(ev, **kw):
            ev = np.asarray(ev, dtype=float)
            keep = np.abs(ev) > 1e-10 * max(np.abs(ev).max(), 1e-300) if drop_zero_atom else np.ones(len(ev), bool)
            ax.hist(ev[keep], bins=edges, weights=np.full(keep.sum(), 1.0 / (len(ev) * width)), **kw)
            return 1.0 - keep.mean()

        for t, i, col in zip(ts, idx, colors):
            atom = _hist(result.spectra[name][i], histtype="step", color=col, lw=1.5)
            ax.plot([], [], color=col, label=f"spectral t={tgrid[i]:.3g}" + (f" (atom {atom:.2f} at 0)" if atom > 0 else ""))
            if sims:
                _hist(sims[t], histtype="stepfilled", alpha=0.25, color=col, label=f"simulation t={float(t):.3g}")
        ax.set_title(f"{result.spec_name}: eigenvalue density of {name} (N = {result.size})")
        ax.set_xlabel("eigenvalue")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    fig.tight_layout()
    from .files import atomic_target
    path = Path(path)
    with atomic_target(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    return path


# ============================================================================ command-line helpers
def run_spectral_from_args(spec, args) -> SpectralResult:
    """Run ``solve_spectral`` from parsed ``theory`` arguments; write --spectra and --spectra-plot
    (the table itself is written by the caller, to --out or stdout). Returns the result."""
    from .method import DEFAULT_ROTATIONS, DEFAULT_SIZE, QUICK_SIZE

    spec = load_spec(spec)
    eps = 0.0 if args.noise == "off" else spec.epsilon(args.dim)
    sample = args.init == "sample"
    quick = bool(getattr(args, "quick", False))
    size = args.dim if sample else (args.size or (QUICK_SIZE if quick else DEFAULT_SIZE))
    rotations = args.rotations or (1 if sample else DEFAULT_ROTATIONS)
    paths = args.realisations or 1
    want = bool(args.spectra or args.spectra_plot)
    res = solve_spectral(spec, time=args.time, points=args.points, size=size, seed=args.seed, spectra=want,
                         error_estimate=not args.no_error_estimate, epsilon=eps or None,
                         noise_realisations=paths, noise_antithetic=eps > 0 and paths % 2 == 0,
                         rotations=rotations, init=args.init)
    if args.spectra:
        res.spectra_to_csv(args.spectra, full=args.spectra_full)
    if args.spectra_plot:
        plot_spectra(res, path=args.spectra_plot)
    return res
