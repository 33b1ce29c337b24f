"""The O(ε) SGD noise of the matrix-level flow: a Gaussian-equivalent stochastic increment (docs/theory.md §7).

Of the batch-gradient fluctuation δ_k only its second moments enter the O(ε) limit,
``E Tr(X δ_k Y δ_l)/d → (ν_kl/B) tr X tr Y``, so δ is replaced by a Gaussian matrix with exactly these second
moments (symmetric for symmetric kinds; for non-symmetric ones a symmetric part of covariance (ν1 + ν2)/2 and a
skew part of (ν2 − ν1)/2, :meth:`Noise.increments`); summed over the d·dt/α SGD steps of a time step dt the
fluctuation α·δ becomes dΞ_k with

    E Tr(X dΞ_k Y dΞ_l)/N = ε ν_kl(q) dt · tr X tr Y   (leading order in 1/N).

For a GOE, ``E[Ξ_ab Ξ_cd] = s²(δ_ac δ_bd + δ_ad δ_bc)`` gives ``E Tr(XΞYΞ) = s²(Tr X Tr Y + Tr XYᵀ)`` and
``E[ΞYΞ] = s²(Tr Y·I + Y)``, hence ``s² = ε ν dt / N``: ``dΞ_k = √(ε dt/N) Σ_m C_km Z_m`` with independent
``Z_m = (G + Gᵀ)/√2`` (G i.i.d. N(0, 1), drawn by Box–Muller, :func:`normals`) and ``C Cᵀ = ν`` (Cholesky of the
trainable ν matrix at the current q; an eigenvalue-clipped root if ν is not numerically positive definite). Each
kind applies the SGD-shaped map (``Kind.noise_map``):

    tied    W_k ← (I − 2 dΞ_k) W_k      ⇔  S_k ← (I − 2dΞ_k) S_k (I − 2dΞ_k)
    direct, general  S_k ← S_k − dΞ_k;   untied  U_k ← U_k − dΞ_k V_k,  V_k ← V_k − dΞ_kᵀ U_k

with ν at the state it acts on (Itô), so the Itô drift is automatic: ``E[(I − 2dΞ)S(I − 2dΞ)] = S + 4εν_kk dt
(tr(S) I + S/N)``, i.e. the hierarchy's ``4εν_kk tr(S_k) I`` up to O(1/N); the pair contractions of two insertions
reproduce the hierarchy's split words the same way. Why this route: it is the SGD update itself with Gaussian
fluctuations of the right covariance, so it carries the O(ε) physics at all times without truncation (and keeps
S = WWᵀ PSD and of fixed rank), while no deterministic single-matrix ODE reproduces the products of two traces the
pair contractions produce for every word. The price: a noise path's trace moments fluctuate at O(1/N); several
paths are averaged (``noise_realisations``).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .field import Flow

FLOAT32_RANGE = (1e-8, 1e8)   # entries of the trained matrices in which the noisy flow's float32 products neither
                              # underflow nor overflow (cubes of the entries stay within 1e±24); else float64
NOISY_DTYPE = np.float32      # the noisy flow's arrays (within FLOAT32_RANGE)


def normals(rng, m: int, dtype=np.float64, scale: float = 1.0) -> np.ndarray:
    """m i.i.d. N(0, scale²) numbers by the Box–Muller transform of uniforms in ``dtype``: exactly Gaussian, and
    in float32 twice as fast as NumPy's ziggurat (whose float32 draw is scalar; log, sqrt, cos and sin here are
    vectorised). Tails reach ≈ 5.8σ in float32 (uniforms of 24 bits), beyond it a probability of 10⁻⁸."""
    h = (m + 1) // 2
    u = rng.random(2 * h, dtype=dtype)
    r = np.log1p(-u[:h])                      # u < 1: log(1 − u) is finite
    r *= -2.0
    np.sqrt(r, out=r)
    r *= scale
    angle = u[h:]
    angle *= 2.0 * math.pi
    out = np.empty(2 * h, dtype=dtype)
    np.cos(angle, out=out[:h])
    out[:h] *= r
    np.sin(angle, out=out[h:])
    out[h:] *= r
    return out[:m]


def pair_sum(rng, n: int, sign: float, dtype=np.float64, scale: float = 1.0, out=None) -> np.ndarray:
    """scale·(G + sign·Gᵀ)/√2 for G with i.i.d. N(0, 1) entries, drawn as its upper triangle: off the diagonal
    i.i.d. N(0, 1) (mirrored, times sign), on it √2·N(0, 1) for sign +1 and 0 for −1 — half the Gaussian draws
    (:func:`normals`). Written into ``out`` (every entry; a C-contiguous n × n array) when given."""
    plan = _TRIANGLES.get(n)
    if plan is None:
        i, j = np.triu_indices(n, 1)
        plan = _TRIANGLES[n] = (i * n + j, j * n + i)
    upper, lower = plan
    v = normals(rng, upper.size + (n if sign > 0 else 0), dtype, scale)
    Z = np.empty((n, n), dtype=dtype) if out is None else out
    if not Z.flags.c_contiguous:                  # the flat view below would be a copy
        raise ValueError("out: the increment is written through a flat view, so it must be C-contiguous")
    flat = Z.reshape(-1)
    flat[upper] = v[:upper.size]
    flat[lower] = v[:upper.size] if sign > 0 else -v[:upper.size]
    flat[::n + 1] = math.sqrt(2.0) * v[upper.size:] if sign > 0 else 0.0
    return Z


_TRIANGLES: dict = {}      # n → flat indices of the strict upper triangle of an n × n matrix and of its mirror


class Noise:
    """Gaussian-equivalent SGD noise of the trainable indices (module docstring) for the
    flow's batch of realisations: realisation r draws from ``rngs[r]`` with sign ``signs[r]``
    (antithetic pairs share a stream with opposite signs)."""

    def __init__(self, flow: Flow, nu: dict, epsilon: float, rngs, signs=None):
        from ..derivation.split import nu_name

        if not isinstance(rngs, (list, tuple)):
            rngs = [rngs]
        self.flow, self.eps, self.rngs = flow, float(epsilon), list(rngs)
        self.signs = np.ones(len(self.rngs)) if signs is None else np.asarray(signs, dtype=float)
        spec, tr = flow.spec, flow.train
        self.sym = [flow.mats[k].symmetric for k in tr]
        self.names = [[(nu_name(spec, k, l, "dd"), nu_name(spec, k, l, "dt")) for l in tr] for k in tr]
        self.nu = nu
        used = {name for row in self.names for pair in row for name in pair}
        self.reuse = any(self.nu[name].has_quadrature for name in used)
        self._last = {}                         # realisation → (θ, its ν_s, ν_a) when ``reuse``

    REFRESH = 1e-2       # the relative move of θ after which a quadrature ν is evaluated anew (as ``integrate``)

    def nu_matrices(self, theta):
        """(ν_s, ν_a), each (R, n, n) over the trainable indices: the covariances of the symmetric and the
        skew part of δ, ν_s = (ν1 + ν2)/2, ν_a = (ν2 − ν1)/2 (a pair with a symmetric member: ν_s = ν,
        ν_a = 0), at each realisation's θ (rows of ``theta``). Where a ν is a Gaussian quadrature (``reuse``)
        a realisation keeps the values of its last evaluation until θ has moved by more than ``REFRESH``
        (relative, max norm) — the rule of the hierarchies' ``integrate``: ν is an O(ε) coefficient calibrated
        to 2e-2 only, and its quadrature was a fifth of a softmax phase-grid point's cost."""
        theta = np.atleast_2d(theta)
        n = len(self.flow.train)
        names = self.flow.P.names
        Vs, Va = np.zeros((len(theta), n, n)), np.zeros((len(theta), n, n))
        for r, row in enumerate(theta):
            last = self._last.get(r) if self.reuse else None
            if last is not None and np.max(np.abs(row - last[0])) <= self.REFRESH * (1.0 + np.max(np.abs(last[0]))):
                Vs[r], Va[r] = last[1], last[2]
                continue
            cache = {}

            def nu(name):
                if name not in cache:
                    E = self.nu[name]                     # the row itself where E reads θ in the same order
                    cache[name] = float(E.value(row if E.names == names else dict(zip(names, row))))
                return cache[name]

            for i in range(n):
                for j in range(n):
                    dd, dt = self.names[i][j]
                    if dd == dt:
                        Vs[r, i, j] = nu(dd)
                    else:
                        Vs[r, i, j] = 0.5 * (nu(dd) + nu(dt))
                        Va[r, i, j] = 0.5 * (nu(dt) - nu(dd))
            if self.reuse:
                self._last[r] = (np.array(row, dtype=float), Vs[r].copy(), Va[r].copy())
        return Vs, Va

    @staticmethod
    def factor(V: np.ndarray) -> np.ndarray:
        """C with C Cᵀ = V for each realisation's V (Cholesky; eigenvalue-clipped symmetric root if not
        positive definite)."""
        if not np.any(V):
            return V
        if V.ndim == 3:
            try:
                return np.linalg.cholesky(V)              # all realisations at once
            except np.linalg.LinAlgError:
                return np.array([Noise.factor(v) for v in V])
        try:
            return np.linalg.cholesky(V)
        except np.linalg.LinAlgError:
            w, U = np.linalg.eigh(0.5 * (V + V.T))
            return U * np.sqrt(np.clip(w, 0.0, None))[None, :]

    def increments(self, Cs: np.ndarray, Ca: np.ndarray, dt: float, N: int) -> list:
        """dΞ_k = √(ε dt/N) Σ_m (Cs_km Zs_m + Ca_km Za_m), Zs/Za the symmetric/skew parts
        (G ± Gᵀ)/√2 of i.i.d. N(0, 1) matrices: E Tr(X dΞ_k Y dΞ_l)/N ≈ ε ν1_kl dt trX trY and
        E Tr(X dΞ_k Y dΞ_lᵀ)/N ≈ ε ν2_kl dt trX trY. For a realisation in two independent halves
        (``flow.blocks`` = N/2, :func:`decoupled_teachers`) each half gets its own, of size N/2. One
        (R, N, N) array per trainable index; realisation r from its own stream."""
        R, n = Cs.shape[0], Cs.shape[1]
        blocks, dtype = self.flow.blocks, self.flow.dtype
        size = blocks or N
        single = n == 1 and not blocks and not (Cs.any() and Ca.any())     # one draw a realisation, in place
        which = 0 if Cs.any() else 1                                       # (the symmetric or the skew part)
        out = [(np.empty if single else np.zeros)((R, N, N), dtype=dtype) for _ in range(n)]
        for r in range(R):
            rng, scale = self.rngs[r], self.signs[r] * math.sqrt(self.eps * dt / size)
            for part, (C, s) in enumerate(((Cs[r], 1.0), (Ca[r], -1.0))):
                if single:
                    if part == which:
                        pair_sum(rng, N, s, dtype, scale * float(C[0, 0]), out=out[0][r])
                    continue
                if not C.any():
                    continue
                for m in range(n):
                    if blocks:
                        from scipy.linalg import block_diag  # only here: the warm process skips SciPy
                        Z = block_diag(*(pair_sum(rng, size, s, dtype, scale) for _ in range(2)))
                    else:
                        Z = pair_sum(rng, N, s, dtype, scale)
                    for i in range(n):
                        if C[i, m] != 0.0:
                            out[i][r] += float(C[i, m]) * Z
        return out

    def apply(self, mats: list, dXi: list) -> list:
        """The SGD-shaped noise map of each kind (``Kind.noise_map``): tied W ← (I − 2dΞ)W,
        direct/general S ← S − dΞ, untied (U, V) ← (U − dΞ V, V − dΞᵀ U)."""
        out = list(mats)
        for i, k in enumerate(self.flow.train):
            out[k] = self.flow.spec.indices[k].kind.noise_map(mats[k], dXi[i], self.flow.metric)
        return out
