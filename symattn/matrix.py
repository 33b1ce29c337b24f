"""Size-N matrices of the matrix-level solver (``symattn.spectral``): representations and traces.

``Mat(kind, value)``: ``scalar`` c·I, ``diag`` (a diagonal), ``factor`` W with S = W Wᵀ (never
formed), ``dense`` a symmetric S, ``ndense`` a general S, ``pair`` (U, V) with M = U Vᵀ (never
formed). Products with a block X (``apply``: S X, ``apply_t``: Sᵀ X) and the normalised traces
Tr(A B)/N, Tr(A Bᵀ)/N cost O(N² r) through Grams; N³ work is matrix products (BLAS).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

SYMMETRIC = ("scalar", "diag", "factor", "dense")


@dataclass
class Mat:
    """One S_k of size N (module docstring)."""

    kind: str
    value: object

    @property
    def symmetric(self) -> bool:
        return self.kind in SYMMETRIC

    def parts(self) -> tuple:
        """The arrays that are integrated (a pair has two)."""
        return tuple(self.value) if self.kind == "pair" else (self.value,)

    def with_parts(self, parts) -> Mat:
        if self.kind == "pair":
            return Mat("pair", tuple(parts))
        return Mat(self.kind, parts[0])          # a dense S is symmetrised where it is made (realisation,
                                                 # from_state, noise map); the flows keep it so up to round-off

    @cached_property
    def pair_sum(self) -> np.ndarray:
        """λ_i + λ_j of a diagonal S (S X + X S = pair_sum ∘ X), kept with the (frozen) matrix."""
        return self.value[:, None] + self.value[None, :]

    def dense(self, N: int) -> np.ndarray:
        if self.kind == "scalar":
            return self.value * np.eye(N)
        if self.kind == "diag":
            return np.diag(self.value)
        if self.kind == "factor":
            return self.value @ self.value.T
        if self.kind == "pair":
            return self.value[0] @ self.value[1].T
        return self.value

    def trace(self, N: int) -> float:
        if self.kind == "scalar":
            return float(self.value)
        if self.kind == "diag":
            return float(self.value.sum()) / N
        if self.kind == "factor":
            return float(np.vdot(self.value, self.value)) / N
        if self.kind == "pair":
            return float(np.vdot(*self.value)) / N
        return float(np.trace(self.value)) / N

    def apply(self, X: np.ndarray, gram=None) -> np.ndarray:
        """S @ X (for a factor, ``gram`` = W^T X when already known)."""
        if self.kind == "scalar":
            return self.value * X
        if self.kind == "diag":
            return self.value[:, None] * X
        if self.kind == "factor":
            return self.value @ (gram_of(self.value, X) if gram is None else gram)
        if self.kind == "pair":
            U, V = self.value
            return U @ gram_of(V, X)
        return self.value @ X

    def apply_t(self, X: np.ndarray) -> np.ndarray:
        """Sᵀ @ X."""
        if self.kind == "pair":
            U, V = self.value
            return V @ gram_of(U, X)
        if self.kind == "ndense":
            return self.value.T @ X
        return self.apply(X)

    def add_to(self, acc: np.ndarray, c: float, transpose: bool = False) -> None:
        """acc += c·S (or c·Sᵀ) on a dense N×N accumulator."""
        if self.kind == "scalar":
            acc[np.diag_indices(len(acc))] += c * self.value
        elif self.kind == "diag":
            acc[np.diag_indices(len(acc))] += c * self.value
        else:
            D = self.dense(len(acc))
            acc += c * (D.T if transpose else D)

    def eigenvalues(self, N: int) -> np.ndarray:
        """Eigenvalues of S, or of its symmetric part (M + Mᵀ)/2."""
        if self.kind == "scalar":
            return np.full(N, float(self.value))
        if self.kind == "diag":
            return np.sort(self.value)
        if self.kind == "factor":
            W = self.value
            ev = np.linalg.eigvalsh(W.T @ W) if W.shape[1] <= N else np.linalg.eigvalsh(W @ W.T)
            ev = np.clip(ev, 0.0, None)
            return np.sort(np.concatenate([np.zeros(N - len(ev)), ev]))
        S = self.dense(N)
        return np.linalg.eigvalsh(0.5 * (S + S.T))


def from_state(kind, state: dict) -> Mat:
    """The Mat of an index's simulation state (its kind's ``form``)."""
    f, L, R = kind.form(state)
    if f == "i":
        return Mat("scalar", float(L))
    if f == "d":
        S = np.array(L, dtype=float)
        return Mat("dense", 0.5 * (S + S.T)) if kind.symmetric else Mat("ndense", S)
    if L is R:
        return Mat("factor", np.array(L, dtype=float))
    return Mat("pair", (np.array(L, dtype=float), np.array(R, dtype=float)))


def gram_of(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A^T B. Small products go through a plain GEMM on a contiguous copy: NumPy sends A.T @ A
    to a threaded SYRK that is pathologically slow for small sizes on a loaded machine."""
    if A.size < 200_000:
        return np.ascontiguousarray(A.T) @ B
    return A.T @ B


def pair_trace(A: Mat, B: Mat, N: int, grams: dict, key, transpose: bool = False) -> float:
    """Tr(A B)/N, or Tr(A Bᵀ)/N with ``transpose``; factor×factor stores W_A^T W_B in ``grams[key]``."""
    if A.symmetric and B.symmetric:
        return _symmetric_trace(A, B, N, grams, key)
    if A.kind == "scalar":
        return float(A.value) * B.trace(N)
    if B.kind == "scalar":
        return float(B.value) * A.trace(N)
    if A.kind == "pair" and B.kind == "pair":
        (Ua, Va), (Ub, Vb) = A.value, B.value
        if transpose:                       # Tr(Ua Vaᵀ Vb Ubᵀ) = ⟨UaᵀUb, VaᵀVb⟩
            return float(np.vdot(gram_of(Ua, Ub), gram_of(Va, Vb))) / N
        return float(np.vdot(gram_of(Ub, Va), gram_of(Vb, Ua))) / N      # Tr(Ua Vaᵀ Ub Vbᵀ)
    Da, Db = A.dense(N), B.dense(N)
    return float(np.vdot(Da, Db) if transpose else np.vdot(Da.T, Db)) / N


def _symmetric_trace(A: Mat, B: Mat, N: int, grams: dict, key) -> float:
    ka, kb = A.kind, B.kind
    if ka == "scalar":
        return float(A.value) * B.trace(N)
    if kb == "scalar":
        return float(B.value) * A.trace(N)
    order = {"diag": 0, "factor": 1, "dense": 2}
    if order[ka] > order[kb]:
        A, B, ka, kb = B, A, kb, ka
    if ka == "diag":
        if kb == "diag":
            return float(A.value @ B.value) / N
        if kb == "factor":
            return float(A.value @ np.einsum("ij,ij->i", B.value, B.value)) / N
        return float(A.value @ np.diag(B.value)) / N
    if ka == "factor":
        if kb == "factor":
            C = gram_of(A.value, B.value)
            grams[key] = C
            return float(np.vdot(C, C)) / N
        return float(np.vdot(B.value @ A.value, A.value)) / N
    return float(np.vdot(A.value, B.value)) / N
