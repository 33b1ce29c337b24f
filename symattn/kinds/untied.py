"""Untied S = M = U Vᵀ, U and V of shape d×(κd) (docs/theory.md §6): not symmetric, uncentred,
an O(1/√d) mean m = Tr M/√d with a fast phase. Letters: S = M, T = Mᵀ, A = U Uᵀ, B = V Vᵀ."""
from __future__ import annotations

import numpy as np

from .. import matrix as mat
from .base import Kind, factor_width, transpose


class Untied(Kind):
    name = "untied"
    factors = ("U", "V")
    symmetric = False
    centred = False
    uses_width = True
    init_pair = True
    positive_init = True
    fast_phase = True

    def law(self, ix):
        from ..symbolic.freeprob import Untied as UntiedLaw
        su, sv = ix.sigmas
        return UntiedLaw(ix.width, su, sv)

    def draw(self, ix, dim, rng):
        """U, V with i.i.d. N(0, σ_U²/d), N(0, σ_V²/d) entries."""
        dk = factor_width(ix, dim)
        su, sv = ix.sigmas
        U = rng.standard_normal((dim, dk)) * (su / np.sqrt(dim))
        V = rng.standard_normal((dim, dk)) * (sv / np.sqrt(dim))
        return {"U": U, "V": V}

    def columns(self, ix, dim):
        return 2 * max(int(round(ix.width * dim)), 1)

    def realise(self, ix, N, rng, diagonal):
        """U = O₁ diag(√λ_U) Q₁ᵀ, V = O₂ diag(√λ_V) Q₂ᵀ: Marchenko–Pastur quantiles λ, independent
        Haar O (N×N, O₁ = I for the diagonal index) and Q (κN columns), as for i.i.d. Gaussian U, V."""
        from ..symbolic.spectra import free_poisson_quantiles, haar_orthogonal
        r = max(int(round(ix.width * N)), 1)
        parts = []
        for j, s in enumerate(ix.sigmas):
            lam = free_poisson_quantiles(N, ix.width, s ** 2)
            nz = np.flatnonzero(lam > 0)[-r:]
            O = np.eye(N) if (diagonal and j == 0) else haar_orthogonal(N, rng)
            Q = haar_orthogonal(r, rng)[:, :len(nz)]
            parts.append((O[:, nz] * np.sqrt(lam[nz])[None, :]) @ Q.T)
        return mat.Pair(tuple(parts))

    def noise_map(self, M, X, metric=None):
        """(U, V) ← (U − dΞ V, V − dΞᵀ U); whitened: the increments left-multiplied by Σ (symattn.features)."""
        U, V = M.value
        if metric is None:
            return mat.Pair((U - X @ V, V - transpose(X) @ U))
        return mat.Pair((U - metric[:, None] * (X @ V), V - metric[:, None] * (transpose(X) @ U)))

    def matrix_velocity(self, k, ctx):
        """U̇ = −β V − 2 X V − γU, V̇ = −β U − 2 Xᵀ U − γV, X = Σ_l (GΩ_kl M_l + GΨ_kl M_lᵀ), with the
        slaved-mean force β = −ψ/(tᴬ + tᴮ), ψ = 2(tr X B + tr A X), which keeps tr M fixed (§6)."""
        U, V = ctx.mats[k].value
        XV, XtU = np.zeros_like(V), np.zeros_like(U)
        for l in range(ctx.K):
            o, p = ctx.omega[..., k, l], ctx.psi[..., k, l]
            if not (o.any() or p.any()):
                continue
            Ml, o, p = ctx.mats[l], o[..., None, None], p[..., None, None]
            XV += o * Ml.apply(V) + p * Ml.apply_t(V)
            XtU += o * Ml.apply_t(U) + p * Ml.apply(U)
        N = U.shape[-2]
        m = ctx.metric                     # whitened: every gradient term left-multiplied by Σ, and β keeps
        if m is not None:                  # tr M̃ fixed under that flow (symattn.features)
            XV, XtU, Up, Vp = m[:, None] * XV, m[:, None] * XtU, m[:, None] * U, m[:, None] * V
        else:
            Up, Vp = U, V
        psi = 2.0 * (mat.inner(XV, V) + mat.inner(XtU, U)) / N
        beta = (-psi / ((mat.inner(Up, U) + mat.inner(Vp, V)) / N))[..., None, None]
        return (-beta * Vp - 2.0 * XV - ctx.wd * U, -beta * Up - 2.0 * XtU - ctx.wd * V)

    # SGD: ∇_U = Σ_b X_bᵀ e_b X_b V /(B√d),  ∇_V = Σ_b X_bᵀ e_bᵀ X_b U /(B√d)
    def preactivation(self, P, X, cols, XXt=None, scale=None):
        return P[..., cols["U"]] @ transpose(P[..., cols["V"]])

    def backward(self, ek, P, X, cols, Z):
        su, sv = cols["U"], cols["V"]
        Z[..., su] = ek @ P[..., sv]
        Z[..., sv] = transpose(ek) @ P[..., su]

    def norm_bound(self, sqnorms):
        return sqnorms[0] * sqnorms[1]

    def pullback(self, s, dS):
        """S = UVᵀ: ∂/∂U = D V, ∂/∂V = Dᵀ U."""
        return {"U": dS @ s["V"], "V": transpose(dS) @ s["U"]}

    def form(self, s):
        return "f", s["U"], s["V"]

    def index_columns(self, name):
        return [f"m_{name}", f"trA_{name}", f"trB_{name}"]

    def index_values(self, name, s, trace, dim, einsum):
        U, V = s["U"], s["V"]
        return {f"m_{name}": trace / np.sqrt(dim), f"trA_{name}": einsum("...ij,...ij->...", U, U) / dim,
                f"trB_{name}": einsum("...ij,...ij->...", V, V) / dim}

    def spectrum(self, s, dim):
        """Eigenvalues of the symmetric part (U Vᵀ + V Uᵀ)/2."""
        M = s["U"] @ s["V"].T
        return np.linalg.eigvalsh(0.5 * (M + M.T))

    def letters(self, k):
        return ((k, "S"), (k, "T"), (k, "A"), (k, "B"))

    def letter_flow(self, k, K, cidx, symmetric, metric=()):
        """Flows of M, Mᵀ, A = UUᵀ, B = VVᵀ (docs/theory.md §6): the fast mean enters through β_k. Whitened
        (``metric`` = (Σ,)): U̇ = Σ(−β̃V − 2XV) − γU, V̇ = Σ(−β̃U − 2XᵀU) − γV, so each term of U̇·or ·U̇ᵀ takes Σ
        on the side of the gradient (e.g. Ṁ = −β(ΣB + AΣ) − 2(ΣXB + AXΣ) − 2γM)."""
        def L(l, op):
            return (l, "S") if symmetric[l] else (l, op)

        def left(*w):                      # a term U̇·(…): Σ before it
            return metric + w

        def right(*w):                     # a term (…)·U̇ᵀ: Σ after it
            return w + metric

        b, g = cidx[f"beta_{k}"], cidx["gamma"]
        M, T, A, B = (k, "S"), (k, "T"), (k, "A"), (k, "B")
        fM = [(b, right(A), -1.0), (b, left(B), -1.0), (g, (M,), -2.0)]
        fT = [(b, left(A), -1.0), (b, right(B), -1.0), (g, (T,), -2.0)]
        fA = [(b, right(M), -1.0), (b, left(T), -1.0), (g, (A,), -2.0)]
        fB = [(b, left(M), -1.0), (b, right(T), -1.0), (g, (B,), -2.0)]
        for l in range(K):
            o, p = cidx[f"GO_{k}_{l}"], cidx[f"GP_{k}_{l}"]
            Ml, Tl = L(l, "S"), L(l, "T")
            fM += [(o, left(Ml, B), -2.0), (o, right(A, Ml), -2.0), (p, left(Tl, B), -2.0), (p, right(A, Tl), -2.0)]
            fT += [(o, right(B, Tl), -2.0), (o, left(Tl, A), -2.0), (p, right(B, Ml), -2.0), (p, left(Ml, A), -2.0)]
            fA += [(o, left(Ml, T), -2.0), (o, right(M, Tl), -2.0), (p, left(Tl, T), -2.0), (p, right(M, Ml), -2.0)]
            fB += [(o, left(Tl, M), -2.0), (o, right(T, Ml), -2.0), (p, left(Ml, M), -2.0), (p, right(T, Tl), -2.0)]
        return {M: fM, T: fT, A: fA, B: fB}

    def factor_flow(self, k, K, c):
        """U̇ = −β̄ΣV − 2ΣXV − γU, V̇ = −β̄ΣU − 2ΣXᵀU − γV, X = Σ_l (GΩ_kl M_l + GΨ_kl M_lᵀ) (docs/theory.md §6)."""
        import sympy as sp  # the letter flows only: a warm run imports no SymPy
        U, V = c.factor("U", k), c.factor("V", k)
        X = sp.MatAdd(*[c.coef(f"GO_{k}_{l}") * c.letter((l, "S")) + c.coef(f"GP_{k}_{l}") * c.letter((l, "T"))
                        for l in range(K)]).doit()
        b, g, m = c.coef(f"beta_{k}"), c.coef("gamma"), c.sigma
        return {U.name: (-b * m * V - 2 * m * X * V - g * U).doit(),
                V.name: (-b * m * U - 2 * m * X.T * U - g * V).doit()}

    def letters_from_factors(self, k, factors, c):
        U, V = c.factor("U", k), c.factor("V", k)
        dU, dV = factors[U.name], factors[V.name]
        M, A, B = c.letter((k, "S")), c.letter((k, "A")), c.letter((k, "B"))
        pairs = {(U, V.T): M, (V, U.T): M.T, (U, U.T): A, (V, V.T): B}
        return {M.name: (dU * V.T + U * dV.T, pairs), c.letter_name((k, "T")): (dV * U.T + V * dU.T, pairs),
                A.name: (dU * U.T + U * dU.T, pairs), B.name: (dV * V.T + V * dV.T, pairs)}

    def fluctuation_forms(self, letter, metric=()):
        """U ← U − αΣĤV, V ← V − αΣĤᵀU (Σ = I without a feature covariance): M: −α(ΣδB + AδΣ), …"""
        k, op = letter
        M, T, A, B, m = (k, "S"), (k, "T"), (k, "A"), (k, "B"), metric
        return {"S": [(m, "d", (B,), -1.0), ((A,), "d", m, -1.0)],
                "T": [((B,), "t", m, -1.0), (m, "t", (A,), -1.0)],
                "A": [(m, "d", (T,), -1.0), ((M,), "t", m, -1.0)],
                "B": [(m, "t", (M,), -1.0), ((T,), "d", m, -1.0)]}[op]

    def second_order(self, letter, metric=()):
        """M: α²ΣδMᵀδΣ (mean ν tr(Mᵀ)Σ² in place of the letter), Mᵀ: ΣδᵀMδᵀΣ, A: ΣδBδᵀΣ, B: ΣδᵀAδΣ."""
        k, op = letter
        mm = metric + metric
        return {"S": [(1.0, "dd", ((k, "T"),), mm)], "T": [(1.0, "tt", ((k, "S"),), mm)],
                "A": [(1.0, "dt", ((k, "B"),), mm)], "B": [(1.0, "td", ((k, "A"),), mm)]}[op]
