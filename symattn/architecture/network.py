"""The residual network at finite d: its factors and its forward pass (docs/theory.md §10).

The forward pass is the residual recursion itself, on NumPy arrays or torch tensors alike:

    X_m = X_{m−1} + Σ_h softmax(β A_m^h) X_{m−1} V^h,   A^h = (X_{m−1} S^h X_{m−1}ᵀ − T(S^h))/√d,
    y = Σ_readout F((X_M S X_Mᵀ − T(S))/√d),

with the centring T(S) = Σ_{p,q} Tr(R_p S R_qᵀ) Π_p Π_qᵀ over the paths X_m = Σ_p Π_p X R_p of the
stream (the conditional mean of X_m S X_mᵀ given the attention matrices; for one layer it is the
C Tr S of docs/theory.md §1), so that every logit is a finite combination of centred indices.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from ..kinds import transpose
from .spec import Network, ResidualSpec


def _is_torch(A) -> bool:
    return type(A).__module__.startswith("torch")


def _right(H, M):
    """H (…, L, d) @ M (d × d) as one matrix product (NumPy loops over the stack otherwise)."""
    if _is_torch(H):
        return H @ M
    return (H.reshape(-1, H.shape[-1]) @ M).reshape(H.shape[:-1] + (M.shape[-1],))


def _softmax(A, beta):
    if _is_torch(A):
        return (beta * A).softmax(dim=-1)
    Z = beta * A
    E = np.exp(Z - Z.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


def draw_factors(spec: ResidualSpec, dim: int, seed: int) -> dict:
    """name -> state dict of every factor at dimension d, drawn by its kind (seeded per factor name, so a
    factor's draw does not depend on which others exist)."""
    out = {}
    for name, ix in spec.factors.items():
        rng = np.random.default_rng([int(seed), dim, *name.encode()])
        out[name] = ix.kind.draw(ix, dim, rng)
    return out


def matrices(spec: ResidualSpec, states: dict) -> dict:
    """name -> d×d matrix of each factor (S = WWᵀ, UVᵀ, S, scale·I)."""
    return {n: spec.factors[n].kind.matrix(s) for n, s in states.items()}


def _activation_fn(spec: ResidualSpec, torch_backend: bool):
    from ..expressions import Z
    from .unroll import elementwise_activation
    F = elementwise_activation(spec)
    if F is None:
        return lambda A: _softmax(A, spec.beta)
    if torch_backend:
        F = sp.nfloat(F, n=17, exponent=False)
    return sp.lambdify(Z, F, modules="torch" if torch_backend else "numpy")


def forward(spec: ResidualSpec, net: Network, mats: dict, X):
    """y (batch, L, L) of the residual recursion (module docstring); X: (batch, L, d)."""
    d = X.shape[-1]
    rd = 1.0 / math.sqrt(d)
    paths = [(None, None)]          # (Π or None for I, R or None for I)

    def trace_term(S):
        """T(S) = Σ_{p,q} Tr(R_p S R_qᵀ) Π_p Π_qᵀ, Tr(R_p S R_qᵀ) = Σ (R_p S) ∘ R_q."""
        T = 0.0
        for Pp, Rp in paths:
            RS = S if Rp is None else Rp @ S
            for Pq, Rq in paths:
                t = RS.diagonal().sum() if Rq is None else (RS * Rq).sum()
                if Pp is None and Pq is None:
                    mix = _eye_like(X)
                elif Pq is None:
                    mix = Pp
                elif Pp is None:
                    mix = transpose(Pq)
                else:
                    mix = Pp @ transpose(Pq)
                T = T + t * mix
        return T

    def logits(H, S):
        return (_right(H, S) @ transpose(H) - trace_term(S)) * rd

    H = X
    for layer in net.layers:
        update, new = 0.0, []
        for head in layer:
            P = _softmax(logits(H, mats[head.key_query.name]), spec.beta)
            V = mats[head.value.name]
            update = update + _right(P @ H, V)
            new += [(P if Pp is None else P @ Pp, V if Rp is None else Rp @ V) for Pp, Rp in paths]
        H = H + update
        paths = paths + new
    F = _activation_fn(spec, _is_torch(X))
    y = 0.0
    for S in net.readout:
        y = y + F(logits(H, mats[S.name]))
    return y


def _eye_like(X):
    L = X.shape[-2]
    if _is_torch(X):
        import torch
        return torch.eye(L, dtype=X.dtype, device=X.device)
    return np.eye(L)


def batch_loss(spec: ResidualSpec, mats: dict, X, xi=None):
    """Per-sample ½ Σ_ij (y^s − y^t − ξ)² of a batch."""
    r = forward(spec, spec.student, mats, X) - forward(spec, spec.teacher, mats, X)
    if xi is not None:
        r = r - xi
    return 0.5 * (r * r).sum(-1).sum(-1)


def index_values(unrolled, mats: dict, X) -> np.ndarray:
    """G (batch, L, L, K) of the unrolled word indices at a batch: (x_iᵀ M x_j − δ_ij Tr M)/√d."""
    d = X.shape[-1]
    words = unrolled.word_matrices(mats)
    L = X.shape[-2]
    out = np.empty(X.shape[:-2] + (L, L, len(words)))
    for k, M in enumerate(words):
        out[..., k] = (_right(X, M) @ transpose(X) - np.trace(M) * np.eye(L)) / math.sqrt(d)
    return out
