"""The interface every parameterisation kind implements (docs/theory.md §1, §3–§6).

A kind says how an index matrix S_k is represented and trained: its factors (the arrays SGD
updates), its initial law, its part of the SGD forward pass, gradient and update, its traces
and spectra, its letters in the moment hierarchy with their flow and SGD-noise forms, and its
size-N realisation for the matrix-level solver. The rest of the package asks the kind
(``Index.kind``) and never branches on a parameterisation name.

The SGD methods work on NumPy arrays and torch tensors alike (``@``, slicing, in-place updates):
``P = X F`` holds the products of the batch with the packed factor columns, ``cols`` maps this
index's factor names to their column slices of F.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..errors import SpecError


def transpose(A):
    return A.swapaxes(-1, -2)


def factor_width(ix, dim: int, source: str = "<spec>", key: str = "width") -> int:
    """d_k = round(κ_k d) columns of a factor (≥ 1, else SpecError)."""
    dk = int(round(ix.width * dim))
    if dk < 1:
        raise SpecError(f"{source}: indices.{ix.name}.{key}: κ·d = {ix.width}·{dim} rounds to 0 columns; "
                        f"use a larger --dim or width")
    return dk


def diagonal_view(S):
    """A writable view of the diagonal of S (…, d, d): NumPy einsum view or torch ``diagonal``."""
    if type(S).__module__.startswith("torch"):
        return S.diagonal(dim1=-2, dim2=-1)
    return np.einsum("...ii->...i", S)


class Kind:
    """One parameterisation (abstract). Class attributes describe it to the spec and the engine."""

    name: ClassVar[str]
    factors: ClassVar[tuple] = ()          # factor names in a state dict, in F column order
    symmetric: ClassVar[bool] = True       # S = Sᵀ (one letter "S"; else S, Sᵀ and the factor Grams)
    centred: ClassVar[bool] = True         # G centred by C Tr S/√d (docs/theory.md §1)
    trainable: ClassVar[bool] = True       # may be a student
    uses_width: ClassVar[bool] = False     # spec key ``width`` (κ = d_k/d)
    init_pair: ClassVar[bool] = False      # ``init_scale`` may be a pair of factor scales
    positive_init: ClassVar[bool] = False  # ``init_scale`` > 0 (zero factors never move)
    uses_scale: ClassVar[bool] = False     # spec key ``scale`` (S = scale·I)
    uses_init_scale: ClassVar[bool] = True
    fused_update: ClassVar[bool] = True    # SGD update = column rescaling + the packed −α∇ (else ``update``)
    closes: ClassVar[bool] = False         # its hierarchy flow preserves word length (closed at M = 2)
    fast_phase: ClassVar[bool] = False     # has an O(1/√d) mean with a fast phase (docs/theory.md §6)
    whitens: ClassVar[bool] = True         # has a whitened form S̃ = Σ^{½}SΣ^{½} (symattn.features)

    def __repr__(self):
        return f"<kind {self.name}>"

    # ----------------------------------------------------------------- initial state
    def law(self, ix):
        """The free-probability law of the initial S (symbolic.freeprob)."""
        raise NotImplementedError

    def draw(self, ix, dim: int, rng) -> dict:
        """The initial factors at dimension d (docs/theory.md §3), from generator ``rng``."""
        raise NotImplementedError

    def whiten(self, state: dict, root) -> dict:
        """The state in the whitened variables of a feature covariance Σ = diag(root²) (symattn.features): a
        factor's rows scaled by Σ^{½} (W̃ = Σ^{½}W); a matrix trained as it is overrides (Σ^{½}SΣ^{½})."""
        return {name: root[:, None] * state[name] for name in self.factors}

    def columns(self, ix, dim: int) -> int:
        """Columns of the packed factor matrix F this index takes at dimension d."""
        return 0

    def dense_entries(self, dim: int) -> int:
        """Entries of a dense d×d matrix it keeps (memory estimate)."""
        return 0

    def realise(self, ix, N: int, rng, diagonal: bool):
        """The size-N realisation of its law for the matrix-level solver, as one of ``symattn.matrix``'s
        representations: ``Scalar(c)``, ``Diag(λ)``, ``Factor(W)`` (S = WWᵀ), ``Dense(S)``, ``NDense(S)`` or
        ``Pair((U, V))`` (M = UVᵀ)."""
        raise SpecError(f"indices.{ix.name}.parameterization: {self.name} — no size-N realisation of its "
                        f"initial law for the matrix-level solver")

    def split_degree(self, M) -> int:
        """Degree of its integrated size-N array in the trained parameters (``spectral.stochastic``
        caps a step by the parameters' relative change, that of the array divided by this degree)."""
        return 1

    def reads_square(self, M, metric=None) -> bool:
        """Whether its ``matrix_velocity`` reads S Sᵀ of its size-N array ``M`` (``_Context.sym_anticommutator``):
        the flow then traces Tr S²/N from that product instead of computing both (``spectral.field.Flow.theta``)."""
        return False

    def noise_map(self, M, X, metric=None):
        """Its size-N matrix ``M`` (``symattn.matrix.Mat``) after the Gaussian-equivalent SGD noise
        increment X (``spectral.noise.Noise``): additive, S ← S − X (whitened: S̃ ← S̃ − ΣXΣ, ``metric`` = Σ's
        diagonal, symattn.features), unless the kind says otherwise."""
        if metric is not None:
            X = metric[:, None] * X * metric[None, :]
        return M.with_parts([M.value - X])

    def matrix_velocity(self, k: int, ctx) -> tuple:
        """d/dτ of its size-N parts (``Mat.parts``) in the matrix-level limit flow (docs/theory.md §5;
        ``ctx``: the current matrices, the gradients of Φ at the current order parameters, γ)."""
        raise SpecError(f"index {k}: parameterization {self.name} has no matrix-level flow (it cannot be trained)")

    # ----------------------------------------------------------------- SGD (docs/theory.md §1)
    def preactivation(self, P, X, cols, XXt=None, scale=None):
        """Uncentred, unscaled x_iᵀ S x_j of a batch (any leading axes)."""
        raise NotImplementedError

    def backward(self, ek, P, X, cols, Z) -> None:
        """Fill this index's columns of Z = ∂(batch loss)/∂(X F) from e = ∂𝓛/∂G."""
        raise NotImplementedError

    def rate(self, c, sq):
        """Extra multiplicative rate of the factor columns in one step (θ ← (1 − αγ/d + α·rate)θ)."""
        return 0.0 * c

    def update(self, S, gs, c, a, decay, sq) -> None:
        """In-place step of a non-fused kind: S ← decay·S − α·(its gradient from gs)."""
        raise NotImplementedError

    def gradient(self, g: dict, c, state: dict, sq) -> dict:
        """The batch-mean gradient per factor from the packed blocks ``g`` (adds the trace terms)."""
        return g

    def tangent(self, name: str, D):
        """A direction D in factor ``name``'s space projected onto the kind's parameter set."""
        return D

    def norm_bound(self, sqnorms):
        """Cheap bound of Tr(S Sᵀ) from the squared Frobenius norms of its factors."""
        return None

    # ----------------------------------------------------------------- order parameters
    def form(self, s: dict) -> tuple:
        """("f", L, R) with S = L Rᵀ, ("d", S, None) dense, or ("i", c, None) for c·I."""
        raise NotImplementedError

    def matrix(self, s: dict):
        """The d×d matrix S of a state (formed densely: the residual model's words need it)."""
        f, a, b = self.form(s)
        if f == "f":
            return a @ transpose(b)
        return s["S"] if f == "i" else a

    def pullback(self, s: dict, dS) -> dict:
        """∂Φ/∂(each factor) from D = ∂Φ/∂S (S's entries taken as independent), projected onto the
        kind's parameter set (docs/theory.md §10)."""
        raise NotImplementedError

    def index_columns(self, name: str) -> list:
        """Extra per-index CSV columns (docs/interface.md)."""
        return []

    def index_values(self, name: str, s: dict, trace, dim: int, einsum) -> dict:
        return {}

    def spectrum(self, s: dict, dim: int) -> np.ndarray:
        """Eigenvalues (length d) of S, or of its symmetric part."""
        raise NotImplementedError

    # ----------------------------------------------------------------- moment hierarchy
    def letters(self, k: int) -> tuple:
        return ((k, "S"),)

    def letter_flow(self, k: int, K: int, cidx: dict, symmetric, metric: tuple = ()) -> dict:
        """letter -> [(coefficient key, replacement letters, factor)] of its gradient flow.

        ``symmetric[l]``: whether S_l is symmetric (else S_l stands for (M_l + M_lᵀ)/2). ``metric``: the
        letters of the preconditioner, () without a feature covariance, (Σ,) with one (the whitened
        letters' flow, docs/theory.md §1)."""
        raise NotImplementedError

    def fluctuation_forms(self, letter, metric: tuple = ()) -> list:
        """(left letters, 'd' for δ / 't' for δᵀ, right letters, coefficient/α) of a letter's
        first-order fluctuation under one SGD step (docs/theory.md §7)."""
        raise NotImplementedError

    def second_order(self, letter, metric: tuple = ()) -> list:
        """(coefficient/α², kinds, middle letters, outer letters) of the term δ_a·middle·δ_b of one letter,
        whose mean ν tr(middle)·outer replaces the letter (outer = () for the identity)."""
        raise NotImplementedError

    # ----------------------------------------------------------------- the flow as SymPy (derivation.matrix_flow)
    def factor_flow(self, k: int, K: int, c) -> dict:
        """factor name → d(factor)/dτ as a SymPy matrix expression in the symbols ``c``
        (``derivation.matrix_flow.FlowSymbols``): the kind's statement of its gradient flow."""
        raise NotImplementedError

    def letters_from_factors(self, k: int, factors: dict, c) -> dict:
        """letter name → (d(letter)/dτ by the product rule on ``factors``, {(X, Yᵀ): letter} to write factor
        products back as letters): what ``matrix_flow.check_product_rule`` compares with the letter flow."""
        raise NotImplementedError

