"""What the kinds that train a d×d matrix as it is (direct, general) share: one dense factor "S",
its forward pass, trace-term gradient and update, traces and spectrum (docs/theory.md §1, §4)."""
from __future__ import annotations

import numpy as np

from .base import Kind, diagonal_view, transpose


class Dense(Kind):
    """S trained directly; ``_project`` maps a gradient onto its parameter set (symmetric or not)."""

    factors = ("S",)
    fused_update = False
    closes = True

    def _project(self, A):
        return A

    def factor_flow(self, k, K, c):
        """dS_k/dτ: S is its own factor, its flow the letter flow of S (``c.letter_drifts``)."""
        S = c.letter((k, "S"))
        return {S.name: c.letter_drifts()[S.name]}

    def letters_from_factors(self, k, factors, c):
        S = c.letter((k, "S"))
        out = {S.name: (factors[S.name], {})}
        if not self.symmetric:
            out[c.letter_name((k, "T"))] = (factors[S.name].T, {})
        return out

    def whiten(self, state, root):
        """S̃ = Σ^{½}SΣ^{½}."""
        return {"S": root[:, None] * state["S"] * root[None, :]}

    def columns(self, ix, dim):
        return dim

    def dense_entries(self, dim):
        return dim * dim

    # SGD: ∇_S = Σ_b X_bᵀ e_b X_b /(B√d) − mean_b tr(e_b C) I/√d, projected (direct: symmetrised)
    def preactivation(self, P, X, cols, XXt=None, scale=None):
        return P[..., cols["S"]] @ transpose(X)

    def backward(self, ek, P, X, cols, Z):
        Z[..., cols["S"]] = self._project(ek) @ X

    def update(self, S, gs, c, a, decay, sq, metric=None):
        """S ← decay·S − α(proj ∇ − (c/√d) I), preconditioned to Σ(·)Σ on whitened variables (``metric``:
        Σ's diagonal, symattn.features)."""
        gs = self._project(gs)
        S *= decay
        if metric is None:
            S -= a * gs
            diag = diagonal_view(S)
            diag += a * c / sq
        else:
            S -= a * (metric[..., :, None] * gs * metric[..., None, :])
            diag = diagonal_view(S)
            diag += (a * c / sq) * metric ** 2

    def gradient(self, g, c, state, sq):
        gk = self._project(g["S"]).copy()
        gk[np.diag_indices(gk.shape[0])] -= c / sq
        return {"S": gk}

    def tangent(self, name, D):
        return self._project(D)

    def norm_bound(self, sqnorms):
        return sqnorms[0]

    def pullback(self, s, dS):
        """S trained as it is: D projected (direct: symmetrised)."""
        return {"S": self._project(dS)}

    def form(self, s):
        return "d", s["S"], None

    def spectrum(self, s, dim):
        """Eigenvalues of the symmetric part (S + Sᵀ)/2 (of S itself when symmetric)."""
        return np.linalg.eigvalsh(0.5 * (s["S"] + s["S"].T))
