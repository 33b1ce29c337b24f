"""Tied S = W Wᵀ, W of shape d×(κd) (docs/theory.md §3, §5): PSD, trained through W."""
from __future__ import annotations

import numpy as np

from .. import matrix as mat
from .base import Kind, factor_width, transpose

DENSE_WIDTH = 0.618     # κ + κ² > 1 above: S·S (N³) is cheaper than WᵀW and W(WᵀW)


class Tied(Kind):
    name = "tied"
    factors = ("W",)
    uses_width = True
    positive_init = True

    def law(self, ix):
        from ..symbolic.freeprob import Wishart
        return Wishart(ix.width, ix.sigma)

    def draw(self, ix, dim, rng):
        """W with i.i.d. N(0, σ²/d) entries."""
        return {"W": rng.standard_normal((dim, factor_width(ix, dim))) * (ix.sigma / np.sqrt(dim))}

    def columns(self, ix, dim):
        return max(int(round(ix.width * dim)), 1)

    def realise(self, ix, N, rng, diagonal):
        """Free Poisson (Marchenko–Pastur) quantiles λ and a Haar O: S = O diag(λ) Oᵀ itself when the
        width κ > DENSE_WIDTH, else the factor O diag(√λ) of its non-zero part (whichever flow costs
        fewer flops per evaluation: one N³ product S·S, or WᵀW and W(WᵀW), (κ + κ²)N³)."""
        from ..symbolic.spectra import free_poisson_quantiles, haar_orthogonal
        lam = free_poisson_quantiles(N, ix.width, ix.sigma ** 2)
        if diagonal:
            return mat.Diag(lam)
        O = haar_orthogonal(N, rng)
        if ix.width > DENSE_WIDTH:
            S = (O * lam[None, :]) @ O.T
            return mat.Dense(0.5 * (S + S.T))
        nz = lam > 0
        return mat.Factor(O[:, nz] * np.sqrt(lam[nz])[None, :])

    def matrix_velocity(self, k, ctx):
        """dW_k/dτ = −4 (Σ_l Γ_kl S_l) W_k − γ W_k, so that d(WWᵀ)/dτ is the S flow below; in the
        dense form S itself, dS_k/dτ = −4 Σ_l Γ_kl (S_l S_k + S_k S_l) − 2γ S_k (a batch of realisations:
        Γ one per realisation, ``symattn.matrix``)."""
        Mk = ctx.mats[k]
        dense = isinstance(Mk, mat.Dense)
        metric = ctx.metric                # whitened variables: the gradient part preconditioned by Σ
        half = dense and metric is not None
        acc = None
        for l in range(ctx.K):
            c = -4.0 * ctx.gamma[..., k, l]
            if c.any():                 # a number per realisation (an array method: np.any costs 4× more)
                if dense and not half:
                    t = ctx.sym_anticommutator(l, k, c)
                else:
                    t = ctx.sym_apply(l, Mk.value, k)
                    t *= c[..., None, None]
                acc = t if acc is None else acc.__iadd__(t)
        if acc is None:
            acc = np.zeros_like(Mk.value)
        elif metric is not None:           # W̃: Σ·(−4ΣΓS̃_l W̃); S̃: ΣA + AᵀΣ, A = −4ΣΓS̃_l S̃
            acc = metric[:, None] * acc
            if half:
                acc = acc + acc.swapaxes(-1, -2)
        if ctx.wd:
            acc -= (2.0 if dense else 1.0) * ctx.wd * Mk.value
        return (acc,)

    def reads_square(self, M, metric=None) -> bool:
        """The dense form without Σ: its flow's −8Γ_kk S_k² term is 2·S_k S_kᵀ."""
        return isinstance(M, mat.Dense) and metric is None

    def split_degree(self, M):
        """2 for the dense form S = WWᵀ (quadratic in W): the noisy flow's steps then match the factor
        form's, at half the products per evaluation (one S·S against WᵀW and W(WᵀW))."""
        return 2 if isinstance(M, mat.Dense) else 1

    def noise_map(self, M, X, metric=None):
        """W ← (I − 2dΞ)W, i.e. S ← (I − 2dΞ) S (I − 2dΞ) (the dense form); whitened: dΞ → ΣdΞ on the left,
        dΞΣ on the right (symattn.features)."""
        left = X if metric is None else metric[:, None] * X
        if isinstance(M, mat.Dense):
            A = left @ M.value
            A *= -2.0
            A += M.value                                    # (I − 2dΞ)S
            B = A @ transpose(left)
            B *= -2.0
            B += A                                          # (I − 2dΞ)S(I − 2dΞ)ᵀ
            B += transpose(B)                               # symmetric again, exactly (Mat.with_parts does not
            B *= 0.5                                        # symmetrise): its antisymmetric part is unstable
            return mat.Dense(B)
        return mat.Factor(M.value - 2.0 * (left @ M.value))

    # SGD: ∇_W = Σ_b X_bᵀ (e_b + e_bᵀ) X_b W /(B√d) − 2 mean_b tr(e_b C) W/√d
    def preactivation(self, P, X, cols, XXt=None, scale=None):
        Y = P[..., cols["W"]]
        return Y @ transpose(Y)

    def backward(self, ek, P, X, cols, Z):
        sl = cols["W"]
        Z[..., sl] = (ek + transpose(ek)) @ P[..., sl]

    def rate(self, c, sq):
        return 2 * c / sq

    def gradient(self, g, c, state, sq):
        return {"W": g["W"] - 2 * c / sq * state["W"]}

    def norm_bound(self, sqnorms):
        return sqnorms[0] ** 2

    def pullback(self, s, dS):
        """S = WWᵀ: ∂/∂W = (D + Dᵀ) W."""
        return {"W": (dS + transpose(dS)) @ s["W"]}

    def form(self, s):
        return "f", s["W"], s["W"]

    def spectrum(self, s, dim):
        """Squares of the singular values of W, padded with zeros to d (S is never formed)."""
        sv = np.linalg.svd(s["W"], compute_uv=False)
        return np.concatenate([np.zeros(max(dim - len(sv), 0)), sv[:dim] ** 2])

    # hierarchy: dS_k/dt = −4 Σ_l Γ_kl (S_l S_k + S_k S_l) − 2γ S_k (package time); whitened by Σ
    # (``metric`` = (Σ,)): dS̃_k/dt = −4 Σ_l Γ_kl (ΣS̃_l S̃_k + S̃_k S̃_l Σ) − 2γ S̃_k
    def letter_flow(self, k, K, cidx, symmetric, metric=()):
        S = (k, "S")
        items = []
        for l in range(K):
            G = cidx[f"Gamma_{k}_{l}"]
            for r, w in _reps(l, symmetric):
                items += [(G, metric + r + (S,), -4.0 * w), (G, (S,) + r + metric, -4.0 * w)]
        items.append((cidx["gamma"], (S,), -2.0))
        return {S: items}

    def factor_flow(self, k, K, c):
        """dW_k/dτ = −4 Σ (Σ_l Γ_kl S_l) W_k − γ W_k (S_l of a non-symmetric index: (M_l + M_lᵀ)/2)."""
        import sympy as sp  # the letter flows only: a warm run imports no SymPy
        W = c.factor("W", k)
        drive = sp.MatAdd(*[sp.Rational(1, 2 if len(reps) > 1 else 1) * c.coef(f"Gamma_{k}_{l}") * c.letter(x)
                            for l in range(K) for reps in [[x for x in ((l, "S"), (l, "T"))
                                                            if x[1] == "S" or not c.spec.indices[l].symmetric]]
                            for x in reps])
        return {W.name: (-4 * c.sigma * drive * W - c.coef("gamma") * W).doit()}

    def letters_from_factors(self, k, factors, c):
        W = c.factor("W", k)
        dW = factors[W.name]
        return {c.S(k).name: (dW * W.T + W * dW.T, {(W, W.T): c.S(k)})}

    def fluctuation_forms(self, letter, metric=()):
        """S̃ ← (I − 2αΣĤ)S̃(I − 2αĤΣ): forms −2α(ΣδS̃ + S̃δΣ)."""
        S = (letter[0], "S")
        return [(metric, "d", (S,), -2.0), ((S,), "d", metric, -2.0)]

    def second_order(self, letter, metric=()):
        """4α²ΣδS̃δΣ, whose mean replaces the letter by ν tr(S̃) Σ²."""
        return [(4.0, "dd", ((letter[0], "S"),), metric + metric)]


def _reps(l, symmetric):
    """S_l in a flow: itself, or (M_l + M_lᵀ)/2 for a non-symmetric index."""
    if symmetric[l]:
        return [(((l, "S"),), 1.0)]
    return [(((l, "S"),), 0.5), (((l, "T"),), 0.5)]
