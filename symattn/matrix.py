"""Size-N matrices of the matrix-level solver (``symattn.spectral``): one class per representation.

``Scalar`` c·I, ``Diag`` (a diagonal λ), ``Factor`` W with S = W Wᵀ (never formed), ``Dense`` a symmetric S,
``NDense`` a general S, ``Pair`` (U, V) with M = U Vᵀ (never formed). Each holds its arrays in ``value`` and
knows its products with a block X (``apply``: S X, ``apply_t``: Sᵀ X), its trace, its dense form and its
eigenvalues; :func:`pair_trace` gives Tr(A B)/N, Tr(A Bᵀ)/N of two of them at O(N² r) through Grams. N³ work is
matrix products (BLAS). A kind's ``realise`` returns one of these; ``form`` names the representation.

*Batches.* A value may carry leading axes: R independent realisations of one index integrated as one
flow (``stack``), every array ``(R, N, ·)``, a diagonal ``(R, N)``, a scalar shared. Every operation
works on the last two axes (``@`` batches over the others) and a trace returns one value per
realisation; an unbatched value is the case of no leading axes.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np


def _t(A: np.ndarray) -> np.ndarray:
    """Aᵀ over the last two axes."""
    return A.swapaxes(-1, -2)


def inner(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """⟨A, B⟩ = Tr(Aᵀ B) over the last two axes, one value per realisation: row sums in the arrays' precision,
    their sum in float64 (a float32 flow's traces then keep ≈ 1e-8 relative accuracy instead of ≈ 5e-7)."""
    return np.einsum("...ij,...ij->...i", A, B).sum(axis=-1, dtype=np.float64)


def _diag_sum(values: np.ndarray, N: int):
    return values.sum(axis=-1, dtype=np.float64) / N


class Mat:
    """One S_k of size N (module docstring): a representation's arrays in ``value``."""

    form: str = ""
    symmetric: bool = True

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"

    def parts(self) -> tuple:
        """The arrays that are integrated."""
        return (self.value,)

    def with_parts(self, parts) -> Mat:
        """The same representation holding ``parts`` (a dense S is symmetrised where it is made — realisation,
        ``from_state``, noise map —; the flows keep it so up to round-off)."""
        return type(self)(parts[0])

    def take(self, r: int) -> Mat:
        """Realisation r of a batch (module docstring)."""
        return type(self)(self.value[r])

    def whitened(self, root: np.ndarray) -> Mat:
        """S̃ = Σ^{½} S Σ^{½} for Σ^{½} = diag(root) (symattn.features)."""
        raise ValueError(f"a {self.form!r} matrix has no whitened form")

    def dense(self, N: int) -> np.ndarray:
        return self.value

    def trace(self, N: int):
        """Tr S/N (per realisation of a batch; a float for a scalar S)."""
        return np.trace(self.value, axis1=-2, axis2=-1, dtype=np.float64) / N

    def apply(self, X: np.ndarray, gram=None) -> np.ndarray:
        """S @ X."""
        return self.value @ X

    def apply_t(self, X: np.ndarray) -> np.ndarray:
        """Sᵀ @ X."""
        return self.apply(X)

    def add_to(self, acc: np.ndarray, c, transpose: bool = False) -> None:
        """acc += c·S (or c·Sᵀ) on a dense N×N accumulator (c: a number, or one per realisation)."""
        c = np.asarray(c, dtype=float)
        D = self.dense(acc.shape[-1])
        acc += c[..., None, None] * (_t(D) if transpose else D)

    def eigenvalues(self, N: int) -> np.ndarray:
        """Eigenvalues of S, or of its symmetric part (M + Mᵀ)/2 (one realisation)."""
        S = self.dense(N)
        return np.linalg.eigvalsh(0.5 * (S + S.T))

    @classmethod
    def stack(cls, mats: list) -> Mat:
        """R realisations as one batched Mat."""
        return cls(np.stack([m.value for m in mats]))


class Scalar(Mat):
    """c·I (an identity index): one number, shared by every realisation of a batch."""

    form = "scalar"

    def take(self, r: int) -> Mat:
        return self

    def dense(self, N: int) -> np.ndarray:
        return self.value * np.eye(N)

    def trace(self, N: int):
        return float(self.value)

    def apply(self, X, gram=None):
        return self.value * X

    def add_to(self, acc, c, transpose=False):
        _add_diagonal(acc, c, self.value)

    def eigenvalues(self, N):
        return np.full(N, float(self.value))

    @classmethod
    def stack(cls, mats):
        return mats[0]


class Diag(Mat):
    """diag(λ): a diagonalised realisation (kept frozen by its kind's flow)."""

    form = "diag"

    @cached_property
    def pair_sum(self) -> np.ndarray:
        """λ_i + λ_j (S X + X S = pair_sum ∘ X), kept with the (frozen) matrix."""
        return self.value[..., :, None] + self.value[..., None, :]

    def dense(self, N):
        return self.value[..., :, None] * np.eye(N)

    def trace(self, N):
        return _diag_sum(self.value, N)

    def apply(self, X, gram=None):
        return self.value[..., :, None] * X

    def add_to(self, acc, c, transpose=False):
        _add_diagonal(acc, c, self.value)

    def eigenvalues(self, N):
        return np.sort(self.value)


class Factor(Mat):
    """S = W Wᵀ, W of size N × r (never formed)."""

    form = "factor"

    def whitened(self, root):
        return Factor(root[:, None] * self.value)

    def dense(self, N):
        return self.value @ _t(self.value)

    def trace(self, N):
        return inner(self.value, self.value) / N

    def apply(self, X, gram=None):
        """S X = W (Wᵀ X), with ``gram`` = Wᵀ X when already known."""
        return self.value @ (gram_of(self.value, X) if gram is None else gram)

    def eigenvalues(self, N):
        W = self.value
        ev = np.linalg.eigvalsh(W.T @ W) if W.shape[1] <= N else np.linalg.eigvalsh(W @ W.T)
        ev = np.clip(ev, 0.0, None)
        return np.sort(np.concatenate([np.zeros(N - len(ev)), ev]))


class Dense(Mat):
    """A symmetric S held whole."""

    form = "dense"

    def whitened(self, root):
        return Dense(root[:, None] * self.value * root[None, :])


class NDense(Mat):
    """A general (non-symmetric) S held whole."""

    form = "ndense"
    symmetric = False

    def whitened(self, root):
        return NDense(root[:, None] * self.value * root[None, :])

    def apply_t(self, X):
        return _t(self.value) @ X


class Pair(Mat):
    """M = U Vᵀ (never formed): ``value`` is the tuple (U, V)."""

    form = "pair"
    symmetric = False

    def parts(self):
        return tuple(self.value)

    def with_parts(self, parts):
        return Pair(tuple(parts))

    def take(self, r):
        return Pair(tuple(p[r] for p in self.value))

    def whitened(self, root):
        return Pair(tuple(root[:, None] * p for p in self.value))

    def dense(self, N):
        return self.value[0] @ _t(self.value[1])

    def trace(self, N):
        return inner(*self.value) / N

    def apply(self, X, gram=None):
        U, V = self.value
        return U @ gram_of(V, X)

    def apply_t(self, X):
        U, V = self.value
        return V @ gram_of(U, X)

    @classmethod
    def stack(cls, mats):
        return Pair(tuple(np.stack([m.value[i] for m in mats]) for i in range(2)))


def _add_diagonal(acc: np.ndarray, c, values) -> None:
    c = np.asarray(c, dtype=float)
    diagonal = np.einsum("...ii->...i", acc)            # a writable view
    diagonal += c[..., None] * values


def stack(mats: list) -> Mat:
    """R realisations of one index as one batched Mat (module docstring); a scalar stays shared."""
    return type(mats[0]).stack(mats)


def from_state(kind, state: dict) -> Mat:
    """The Mat of an index's simulation state (its kind's ``form``)."""
    f, L, R = kind.form(state)
    if f == "i":
        return Scalar(float(L))
    if f == "d":
        S = np.array(L, dtype=float)
        return Dense(0.5 * (S + S.T)) if kind.symmetric else NDense(S)
    if L is R:
        return Factor(np.array(L, dtype=float))
    return Pair((np.array(L, dtype=float), np.array(R, dtype=float)))


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
    if square and A is B and isinstance(A, Dense):
        P = grams[key] = syrk(A.value)
        return np.einsum("...ii->...i", P).sum(axis=-1, dtype=np.float64) / N
    if isinstance(A, Scalar):
        return float(A.value) * B.trace(N)
    if isinstance(B, Scalar):
        return float(B.value) * A.trace(N)
    if A.symmetric and B.symmetric:
        return _symmetric_trace(A, B, N, grams, key)
    if isinstance(A, Pair) and isinstance(B, Pair):
        (Ua, Va), (Ub, Vb) = A.value, B.value
        if transpose:                       # Tr(Ua Vaᵀ Vb Ubᵀ) = ⟨UaᵀUb, VaᵀVb⟩
            return inner(gram_of(Ua, Ub), gram_of(Va, Vb)) / N
        return inner(gram_of(Ub, Va), gram_of(Vb, Ua)) / N      # Tr(Ua Vaᵀ Ub Vbᵀ)
    Da, Db = A.dense(N), B.dense(N)
    return (inner(Da, Db) if transpose else inner(_t(Da), Db)) / N


_ORDER = {Diag: 0, Factor: 1, Dense: 2}


def _symmetric_trace(A: Mat, B: Mat, N: int, grams: dict, key):
    """Tr(A B)/N of two symmetric representations other than Scalar, each pair at its cheapest."""
    if _ORDER[type(A)] > _ORDER[type(B)]:
        A, B = B, A
    if isinstance(A, Diag):
        if isinstance(B, Diag):
            return (A.value * B.value).sum(axis=-1, dtype=np.float64) / N
        if isinstance(B, Factor):
            return np.einsum("...i,...ij,...ij->...i", A.value, B.value, B.value).sum(axis=-1, dtype=np.float64) / N
        return np.einsum("...i,...ii->...i", A.value, B.value).sum(axis=-1, dtype=np.float64) / N
    if isinstance(A, Factor):
        if isinstance(B, Factor):
            C = gram_of(A.value, B.value)
            grams[key] = C
            return inner(C, C) / N
        return inner(B.value @ A.value, A.value) / N
    return inner(A.value, B.value) / N
