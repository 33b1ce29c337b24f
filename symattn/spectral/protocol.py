"""What the matrix-level engine asks of a parameterisation kind (``symattn.kinds``): a declared protocol.

Every kind implements it (``Kind`` gives defaults; a kind that cannot be trained or realised raises SpecError
naming its parameterisation). ``tests/test_kinds.py`` checks each kind's implementation against the moment
hierarchy's statement of the same kind: the velocity against ``letter_flow``, the noise map against
``fluctuation_forms``.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class MatrixLevelKind(Protocol):
    """The size-N form of one kind (docs/theory.md §5–§7)."""

    def realise(self, ix, N: int, rng, diagonal: bool) -> tuple:
        """(representation, value) of the size-N quantile realisation of its initial law (``symattn.matrix.Mat``);
        ``diagonal``: in its own eigenbasis."""

    def matrix_velocity(self, k: int, ctx) -> tuple:
        """d/dτ of its size-N parts (``Mat.parts``) from ``field.Context`` (the matrices, Φ's gradients, γ)."""

    def noise_map(self, M, X, metric=None):
        """Its size-N matrix after a Gaussian-equivalent SGD noise increment X (``noise.Noise``), SGD-shaped."""

    def split_degree(self, M) -> int:
        """Degree of its integrated array in the trained parameters (the noisy flow's splitting cap)."""

    def reads_square(self, M, metric=None) -> bool:
        """Whether its velocity reads S Sᵀ (then the flow traces Tr S²/N from that product)."""
