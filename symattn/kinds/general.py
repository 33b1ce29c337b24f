"""General S: a non-symmetric d×d matrix trained as it is (paper App. E with Ω ≠ Ψ).

Start: i.i.d. N(0, σ²/d) entries (a Ginibre matrix, a circular element of variance σ² in the limit).
G is centred, as for direct S. Letters S and Sᵀ; the order parameters split into
Ω_kl = Tr(S_k S_lᵀ)/d (``q1``) and Ψ_kl = Tr(S_k S_l)/d (``q2``) against another general index.
The flow (package time; docs/theory.md §4, eqs. 402–404 with Ω ≠ Ψ)

    dS_k/dτ = −2 Σ_l (GΩ_kl S_l + GΨ_kl S_lᵀ) − γ S_k

preserves word length, so the system closes at M = 2. Its skew part (S − Sᵀ)/2 is driven only
through entries G_ij with i ≠ j: with one token (L = 1) it is frozen.
"""
from __future__ import annotations

import numpy as np

from .. import matrix as mat
from .dense import Dense


class General(Dense):
    name = "general"
    symmetric = False

    def law(self, ix):
        from ..symbolic.freeprob import Ginibre
        return Ginibre(ix.sigma)

    def draw(self, ix, dim, rng):
        """i.i.d. N(0, σ²/d) entries (nothing drawn when σ = 0)."""
        if ix.sigma == 0:
            return {"S": np.zeros((dim, dim))}
        return {"S": rng.standard_normal((dim, dim)) * (ix.sigma / np.sqrt(dim))}

    def realise(self, ix, N, rng, diagonal):
        """A Ginibre draw: the circular law has no real quantile spectrum to fix."""
        return mat.NDense(self.draw(ix, N, rng)["S"])

    def matrix_velocity(self, k, ctx):
        """dS_k/dτ = −2 Σ_l (GΩ_kl S_l + GΨ_kl S_lᵀ) − γ S_k."""
        grad = np.zeros_like(ctx.mats[k].value)
        for l in range(ctx.K):
            ctx.mats[l].add_to(grad, -2.0 * ctx.omega[..., k, l])
            ctx.mats[l].add_to(grad, -2.0 * ctx.psi[..., k, l], transpose=True)
        return (ctx.precondition_dense(grad) - ctx.wd * ctx.mats[k].value,)

    def letters(self, k):
        return ((k, "S"), (k, "T"))

    def letter_flow(self, k, K, cidx, symmetric, metric=()):
        """Ṡ = −2 Σ_l (GΩ_kl S_l + GΨ_kl S_lᵀ) − γS; whitened (``metric`` = (Σ,)) the gradient part is Σ(…)Σ."""
        def L(l, op):
            return metric + ((l, "S") if symmetric[l] else (l, op),) + metric

        S, T, g = (k, "S"), (k, "T"), cidx["gamma"]
        fS = [(g, (S,), -1.0)]
        fT = [(g, (T,), -1.0)]
        for l in range(K):
            o, p = cidx[f"GO_{k}_{l}"], cidx[f"GP_{k}_{l}"]
            fS += [(o, L(l, "S"), -2.0), (p, L(l, "T"), -2.0)]
            fT += [(o, L(l, "T"), -2.0), (p, L(l, "S"), -2.0)]
        return {S: fS, T: fT}

    def fluctuation_forms(self, letter, metric=()):
        return [(metric, "d" if letter[1] == "S" else "t", metric, -1.0)]

    def second_order(self, letter, metric=()):
        return []
