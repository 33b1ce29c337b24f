"""One online-SGD step at finite d, dense batched BLAS (docs/theory.md §1, §3).

Pre-activations ``G_ijk = x_i^T S_k x_j/√d`` (minus ``C_ij Tr S_k/√d`` for centred kinds), the
per-sample ∂𝓛/∂G from ``build_loss(spec).compile_gradient()`` (the theory's SymPy expression), then
the chain rule to the factors with a batch of B samples X_b (L×d); each kind's part of the forward
pass, gradient and update is in ``symattn.kinds`` (e.g. tied ∇_W = Σ_b X_bᵀ(e_b + e_bᵀ)X_b W/(B√d)
− 2 mean_b tr(e_b C) W/√d).

Every trained/frozen factor sits as columns of one d×n matrix F, so the forward pass is one
(B·L)×d by d×n product and the backward pass one d×(B·L) by (B·L)×n_train product; the per-sample
work is L×L algebra only. Update ``θ ← (1 − αγ/d) θ − α ∇_θ`` on every trainable factor.
"""
from __future__ import annotations

import numpy as np

from ..kinds import transpose
from ..spec import Spec
from ..symbolic.loss import build_loss
from .init import psd_sqrt


def factor_layout(kinds, trainable, state) -> tuple:
    """Columns of the packed factor matrix F: ([{factor: slice} per index], total columns, trainable
    columns), trainable blocks first (they receive gradients); widths from one seed's ``state``."""
    cols, pos = [dict() for _ in kinds], 0
    for train in (True, False):
        for k, kind in enumerate(kinds):
            if trainable[k] == train:
                for nm in kind.factors:
                    w = state[k][nm].shape[1]
                    cols[k][nm] = slice(pos, pos + w)
                    pos += w
        if train:
            n_train = pos
    return cols, pos, n_train


def scheduled(model, a: float, d: int) -> tuple:
    """(α_n, γ_n) of the model's next step n: α s(t_n) and γ (× s(t_n) when the schedule is on γ too),
    t_n = nα/d the nominal time (symattn.schedule); counts the step."""
    gamma, sched = model.gamma, model.schedule
    if not sched.constant:
        t = model.n * a / d
        a, gamma = a * float(sched(t)), gamma * float(sched.gamma_factor(t))
    model.n += 1
    return a, gamma


class Model:
    """The SGD dynamics of one spec at dimension d; holds the current factors (``set_state``)."""

    def __init__(self, spec: Spec, dim: int, loss_grad=None, dtype=np.float64):
        self.spec, self.d = spec, int(dim)
        self.dtype = np.dtype(dtype)
        self.L, self.K = spec.tokens, spec.K
        self.C = np.asarray(spec.covariance, dtype=float)
        self.identity_cov = np.allclose(self.C, np.eye(self.L))
        self.R = psd_sqrt(self.C)
        self.loss_grad = loss_grad or build_loss(spec).compile_gradient()
        self.alpha = spec.step_size(self.d)
        self.gamma = spec.weight_decay
        self.schedule, self.n = spec.schedule, 0          # step n uses α s(nα/d) (symattn.schedule)
        # whitened variables: every gradient step preconditioned by Σ (symattn.features)
        self.metric = None if spec.features.identity else spec.features.eigenvalues(self.d).astype(self.dtype)
        self.B = spec.batch_size
        self.kinds = [ix.kind for ix in spec.indices]
        self.trainable = [ix.trainable for ix in spec.indices]
        self.noise = spec.label_noise if spec.loss is None else 0.0
        self.state = None

    # ------------------------------------------------------------------ state
    def set_state(self, state: list) -> None:
        """Copy a list of factor dicts (``draw_initial`` format) into the packed matrix F."""
        self.cols, n, self.n_train = factor_layout(self.kinds, self.trainable, state)
        self.F = np.empty((self.d, n), dtype=self.dtype)
        self.state = [dict() for _ in range(self.K)]
        for k, cols in enumerate(self.cols):
            for nm, sl in cols.items():
                self.F[:, sl] = state[k][nm]
                self.state[k][nm] = self.F[:, sl]          # views into F: updates are in place
        self.scale = {}
        for k, kind in enumerate(self.kinds):
            if not kind.factors:                         # a frozen matrix without factors (c·I)
                self.state[k] = {nm: np.asarray(v) for nm, v in state[k].items()}
                self.scale[k] = kind.form(self.state[k])[1]

    def get_state(self) -> list:
        """A copy of the current factors (list of dicts)."""
        return [{nm: np.array(v) for nm, v in s.items()} for s in self.state]

    def trace(self, k: int) -> float:
        """Tr S_k (unnormalised), accumulated in float64."""
        form, A, Bm = self.kinds[k].form(self.state[k])
        if form == "f":
            return float(np.einsum("ij,ij->", A, Bm, dtype=np.float64))
        if form == "i":
            return A * self.d
        return float(np.trace(A, dtype=np.float64))

    # ------------------------------------------------------------------ samples
    def sample(self, rng, B: int | None = None):
        """A batch: tokens X (B, L, d) with E[x_ia x_jb] = C_ij δ_ab (one (B·L)×d draw), label noise."""
        B = self.B if B is None else B
        X = rng.standard_normal((B, self.L, self.d))     # the seed's stream, whatever the dtype
        if self.dtype != np.float64:
            X = X.astype(self.dtype)
        if not self.identity_cov:
            X = np.einsum("ij,bjd->bid", self.R.astype(self.dtype), X)
        xi = rng.standard_normal((B, self.L, self.L)) * np.sqrt(self.noise) if self.noise > 0 else None
        return X, xi

    # ------------------------------------------------------------------ forward / backward
    def forward(self, X):
        """G (B, L, L, K) and the products P = X F (B, L, n) reused by the backward pass."""
        B, L, d = X.shape
        sq = np.sqrt(d)
        P = (X.reshape(B * L, d) @ self.F).reshape(B, L, -1)
        G = np.empty((B, L, L, self.K), dtype=self.dtype)
        XXt = X @ transpose(X) if self.scale else None
        for k, kind in enumerate(self.kinds):
            g = kind.preactivation(P, X, self.cols[k], XXt, self.scale.get(k))
            if kind.centred:  # centred G (docs/theory.md §1)
                g = g - (self.C * self.trace(k)).astype(self.dtype)
            G[..., k] = g / sq
        return G, P

    def per_sample_loss(self, X, xi=None) -> np.ndarray:
        """𝓛(G_b, ξ_b) for every sample of the batch."""
        G, _ = self.forward(X)
        return self.loss_grad(G, xi)[0]

    def batch_loss(self, X, xi=None) -> float:
        """Batch-mean loss (the function one SGD step descends)."""
        return float(np.mean(self.per_sample_loss(X, xi)))

    def _grad(self, X, xi):
        """Packed batch-mean gradient of the trainable blocks: (d, n_train) array without the
        trace terms, the per-index scalars c_k = mean_b tr(e_bk C), and the batch-mean loss."""
        B, L, d = X.shape
        G, P = self.forward(X)
        loss, e = self.loss_grad(G, xi)
        e = e.astype(self.dtype, copy=False)
        Z = np.empty((B, L, self.n_train), dtype=self.dtype)
        c = np.zeros(self.K)
        for k, kind in enumerate(self.kinds):
            if not self.trainable[k]:
                continue
            ek = e[..., k]
            c[k] = np.einsum("bij,ij->", ek, self.C) / B
            kind.backward(ek, P, X, self.cols[k], Z)
        g = X.reshape(B * L, d).T @ Z.reshape(B * L, self.n_train)
        g *= 1.0 / (B * np.sqrt(d))
        return g, c, float(np.mean(loss))

    def gradients(self, X, xi=None) -> list:
        """Batch-mean ∇ of the loss w.r.t. every trainable factor (list of dicts; {} for frozen)."""
        g, c, _ = self._grad(X, xi)
        sq = np.sqrt(self.d)
        out = [dict() for _ in range(self.K)]
        for k, kind in enumerate(self.kinds):
            if self.trainable[k]:
                blocks = {nm: g[:, sl].copy() for nm, sl in self.cols[k].items()}
                out[k] = kind.gradient(blocks, c[k], self.state[k], sq)
        return out

    def step(self, X, xi=None) -> float:
        """One SGD step on the batch (in place): θ ← (1 − αγ/d)θ − α∇θ, α and γ scaled by the schedule at
        t = nα/d (``scheduled``). Returns the batch-mean loss."""
        g, c, loss = self._grad(X, xi)
        a, d = self.alpha, self.d
        a, gamma = scheduled(self, a, d)
        sq = np.sqrt(d)
        decay = 1.0 - a * gamma / d
        for k, kind in enumerate(self.kinds):
            if not self.trainable[k]:
                continue
            if not kind.fused_update:
                for nm, sl in self.cols[k].items():
                    kind.update(self.state[k][nm], g[:, sl], c[k], a, decay, sq, metric=self.metric)
            else:
                rate = kind.rate(c[k], sq)
                factor = decay + a * rate if self.metric is None else (decay + a * rate * self.metric)[:, None]
                for sl in self.cols[k].values():
                    self.F[:, sl] *= factor
        if self.metric is not None:
            g = self.metric[:, None] * g
        mask = self._factor_mask()
        if mask is None:
            self.F[:, :self.n_train] -= a * g
        else:
            for sl in mask:
                self.F[:, sl] -= a * g[:, sl]
        return loss

    def _factor_mask(self):
        """None when every trainable block is a factor (one fused update), else their slices."""
        if not hasattr(self, "_mask"):
            own = [k for k, kind in enumerate(self.kinds) if self.trainable[k] and not kind.fused_update]
            self._mask = None if not own else [
                sl for k, kind in enumerate(self.kinds)
                if self.trainable[k] and kind.fused_update for sl in self.cols[k].values()]
        return self._mask

    def norm_bound(self) -> float:
        """Cheap upper bound of max_k Tr(S_k S_k^T)/d (‖LR^T‖_F ≤ ‖L‖_F‖R‖_F)."""
        out = 0.0
        for k, kind in enumerate(self.kinds):
            v = kind.norm_bound([np.sum(self.state[k][nm] ** 2) for nm in kind.factors])
            if v is not None:
                out = max(out, v / self.d)
        return float(out)
