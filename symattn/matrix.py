"""Size-N matrices of the matrix-level solver (``symattn.spectral``): representations and traces.

``Mat(kind, value)``: ``scalar`` c·I, ``diag`` (a diagonal), ``factor`` W with S = W Wᵀ (never
formed), ``dense`` a symmetric S, ``ndense`` a general S, ``pair`` (U, V) with M = U Vᵀ (never
formed). Products with a block X (``apply``: S X, ``apply_t``: Sᵀ X) and the normalised traces
Tr(A B)/N, Tr(A Bᵀ)/N cost O(N² r) through Grams; N³ work is matrix products (BLAS).

*Batches.* A value may carry leading axes: R independent realisations of one index integrated as one
flow (``stack``), every array ``(R, N, ·)``, a diagonal ``(R, N)``, a scalar shared. Every operation
works on the last two axes (``@`` batches over the others) and a trace returns one value per
realisation; an unbatched value is the case of no leading axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

SYMMETRIC = ("scalar", "diag", "factor", "dense")


def _t(A: np.ndarray) -> np.ndarray:
    """Aᵀ over the last two axes."""
    return A.swapaxes(-1, -2)


def inner(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """⟨A, B⟩ = Tr(Aᵀ B) over the last two axes, one value per realisation: row sums in the arrays' precision,
    their sum in float64 (a float32 flow's traces then keep ≈ 1e-8 relative accuracy instead of ≈ 5e-7)."""
    return np.einsum("...ij,...ij->...i", A, B).sum(axis=-1, dtype=np.float64)


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
        return self.value[..., :, None] + self.value[..., None, :]

    def take(self, r: int) -> Mat:
        """Realisation r of a batch (module docstring)."""
        if self.kind == "scalar":
            return self
        if self.kind == "pair":
            return Mat("pair", tuple(p[r] for p in self.value))
        return Mat(self.kind, self.value[r])

    def whitened(self, root: np.ndarray) -> Mat:
        """S̃ = Σ^{½} S Σ^{½} for Σ^{½} = diag(root) (symattn.features): a factor's rows scaled (W̃ = Σ^{½}W,
        Ũ, Ṽ likewise), a dense S on both sides."""
        if self.kind == "factor":
            return Mat("factor", root[:, None] * self.value)
        if self.kind == "pair":
            return Mat("pair", tuple(root[:, None] * p for p in self.value))
        if self.kind in ("dense", "ndense"):
            return Mat(self.kind, root[:, None] * self.value * root[None, :])
        raise ValueError(f"a {self.kind!r} matrix has no whitened form")

    def dense(self, N: int) -> np.ndarray:
        if self.kind == "scalar":
            return self.value * np.eye(N)
        if self.kind == "diag":
            return self.value[..., :, None] * np.eye(N)
        if self.kind == "factor":
            return self.value @ _t(self.value)
        if self.kind == "pair":
            return self.value[0] @ _t(self.value[1])
        return self.value

    def trace(self, N: int):
        """Tr S/N (per realisation of a batch; a float for a scalar S)."""
        if self.kind == "scalar":
            return float(self.value)
        if self.kind == "diag":
            return self.value.sum(axis=-1, dtype=np.float64) / N
        if self.kind == "factor":
            return inner(self.value, self.value) / N
        if self.kind == "pair":
            return inner(*self.value) / N
        return np.trace(self.value, axis1=-2, axis2=-1, dtype=np.float64) / N

    def apply(self, X: np.ndarray, gram=None) -> np.ndarray:
        """S @ X (for a factor, ``gram`` = W^T X when already known)."""
        if self.kind == "scalar":
            return self.value * X
        if self.kind == "diag":
            return self.value[..., :, None] * X
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
            return _t(self.value) @ X
        return self.apply(X)

    def add_to(self, acc: np.ndarray, c, transpose: bool = False) -> None:
        """acc += c·S (or c·Sᵀ) on a dense N×N accumulator (c: a number, or one per realisation)."""
        c = np.asarray(c, dtype=float)
        if self.kind in ("scalar", "diag"):
            diagonal = np.einsum("...ii->...i", acc)            # a writable view
            diagonal += c[..., None] * self.value
        else:
            D = self.dense(acc.shape[-1])
            acc += c[..., None, None] * (_t(D) if transpose else D)

    def eigenvalues(self, N: int) -> np.ndarray:
        """Eigenvalues of S, or of its symmetric part (M + Mᵀ)/2 (one realisation)."""
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


def stack(mats: list) -> Mat:
    """R realisations of one index as one batched Mat (module docstring); a scalar stays shared."""
    first = mats[0]
    if first.kind == "scalar":
        return first
    if first.kind == "pair":
        return Mat("pair", tuple(np.stack([m.value[i] for m in mats]) for i in range(2)))
    return Mat(first.kind, np.stack([m.value for m in mats]))


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
    """Aᵀ B. Small products go through a plain GEMM on a contiguous copy: NumPy sends A.T @ A
    to a threaded SYRK that is pathologically slow for small sizes on a loaded machine."""
    if A.shape[-1] * A.shape[-2] < 200_000:
        return np.ascontiguousarray(_t(A)) @ B
    return _t(A) @ B


def syrk(S: np.ndarray) -> np.ndarray:
    """S Sᵀ of each realisation, exactly symmetric (NumPy sends a 2-d A @ A.T to BLAS's SYRK, half the
    flops of a GEMM; a batched product would take the GEMM)."""
    if S.ndim == 2:
        return S @ S.T
    out = np.empty_like(S)
    for r in range(S.shape[0]):
        np.matmul(S[r], S[r].T, out=out[r])
    return out


def pair_trace(A: Mat, B: Mat, N: int, grams: dict, key, transpose: bool = False, square: bool = False):
    """Tr(A B)/N, or Tr(A Bᵀ)/N with ``transpose`` (per realisation); factor×factor stores W_A^T W_B in
    ``grams[key]``; with ``square``, a dense S against itself is traced from S Sᵀ (SYRK), stored in ``grams[key]``
    for the flow that needs the product anyway (its diagonal's rows are float32 sums, as ``inner``'s)."""
    if square and A is B and A.kind == "dense":
        P = grams[key] = syrk(A.value)
        return np.einsum("...ii->...i", P).sum(axis=-1, dtype=np.float64) / N
    if A.symmetric and B.symmetric:
        return _symmetric_trace(A, B, N, grams, key)
    if A.kind == "scalar":
        return float(A.value) * B.trace(N)
    if B.kind == "scalar":
        return float(B.value) * A.trace(N)
    if A.kind == "pair" and B.kind == "pair":
        (Ua, Va), (Ub, Vb) = A.value, B.value
        if transpose:                       # Tr(Ua Vaᵀ Vb Ubᵀ) = ⟨UaᵀUb, VaᵀVb⟩
            return inner(gram_of(Ua, Ub), gram_of(Va, Vb)) / N
        return inner(gram_of(Ub, Va), gram_of(Vb, Ua)) / N      # Tr(Ua Vaᵀ Ub Vbᵀ)
    Da, Db = A.dense(N), B.dense(N)
    return (inner(Da, Db) if transpose else inner(_t(Da), Db)) / N


def _symmetric_trace(A: Mat, B: Mat, N: int, grams: dict, key):
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
            return (A.value * B.value).sum(axis=-1, dtype=np.float64) / N
        if kb == "factor":
            return np.einsum("...i,...ij,...ij->...i", A.value, B.value, B.value).sum(axis=-1, dtype=np.float64) / N
        return np.einsum("...i,...ii->...i", A.value, B.value).sum(axis=-1, dtype=np.float64) / N
    if ka == "factor":
        if kb == "factor":
            C = gram_of(A.value, B.value)
            grams[key] = C
            return inner(C, C) / N
        return inner(B.value @ A.value, A.value) / N
    return inner(A.value, B.value) / N
