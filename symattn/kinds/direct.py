"""Direct S: a symmetric d×d matrix trained as it is (docs/theory.md §4): GOE start, closed flow."""
from __future__ import annotations

import numpy as np

from .. import matrix as mat
from .base import transpose
from .dense import Dense
from .tied import _reps


def goe(dim: int, rng) -> np.ndarray:
    """Symmetric Gaussian matrix Z = (A + Aᵀ)/√(2d), off-diagonal variance 1/d, Tr Z²/d → 1."""
    A = rng.standard_normal((dim, dim))
    return (A + A.T) / np.sqrt(2.0 * dim)


class Direct(Dense):
    name = "direct"

    def law(self, ix):
        from ..symbolic.freeprob import GOE
        return GOE(ix.sigma)

    def draw(self, ix, dim, rng):
        """σ·Z, Z a GOE matrix (nothing is drawn when σ = 0)."""
        return {"S": goe(dim, rng) * ix.sigma if ix.sigma != 0 else np.zeros((dim, dim))}

    def realise(self, ix, N, rng, diagonal):
        """Semicircle quantiles of radius 2σ, Haar-rotated."""
        from ..symbolic.spectra import haar_orthogonal, semicircle_quantiles
        lam = semicircle_quantiles(N, 2.0 * ix.sigma)
        if diagonal:
            return mat.Diag(lam)
        O = haar_orthogonal(N, rng)
        S = (O * lam[None, :]) @ O.T
        return mat.Dense(0.5 * (S + S.T))

    def matrix_velocity(self, k, ctx):
        """dS_k/dτ = −2 Σ_l Γ_kl S_l − γ S_k."""
        grad = np.zeros_like(ctx.mats[k].value)
        for l in range(ctx.K):
            g = ctx.gamma[..., k, l]
            if g.any():
                ctx.add_sym(grad, l, -2.0 * g)
        return (ctx.precondition_dense(grad) - ctx.wd * ctx.mats[k].value,)

    def _project(self, A):
        return 0.5 * (A + transpose(A))             # S stays symmetric: the gradient is symmetrised

    # hierarchy: dS_k/dt = −2 Σ_l Γ_kl S_l − γ S_k (closed: word length is preserved); whitened by Σ
    # (``metric`` = (Σ,)): dS̃_k/dt = −2 Σ_l Γ_kl ΣS̃_lΣ − γ S̃_k (no longer closed)
    def letter_flow(self, k, K, cidx, symmetric, metric=()):
        S = (k, "S")
        items = [(cidx[f"Gamma_{k}_{l}"], metric + r + metric, -2.0 * w)
                 for l in range(K) for r, w in _reps(l, symmetric)]
        items.append((cidx["gamma"], (S,), -1.0))
        return {S: items}

    def fluctuation_forms(self, letter, metric=()):
        return [(metric, "d", metric, -1.0)]

    def second_order(self, letter, metric=()):
        return []
