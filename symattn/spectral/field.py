"""The vector field of the matrix-level flow (docs/theory.md §5, §6): dY/dτ of every trained size-N matrix.

Each trainable index moves by its kind's ``matrix_velocity`` (``symattn.spectral.protocol``), reading a
:class:`Context`: the current matrices of a batch of R realisations, Φ's gradient matrices GΩ, GΨ, Γ = GΩ + GΨ at
their order parameters θ (traces of the current matrices; the means of uncentred students slaved to ∂Φ/∂m = 0,
``derivation.means``), and the weight decay γ. For instance tied ``dW_k/dτ = −4 (Σ_l Γ_kl S_l) W_k − γ W_k``,
direct ``dS_k/dτ = −2 Σ_l Γ_kl S_l − γ S_k``, untied ``U̇ = −βV − 2XV − γU``, ``V̇ = −βU − 2XᵀU − γV``.
"""
from __future__ import annotations

import math

import numpy as np

from ..derivation.means import relax_means, solve_means
from ..errors import ExpectationUndefined, NumericalFailure
from ..matrix import Diag, Factor, Mat, Pair, Scalar, inner, pair_trace, stack, syrk
from ..spec import Spec

BLOWUP = 1e12          # |q| beyond this is a divergence
CHEAP_BOUND = 1e3      # entries below this/N keep every order parameter below BLOWUP: the largest is
                       # quartic in a factor's entries, Tr((WWᵀ)²)/N ≤ N (N·(1e3/N)²)² = 1e12/N


class Context:
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
        if isinstance(Ml, Factor) and k is not None:
            gram = self.grams.get((l, k))
            if gram is None and (k, l) in self.grams:
                gram = self.grams[(k, l)].swapaxes(-1, -2)
        return Ml.apply(X, gram)

    def sym_anticommutator(self, l: int, k: int, c):
        """c·(S_l S_k + S_k S_l) for a dense symmetric S_k (c one number per realisation), exactly symmetric
        (S_l → (M_l + M_lᵀ)/2 if non-symmetric): 2c·S_k S_kᵀ for l = k (a SYRK per realisation, or the one
        ``Flow.theta`` made for the trace), c(λ_i + λ_j) S_ij for a scalar or diagonal S_l; a fresh array."""
        Ml, S = self.mats[l], self.mats[k].value
        c = np.asarray(c)[..., None, None]
        if l == k:
            out = self.grams.pop((k, k), None)     # S Sᵀ from the order parameters' traces (``Flow.theta``)
            out = syrk(S) if out is None else out
            out *= 2.0 * c
            return out
        if isinstance(Ml, Scalar):
            return (2.0 * Ml.value * c) * S
        if isinstance(Ml, Diag):
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


class Flow:
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
        self.blocks = None              # N/2 for a realisation in two independent halves (``join_halves``)
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
        self.mats = [m if isinstance(m, Scalar) else m.with_parts([np.asarray(p, dtype=self.dtype) for p in m.parts()])
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
        if not biggest <= BLOWUP:                                  # NaN fails too
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
            ctx = Context(mats, G, grams, wd, self.K, self.metric)
            parts = [v.ravel() for k in self.train for v in self.spec.indices[k].kind.matrix_velocity(k, ctx)]
        out = (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(self.dtype, copy=False)
        return out if sched.constant else float(sched(t)) * out      # docs/theory.md §3, "Schedules"

    def check(self, y, t):
        """Raise NumericalFailure(t) on an accepted state that diverged or lost its slaved means."""
        big = max(float(y.max()), -float(y.min())) if y.size else 0.0      # NaN if any entry is NaN
        if not math.isfinite(big):
            raise NumericalFailure(f"spectral flow: NaN/inf at time {t:.6g}", t)
        if not self.mean_pos and big * self.N < CHEAP_BOUND:
            return                              # no means to update, and no trace can be near BLOWUP
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
                U, V = mats[a].parts() if isinstance(mats[a], Pair) else (None, None)
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


def finite_start(flow, t, y) -> None:
    """NumericalFailure(t) unless the vector field is finite at the start (an adaptive integrator sizes its first
    step from it: a NaN there is a NaN step, which no step-size control ever leaves)."""
    with np.errstate(all="ignore"):
        k = flow.rhs(t, y)
    if not np.all(np.isfinite(k)):
        raise NumericalFailure(f"spectral flow: the vector field is not finite at the start (time {t:.6g}): Φ's "
                               f"gradient overflows at the initial order parameters", t)
