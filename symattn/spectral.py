"""All-time deterministic "spectral" solver of the d → ∞ matrix flow (issue 6).

The zero-truncated moment hierarchy (docs/theory.md §5) converges only in a finite time window. Here
the limit flow is integrated at matrix level on one realisation of size N of the asymptotically
free initial laws, with quantile (not random) spectra, so that the only finite-N effects are the
discretisation of the spectra and the O(1/N) fluctuations of the Haar rotations:

* tied students (package time ``t = nα/d``, docs/theory.md §3, §5 ×4)
  ``dS_k/dt = −4 Σ_l Γ_kl(q) (S_l S_k + S_k S_l) − 2γ S_k``, integrated on a factor
  ``dW_k/dt = −4 (Σ_l Γ_kl S_l) W_k − γ W_k`` (so that ``d(W W^T)/dt`` is the S flow above, PSD
  and symmetric by construction, and an atom at 0 of the initial law stays at 0);
* direct students ``dS_k/dt = −2 Σ_l Γ_kl S_l − γ S_k`` (docs/theory.md §4 with Ω = Ψ);
* frozen teachers; ``q_kl = Tr(S_k S_l)/N`` on the current matrices and Γ from
  :class:`symattn.derivation.potential.Potential`.

Realisation of the initial laws (docs/theory.md §7): the first frozen, non-identity index is diagonal
with exact quantile eigenvalues ``λ_i = F^{-1}((i − ½)/N)`` of its law; every other index is
``O diag(λ) O^T`` with its own quantile eigenvalues and an independent Haar rotation O (QR of a
Gaussian matrix with sign fix), so the family is asymptotically free. Laws: tied (Wishart
``W W^T``, W N×κN with entries N(0, σ²/N)) = free Poisson of rate κ and jump σ² (Marchenko–Pastur,
atom 1 − κ at 0 when κ < 1); direct (``σ·GOE`` with ``Tr Z²/N → 1``) = semicircle of radius 2σ;
identity teacher = ``scale·I``.

Representations (cost per right-hand side): ``scalar`` c·I, ``diag`` (a frozen diagonal teacher,
products are row scalings), ``factor`` W (N×r, r = rank, S = W W^T never formed: products are
``W_l (W_l^T W_k)`` and ``q_kl = ‖W_k^T W_l‖²_F / N``) and ``dense`` S (direct students). All
N³ work is matrix products (BLAS).

Finite-N error: the same flow at N and N/2 (independent rotations); ``<col>_err = |f(N) − f(N/2)|``
estimates the O(1/N) error of f(N).

SGD noise (optional, ``epsilon = ε = αd/B > 0``; docs/theory.md §7, ``derive/noise.py``). Route chosen: a
*matrix-level Gaussian-equivalent stochastic flow*. Of the batch-gradient fluctuation δ_k only its
second moments enter the O(ε) limit, ``E Tr(X δ_k Y δ_l)/d → (ν_kl/B) tr X tr Y``, so δ is replaced
by a symmetric Gaussian (GOE-like) matrix with exactly these second moments; summed over the d·dt/α
SGD steps of a time step dt the fluctuation α·δ becomes dΞ_k with

    E Tr(X dΞ_k Y dΞ_l)/N = ε ν_kl(q) dt · tr X tr Y   (leading order in 1/N).

For a GOE, ``E[Ξ_ab Ξ_cd] = s²(δ_ac δ_bd + δ_ad δ_bc)`` gives ``E Tr(XΞYΞ) = s²(Tr X Tr Y + Tr XYᵀ)``
and ``E[ΞYΞ] = s²(Tr Y·I + Y)``, hence ``s² = ε ν dt / N``: ``dΞ_k = √(ε dt/N) Σ_m C_km Z_m`` with
independent ``Z_m = (G + Gᵀ)/√2`` (G i.i.d. N(0, 1), so ``E[Z_ab Z_cd] = δ_ac δ_bd + δ_ad δ_bc``) and
``C Cᵀ = ν`` (Cholesky of the trainable ν matrix at the current q; eigenvalue-clipped square root if
ν is not numerically positive definite). One step of size dt (Lie splitting, weak order 1 in dt):
RK4 step of the deterministic drift above, then the exact SGD-shaped noise map

    tied    W_k ← (I − 2 dΞ_k) W_k      ⇔  S_k ← (I − 2dΞ_k) S_k (I − 2dΞ_k)
    direct  S_k ← S_k − dΞ_k

with ν evaluated at the start of the step (Itô). The Itô drift is then automatic:
``E[(I − 2dΞ)S(I − 2dΞ)] = S + 4 E[dΞ S dΞ] = S + 4εν_kk dt (tr(S) I + S/N)``, i.e.
``4εν_kk tr(S_k) I`` of the hierarchy up to O(1/N); the pair contractions of two insertions
(``E Tr(X dΞ Y dΞ)/N``) reproduce the hierarchy's split words in the same way. Why this route:
it is the SGD update itself with Gaussian fluctuations of the right covariance, so it carries the
O(ε) physics at all times without truncation (and keeps S = WWᵀ PSD and of fixed rank), while
an effective *deterministic* matrix ODE cannot: the pair-contraction terms act on trace moments as
products of two traces, which no single-matrix ODE of S reproduces for all words.
The price: trace moments of one noise realisation fluctuate at O(1/N) (√dt/N per step, linear
in dΞ); ``noise_realisations = R`` averages R independent noise paths on the same initial
matrices and reports their standard error in ``info['noise_sem']``. The leading-order physics
needs εν·dt ≪ 1 and N ≫ 1 only; O(1/N) terms (e.g. the 4εν S/N above) are finite-size effects of
the same order as the ones the deterministic solver has already.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import integrate

from .errors import NumericalFailure, UsageError
from .spec import Spec, SpecError, load_spec
from .symbolic.spectra import (  # noqa: F401 (re-exported)
    free_poisson_density,
    free_poisson_moments,
    free_poisson_quantiles,
    haar_orthogonal,
    semicircle_quantiles,
)

__all__ = [
    "SpectralResult", "solve_spectral", "plot_spectra", "initial_realisation", "Mat",
    "free_poisson_quantiles", "free_poisson_moments", "free_poisson_density",
    "semicircle_quantiles", "haar_orthogonal", "run_spectral_from_args",
]

_BLOWUP = 1e12          # |q| beyond this is a divergence


# ============================================================================ representations
@dataclass
class Mat:
    """One S_k of size N: kind in {scalar, diag, factor, dense}; value c, vector, W (S = WW^T) or S."""

    kind: str
    value: object

    def dense(self, N: int) -> np.ndarray:
        if self.kind == "scalar":
            return self.value * np.eye(N)
        if self.kind == "diag":
            return np.diag(self.value)
        if self.kind == "factor":
            return self.value @ self.value.T
        return self.value

    def trace(self, N: int) -> float:
        if self.kind == "scalar":
            return float(self.value)
        if self.kind == "diag":
            return float(self.value.sum()) / N
        if self.kind == "factor":
            return float(np.vdot(self.value, self.value)) / N
        return float(np.trace(self.value)) / N

    def apply(self, X: np.ndarray, gram=None) -> np.ndarray:
        """S @ X (for a factor, ``gram`` = W^T X when already known)."""
        if self.kind == "scalar":
            return self.value * X
        if self.kind == "diag":
            return self.value[:, None] * X
        if self.kind == "factor":
            return self.value @ (_gram(self.value, X) if gram is None else gram)
        return self.value @ X

    def eigenvalues(self, N: int) -> np.ndarray:
        if self.kind == "scalar":
            return np.full(N, float(self.value))
        if self.kind == "diag":
            return np.sort(self.value)
        if self.kind == "factor":
            W = self.value
            ev = np.linalg.eigvalsh(W.T @ W) if W.shape[1] <= N else np.linalg.eigvalsh(W @ W.T)
            ev = np.clip(ev, 0.0, None)
            return np.sort(np.concatenate([np.zeros(N - len(ev)), ev]))
        return np.linalg.eigvalsh(0.5 * (self.value + self.value.T))


def _gram(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A^T B. Small products go through a plain GEMM on a contiguous copy: NumPy sends A.T @ A
    to a threaded SYRK that is pathologically slow for small sizes on a loaded machine."""
    if A.size < 200_000:
        return np.ascontiguousarray(A.T) @ B
    return A.T @ B


def _pair_trace(A: Mat, B: Mat, N: int, grams: dict, key) -> float:
    """Tr(S_A S_B)/N; factor×factor stores the Gram W_A^T W_B in ``grams[key]``."""
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
            C = _gram(A.value, B.value)
            grams[key] = C
            return float(np.vdot(C, C)) / N
        return float(np.vdot(B.value @ A.value, A.value)) / N
    return float(np.vdot(A.value, B.value)) / N


def initial_realisation(spec, size: int, seed: int = 0) -> list:
    """The size-N realisation of the initial laws used by :func:`solve_spectral` (list of Mat).

    The first frozen non-identity index is diagonal, every other one Haar-rotated; the rotations
    come from ``numpy.random.default_rng(SeedSequence([seed, size]))`` in spec order."""
    spec = load_spec(spec)
    _check_supported(spec)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(size)]))
    diag_k = next((k for k in spec.teachers if spec.indices[k].kind.factors), None)
    return [Mat(*ix.kind.realise(ix, size, rng, k == diag_k)) for k, ix in enumerate(spec.indices)]


def _check_supported(spec: Spec):
    for ix in spec.indices:
        if not ix.kind.spectral:
            raise SpecError(f"{spec.source}: indices.{ix.name}.parameterization: {ix.parameterization} — "
                            "spectral method supports direct and tied students (and tied, direct or identity teachers)")


# ============================================================================ the flow
class _Flow:
    def __init__(self, spec: Spec, mats: list, N: int, potential):
        self.spec, self.N, self.P = spec, N, potential
        self.mats = mats
        self.K = spec.K
        self.gamma_wd = spec.weight_decay
        self.train = [k for k in spec.students]
        self.shapes, self.offsets = [], [0]
        for k in self.train:
            sh = mats[k].value.shape
            self.shapes.append(sh)
            self.offsets.append(self.offsets[-1] + int(np.prod(sh)))
        self.names = spec.names
        self.pairs = [(a, b) for a in range(self.K) for b in range(a, self.K)]
        missing = [n for n in potential.names if not n.startswith("q_")]
        if missing:
            raise SpecError(f"{spec.source}: order parameter {missing[0]} is not available to the spectral method")
        self.nevals = 0

    # ---------------------------------------------------------------- packing
    def pack(self) -> np.ndarray:
        return np.concatenate([np.asarray(self.mats[k].value, dtype=float).ravel() for k in self.train])

    def unpack(self, y) -> list:
        mats = list(self.mats)
        for i, k in enumerate(self.train):
            v = y[self.offsets[i]:self.offsets[i + 1]].reshape(self.shapes[i])
            if mats[k].kind == "dense":
                v = 0.5 * (v + v.T)           # symmetric matrix ODE: symmetrise
            mats[k] = Mat(mats[k].kind, v)
        return mats

    # ---------------------------------------------------------------- observables
    def order_parameters(self, mats, t):
        grams = {}
        q = np.zeros((self.K, self.K))
        for a, b in self.pairs:
            q[a, b] = q[b, a] = _pair_trace(mats[a], mats[b], self.N, grams, (a, b))
        if not np.all(np.isfinite(q)) or np.abs(q).max() > _BLOWUP:
            raise NumericalFailure(f"spectral flow diverged (order parameters {np.abs(q).max():.3g}) at time {t:.6g}", t)
        return q, grams

    def values(self, q) -> dict:
        out = {}
        for a, b in self.pairs:
            out[f"q_{self.names[a]}_{self.names[b]}"] = q[a, b]
        return out

    def Gamma(self, q, t) -> np.ndarray:
        vals = self.values(q)
        G = np.asarray(self.P.gradients({n: vals[n] for n in self.P.names}).gamma, dtype=float)
        if not np.all(np.isfinite(G)):
            raise NumericalFailure(f"spectral flow: non-finite gradient Γ at time {t:.6g}", t)
        return G

    # ---------------------------------------------------------------- right-hand side
    def rhs(self, t, y):
        # A trial stage of a too-large step may overflow: return NaN so that the integrator
        # rejects the step and shrinks it; divergence is declared on accepted steps only.
        self.nevals += 1
        mats = self.unpack(y)
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                q, grams = self.order_parameters(mats, t)
                G = self.Gamma(q, t)
        except NumericalFailure:
            return np.full_like(y, np.nan)
        out = []
        N, wd = self.N, self.gamma_wd
        for k in self.train:
            Mk = mats[k]
            if Mk.kind == "factor":
                W = Mk.value
                acc = np.zeros_like(W)
                for l in range(self.K):
                    if G[k, l] == 0.0:
                        continue
                    Ml = mats[l]
                    gram = None
                    if Ml.kind == "factor":
                        gram = grams[(l, k)] if (l, k) in grams else grams[(k, l)].T
                    acc += G[k, l] * Ml.apply(W, gram)
                out.append((-4.0 * acc - wd * W).ravel())
            else:                      # direct: dS = −2 Σ Γ S_l − γ S
                acc = -wd * Mk.value
                for l in range(self.K):
                    if G[k, l] == 0.0:
                        continue
                    Ml = mats[l]
                    if Ml.kind in ("scalar", "diag"):
                        acc[np.diag_indices(N)] += -2.0 * G[k, l] * Ml.value
                    else:
                        acc = acc - 2.0 * G[k, l] * Ml.dense(N)
                out.append(acc.ravel())
        return np.concatenate(out)

    def observe(self, y, t):
        mats = self.unpack(y)
        q, _ = self.order_parameters(mats, t)
        tr = np.array([m.trace(self.N) for m in mats])
        vals = self.values(q)
        row = {"time": t}
        for a, n in enumerate(self.names):
            row[f"tr_{n}"] = tr[a]
        for a, b in self.pairs:
            na, nb = self.names[a], self.names[b]
            row[f"q_{na}_{nb}"] = q[a, b]
        for a, b in self.pairs:
            na, nb = self.names[a], self.names[b]
            row[f"p_{na}_{nb}"] = q[a, b] - tr[a] * tr[b]
        row["loss"] = float(self.P.value({n: vals[n] for n in self.P.names}))
        spectra = {self.names[k]: mats[k].eigenvalues(self.N) for k in self.train}
        return row, spectra


def _integrate(spec, P, N, seed, times, method, rtol, atol, spectra=True):
    mats = initial_realisation(spec, N, seed)
    flow = _Flow(spec, mats, N, P)
    y0 = flow.pack()
    if P.quad_terms:
        P.calibrate(flow.values(flow.order_parameters(mats, 0.0)[0]))
    if atol is None:
        atol = rtol * 1e-2 * max(float(np.sqrt(np.mean(y0 ** 2))), 1e-300) if y0.size else rtol
    rows, spec_rows = [], {spec.names[k]: [] for k in spec.students}

    def record(y, t):
        row, sp_ = flow.observe(y, t)
        rows.append(row)
        if spectra:
            for n, ev in sp_.items():
                spec_rows[n].append(ev)

    record(y0, float(times[0]))
    T = float(times[-1])
    if T > times[0]:
        solver_cls = {"RK45": integrate.RK45, "DOP853": integrate.DOP853, "RK23": integrate.RK23}[method]
        solver = solver_cls(flow.rhs, float(times[0]), y0, T, rtol=rtol, atol=atol)
        nxt = 1
        while nxt < len(times):
            msg = solver.step()
            if msg is not None or solver.status == "failed":
                raise NumericalFailure(f"spectral flow: integrator failed at time {solver.t:.6g} ({msg})", solver.t)
            if not np.all(np.isfinite(solver.y)):
                raise NumericalFailure(f"spectral flow: NaN/inf at time {solver.t:.6g}", solver.t)
            flow.order_parameters(flow.unpack(solver.y), solver.t)     # raises beyond _BLOWUP
            if nxt < len(times) and times[nxt] <= solver.t:
                dense = solver.dense_output()
                while nxt < len(times) and times[nxt] <= solver.t:
                    y = solver.y if times[nxt] == solver.t else dense(times[nxt])
                    record(y, float(times[nxt]))
                    nxt += 1
            if solver.status == "finished":          # float round-off at T: the rest is T
                while nxt < len(times):
                    record(solver.y, float(times[nxt]))
                    nxt += 1
    table = {c: np.array([r[c] for r in rows]) for c in rows[0]}
    return table, {n: np.array(v) for n, v in spec_rows.items()}, flow.nevals


# ============================================================================ SGD noise (stochastic flow)
class _Noise:
    """Gaussian-equivalent SGD noise of the trainable indices (module docstring, "SGD noise")."""

    def __init__(self, flow: _Flow, nu: dict, epsilon: float, rng, sign: float = 1.0):
        from .derivation.noise import nu_name

        self.flow, self.eps, self.rng, self.sign = flow, float(epsilon), rng, float(sign)
        spec = flow.spec
        tr = flow.train
        self.names = [[nu_name(spec, k, l, "dd") for l in tr] for k in tr]
        self.nu = nu

    def nu_matrix(self, q) -> np.ndarray:
        """ν_kl(q) over the trainable indices (spec order of ``flow.train``)."""
        theta = self.flow.values(q)
        n = len(self.flow.train)
        V = np.zeros((n, n))
        cache = {}
        for i in range(n):
            for j in range(n):
                name = self.names[i][j]
                if name not in cache:
                    cache[name] = float(self.nu[name].value(theta))
                V[i, j] = cache[name]
        return V

    @staticmethod
    def factor(V: np.ndarray) -> np.ndarray:
        """C with C Cᵀ = V (Cholesky; eigenvalue-clipped symmetric root if not positive definite)."""
        try:
            return np.linalg.cholesky(V)
        except np.linalg.LinAlgError:
            w, U = np.linalg.eigh(0.5 * (V + V.T))
            return U * np.sqrt(np.clip(w, 0.0, None))[None, :]

    def increments(self, C: np.ndarray, dt: float, N: int) -> list:
        """dΞ_k (N×N symmetric) for every trainable k, ``E Tr(X dΞ_k Y dΞ_l)/N ≈ ε ν_kl dt trX trY``."""
        n = C.shape[0]
        scale = self.sign * math.sqrt(self.eps * dt / N)
        Z = []
        for _ in range(n):
            G = self.rng.standard_normal((N, N))
            Z.append((G + G.T) * (scale / math.sqrt(2.0)))
        out = []
        for i in range(n):
            acc = np.zeros((N, N))
            for m in range(n):
                if C[i, m] != 0.0:
                    acc += C[i, m] * Z[m]
            out.append(acc)
        return out

    def apply(self, mats: list, dXi: list) -> list:
        """The SGD-shaped noise map: tied W ← (I − 2dΞ)W, direct S ← S − dΞ."""
        out = list(mats)
        for i, k in enumerate(self.flow.train):
            M = mats[k]
            if M.kind == "factor":
                out[k] = Mat("factor", M.value - 2.0 * (dXi[i] @ M.value))
            else:
                out[k] = Mat("dense", M.value - dXi[i])
        return out


def _rk4(f, t, y, h):
    k1 = f(t, y)
    k2 = f(t + 0.5 * h, y + 0.5 * h * k1)
    k3 = f(t + 0.5 * h, y + 0.5 * h * k2)
    k4 = f(t + h, y + h * k3)
    return y + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def _integrate_noisy(spec, P, nu, N, seed, times, epsilon, rng, dt_max, spectra=True, sign=1.0):
    """One noise path of the stochastic flow (Lie splitting: RK4 drift, then the noise map)."""
    mats = initial_realisation(spec, N, seed)
    flow = _Flow(spec, mats, N, P)
    if P.quad_terms:
        P.calibrate(flow.values(flow.order_parameters(mats, 0.0)[0]))
    noise = _Noise(flow, nu, epsilon, rng, sign)
    theta0 = flow.values(flow.order_parameters(mats, 0.0)[0])
    for E in nu.values():                  # non-polynomial ν: quadrature order chosen at the start
        if E.quad_terms and E.order is None:
            E.calibrate(theta0)
    rows, spec_rows = [], {spec.names[k]: [] for k in spec.students}

    def record(y, t):
        row, sp_ = flow.observe(y, t)
        rows.append(row)
        if spectra:
            for n, ev in sp_.items():
                spec_rows[n].append(ev)

    y = flow.pack()
    t = float(times[0])
    record(y, t)
    steps = 0
    for t1 in times[1:]:
        t1 = float(t1)
        nsub = max(1, int(math.ceil((t1 - t) / dt_max - 1e-9)))
        h = (t1 - t) / nsub
        for _ in range(nsub):
            cur = flow.unpack(y)
            q, _ = flow.order_parameters(cur, t)                  # raises beyond _BLOWUP
            C = noise.factor(noise.nu_matrix(q))                  # Itô: ν at the start of the step
            with np.errstate(over="ignore", invalid="ignore"):
                y = _rk4(flow.rhs, t, y, h)
            if not np.all(np.isfinite(y)):
                raise NumericalFailure(f"spectral flow: NaN/inf at time {t + h:.6g}", t + h)
            dXi = noise.increments(C, h, N)
            flow.mats = noise.apply(flow.unpack(y), dXi)
            y = flow.pack()
            t += h
            steps += 1
        t = t1
        flow.order_parameters(flow.unpack(y), t)
        record(y, t)
    table = {c: np.array([r[c] for r in rows]) for c in rows[0]}
    return table, {n: np.array(v) for n, v in spec_rows.items()}, flow.nevals, steps


def _noisy_average(spec, P, nu, N, seed, times, epsilon, noise_seed, dt_max, realisations, spectra=True,
                   antithetic=False):
    """Mean over noise paths and its standard error (antithetic: paths 2j, 2j+1 use ±dΞ of one
    stream; the error is then that of the R/2 pair means)."""
    tables, first_spectra, nev, steps = [], None, 0, 0
    for r in range(realisations):
        j, sign = (r // 2, (-1.0) ** r) if antithetic else (r, 1.0)
        rng = np.random.default_rng(np.random.SeedSequence([int(noise_seed), int(N), j, 0x5eed]))
        tab, sp_, ne, st = _integrate_noisy(spec, P, nu, N, seed, times, epsilon, rng, dt_max,
                                            spectra=spectra and r == 0, sign=sign)
        tables.append(tab)
        nev += ne
        steps += st
        if r == 0:
            first_spectra = sp_
    table, sem = {}, {}
    for c in tables[0]:
        arr = np.array([tb[c] for tb in tables])
        table[c] = arr.mean(axis=0)
        if c != "time":
            if antithetic:
                arr = 0.5 * (arr[0::2] + arr[1::2])
            n = arr.shape[0]
            sem[c] = arr.std(axis=0, ddof=1) / math.sqrt(n) if n > 1 else np.full(arr.shape[1], np.nan)
    return table, first_spectra, nev, steps, sem


# ============================================================================ result
@dataclass
class SpectralResult:
    """Columns of the theory CSV (docs/interface.md) plus ``<col>_err``; spectra of the students."""

    table: dict
    spectra: dict
    size: int
    seed: int
    spec_name: str = ""
    info: dict = field(default_factory=dict)

    @property
    def time(self) -> np.ndarray:
        return self.table["time"]

    def columns(self) -> list:
        return list(self.table)

    def to_csv(self, path):
        from .integration import write_csv
        write_csv(self.table, path, digits=None)
        return Path(path)

    def spectra_to_csv(self, path, quantiles=None, full: bool = False):
        """Rows (time, index); columns ``q_0.01 … q_0.99`` (empirical quantiles of the N eigenvalues),
        or with ``full=True`` all sorted eigenvalues ``e_0 … e_{N−1}``. Written atomically."""
        from .files import atomic_write
        if quantiles is None:
            quantiles = np.round(np.arange(1, 100) / 100, 2)
        quantiles = np.asarray(quantiles, dtype=float)
        buf = io.StringIO()
        w = csv.writer(buf)
        n0 = next(iter(self.spectra.values())).shape[1] if self.spectra else 0
        head = [f"e_{i}" for i in range(n0)] if full else [f"q_{p:g}" for p in quantiles]
        w.writerow(["time", "index"] + head)
        for i, t in enumerate(self.time):
            for name, ev in self.spectra.items():
                vals = ev[i] if full else np.quantile(ev[i], quantiles)
                w.writerow([repr(float(t)), name] + [repr(float(v)) for v in vals])
        return atomic_write(path, buf.getvalue())


def solve_spectral(spec, time: float = 1.0, points: int = 51, size: int = 1000, seed: int = 0,
                   error_estimate: bool = True, method: str = "DOP853", rtol: float = 1e-8,
                   atol: float | None = None, potential=None, epsilon: float | None = None,
                   noise_seed: int | None = None, noise_dt: float = 1e-3,
                   noise_realisations: int = 1, noise_antithetic: bool = False) -> SpectralResult:
    """Integrate the d → ∞ flow at matrix level on a size-N realisation (module docstring).

    Returns the theory columns (``time`` = package time nα/d, ``tr_a``, ``q_a_b``, ``p_a_b``,
    ``loss``), with ``error_estimate`` also ``<col>_err`` = |f(N) − f(N/2)|, and ``spectra``:
    student name → (points × N) sorted eigenvalues. Raises NumericalFailure(message, time) on
    divergence and SpecError for untied indices.

    ``epsilon`` (noise ratio ε = αd/B; None or 0: the deterministic flow, unchanged) adds the
    O(ε) SGD noise as the Gaussian-equivalent stochastic flow of the module docstring, integrated
    with fixed steps ≤ ``noise_dt`` (RK4 drift + noise map; ``method``/``rtol``/``atol`` are then
    unused) from the noise stream ``noise_seed`` (default ``seed``). ``noise_realisations`` = R
    independent noise paths on the same initial matrices are averaged (spectra: the first path);
    ``info['noise_sem']``: column → standard error of that mean (NaN for R = 1). With
    ``noise_antithetic`` (R even) the paths come in pairs driven by ±dΞ, which cancels the
    leading O(√dt/N)-per-step fluctuation of the mean (the error is that of the R/2 pair means). The N/2 error
    estimate uses its own R paths, so ``<col>_err`` then also contains the O(1/(N√R)) noise spread."""
    from .derivation.potential import Potential

    spec = load_spec(spec)
    _check_supported(spec)
    size = int(size)
    if size < 4:
        raise UsageError(f"size {size}: must be >= 4")
    if not (time >= 0 and math.isfinite(time)):
        raise UsageError(f"time {time}: must be a finite number >= 0")
    if points < 1:
        raise UsageError(f"points {points}: must be >= 1")
    P = potential if potential is not None else Potential(spec)
    times = np.linspace(0.0, float(time), int(points)) if points > 1 else np.array([float(time)])
    if points == 1:
        times = np.array([0.0, float(time)])
    noisy = epsilon is not None and float(epsilon) != 0.0
    if noisy:
        epsilon = float(epsilon)
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise UsageError(f"epsilon {epsilon}: the noise ratio must be a finite number >= 0")
        if not (noise_dt > 0 and math.isfinite(noise_dt)):
            raise UsageError(f"noise_dt {noise_dt}: must be a finite number > 0")
        if int(noise_realisations) < 1:
            raise UsageError(f"noise_realisations {noise_realisations}: must be >= 1")
        if noise_antithetic and int(noise_realisations) % 2:
            raise UsageError(f"noise_realisations {noise_realisations}: must be even with noise_antithetic")
        from .derivation.noise import nu_expectations
        nu = nu_expectations(P)
        nseed = int(seed if noise_seed is None else noise_seed)
        R = int(noise_realisations)

        def run(n, want_spectra=True):
            tab, sp_, nev_, steps_, sem_ = _noisy_average(spec, P, nu, n, seed, times, epsilon, nseed,
                                                          float(noise_dt), R, spectra=want_spectra,
                                                          antithetic=bool(noise_antithetic))
            return tab, sp_, nev_, {"noise_steps": steps_, "noise_sem": sem_}
    else:
        def run(n, want_spectra=True):
            tab, sp_, nev_ = _integrate(spec, P, n, seed, times, method, rtol, atol, spectra=want_spectra)
            return tab, sp_, nev_, {}
    table, spectra, nev, extra = run(size)
    info = {"rhs_evaluations": nev, "method": method, "rtol": rtol}
    if noisy:
        info.update({"method": "stochastic RK4+noise (Lie splitting)", "rtol": None, "epsilon": epsilon,
                     "noise_seed": nseed, "noise_dt": float(noise_dt), "noise_realisations": R,
                     "noise_antithetic": bool(noise_antithetic),
                     "noise_steps": extra["noise_steps"],
                     "noise_sem": {c: (v[-1:] if points == 1 else v) for c, v in extra["noise_sem"].items()}})
    if points == 1:
        table = {c: v[-1:] for c, v in table.items()}
        spectra = {n: v[-1:] for n, v in spectra.items()}
    if error_estimate:
        nhalf = max(4, 2 * (size // 4))      # even, so that an atom of mass ½ is resolved alike
        half, _, nev2, _ = run(nhalf, False)
        if points == 1:
            half = {c: v[-1:] for c, v in half.items()}
        for c in list(table):
            if c != "time":
                table[f"{c}_err"] = np.abs(table[c] - half[c])
        info["rhs_evaluations_half"] = nev2
        info["size_half"] = nhalf
    return SpectralResult(table=table, spectra=spectra, size=size, seed=seed, spec_name=spec.name, info=info)


# ============================================================================ plotting
def plot_spectra(result: SpectralResult, sim_eigs=None, path="spectra.png", times=None, bins: int = 60,
                 drop_zero_atom: bool = True):
    """Histograms of the evolving eigenvalue density of each student at a few times.

    ``sim_eigs`` (optional): eigenvalues of simulated students, ``{student: {time: eigs}}`` or, for
    a single student, ``{time: eigs}``; they are drawn next to the spectral solution at the result
    time nearest to each given time. The exact zero atom of a rank-deficient tied student is left
    out of the histograms (its mass is written in the legend)."""
    import matplotlib
    from matplotlib.figure import Figure

    names = list(result.spectra)
    if sim_eigs is not None and names and not isinstance(next(iter(sim_eigs.values())), dict):
        sim_eigs = {names[0]: sim_eigs}
    tgrid = result.time
    fig = Figure(figsize=(7, 3.2 * max(1, len(names))))
    axes = fig.subplots(len(names), 1, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        sims = (sim_eigs or {}).get(name, {})
        ts = list(sims) if sims else (times if times is not None else np.linspace(tgrid[0], tgrid[-1], 4))
        colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(ts)))
        idx = [int(np.argmin(np.abs(tgrid - float(t)))) for t in ts]
        pool = [result.spectra[name][i] for i in idx] + [np.asarray(sims[t], float) for t in sims]
        lo = min(float(np.min(v)) for v in pool)
        hi = max(float(np.max(v)) for v in pool)
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)      # common bins
        width = edges[1] - edges[0]

        def _hist(ev, **kw):
            ev = np.asarray(ev, dtype=float)
            keep = np.abs(ev) > 1e-10 * max(np.abs(ev).max(), 1e-300) if drop_zero_atom else np.ones(len(ev), bool)
            ax.hist(ev[keep], bins=edges, weights=np.full(keep.sum(), 1.0 / (len(ev) * width)), **kw)
            return 1.0 - keep.mean()

        for t, i, col in zip(ts, idx, colors):
            atom = _hist(result.spectra[name][i], histtype="step", color=col, lw=1.5)
            ax.plot([], [], color=col, label=f"spectral t={tgrid[i]:.3g}" + (f" (atom {atom:.2f} at 0)" if atom > 0 else ""))
            if sims:
                _hist(sims[t], histtype="stepfilled", alpha=0.25, color=col, label=f"simulation t={float(t):.3g}")
        ax.set_title(f"{result.spec_name}: eigenvalue density of {name} (N = {result.size})")
        ax.set_xlabel("eigenvalue")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    fig.tight_layout()
    from .files import atomic_target
    path = Path(path)
    with atomic_target(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    return path


# ============================================================================ command-line helpers
def run_spectral_from_args(spec, args) -> SpectralResult:
    """Run ``solve_spectral`` from parsed ``theory`` arguments; write --spectra and --spectra-plot
    (the table itself is written by the caller, to --out or stdout). Returns the result."""
    spec = load_spec(spec)
    eps = 0.0 if args.noise == "off" else spec.epsilon(args.dim)
    res = solve_spectral(spec, time=args.time, points=args.points, size=args.size, seed=args.seed,
                         error_estimate=not args.no_error_estimate, epsilon=eps or None,
                         noise_realisations=args.realisations, noise_antithetic=eps > 0)
    if args.spectra:
        res.spectra_to_csv(args.spectra, full=args.spectra_full)
    if args.spectra_plot:
        plot_spectra(res, path=args.spectra_plot)
    return res
