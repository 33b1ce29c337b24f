"""Φ and its gradient for a residual network in the Gaussian limit (docs/theory.md §10).

The unrolled loss depends on L²K Gaussian pre-activations (K word indices); their covariance
Σ(θ) = Σ_r θ_r D_r is linear in the order parameters θ (Ω, Ψ of the words; the coefficient
matrices D_r come from the Gaussian engine, ``symbolic.gaussian.GaussianG.cov``). The expectation
is too high-dimensional for a tensor rule, so it is a randomised quasi-Monte Carlo average over
fixed scrambled Sobol points z (R independent scramblings give the standard error):

    Φ(θ) = mean_n 𝓛(B z_n),   B = Σ^{1/2} (symmetric square root),

a smooth deterministic function of θ. Its exact gradient needs only ∇𝓛: with Ḡ = mean ∇𝓛(Bz) zᵀ
and Σ = U Λ Uᵀ, dB = U [Uᵀ dΣ U ⊘ (√λ_i + √λ_j)] Uᵀ (the Daleckii–Krein formula), so

    ∂Φ/∂Σ = U [sym(Uᵀ Ḡ U) ⊘ (√λ_i + √λ_j)] Uᵀ,      ∂Φ/∂θ_r = ⟨∂Φ/∂Σ, D_r⟩,

pairs with λ_i = λ_j = 0 (directions that carry no variance) contributing nothing.
"""
from __future__ import annotations

import numpy as np
import sympy as sp
from scipy.special import ndtri
from scipy.stats import qmc

from ..symbolic.gaussian import GaussianG, OrderParameters
from ..symbolic.loss import Loss
from .unroll import Unrolled


def order_pairs(unrolled: Unrolled) -> tuple:
    """(names, pairs): the order parameters of the word indices as the Gaussian engine names them
    (``q_a_b``; ``q1_a_b`` = Ω, ``q2_a_b`` = Ψ for two non-symmetric words) and, for each, (k, l, "o")
    for Ω_kl = Tr(M_k M_lᵀ)/d or (k, l, "p") for Ψ_kl = Tr(M_k M_l)/d."""
    op = OrderParameters(unrolled.index_spec)
    pairs = {}
    K = unrolled.K
    for k in range(K):
        for l in range(k, K):
            pairs.setdefault(op.omega(k, l).name, (k, l, "o"))
            pairs.setdefault(op.psi(k, l).name, (k, l, "p"))
    names = [s.name for s in op.symbols]
    return names, [pairs[n] for n in names]


def trace_values(pairs, words: list, dim: int) -> np.ndarray:
    """θ of the word matrices: Ω_kl = Tr(M_k M_lᵀ)/d or Ψ_kl = Tr(M_k M_l)/d."""
    out = np.empty(len(pairs))
    for r, (k, l, t) in enumerate(pairs):
        out[r] = np.vdot(words[k], words[l] if t == "o" else words[l].T) / dim
    return out


def word_gradients(pairs, words: list, gtheta, dim: int) -> list:
    """∂Φ/∂M_w = Σ_r ∂Φ/∂θ_r ∂θ_r/∂M_w (∂Tr(ABᵀ)/∂A = B, ∂Tr(AB)/∂A = Bᵀ)."""
    out = [np.zeros_like(w) for w in words]
    for g, (k, l, t) in zip(gtheta, pairs, strict=True):
        if g == 0.0:
            continue
        c = g / dim
        out[k] += c * (words[l] if t == "o" else words[l].T)
        out[l] += c * (words[k] if t == "o" else words[k].T)
    return out


_BATCH = """
@njit(cache=True)
def batch(g, out):
    for n in range(g.shape[0]):
        out[n, :] = point(g[n])
"""


def program_code(unrolled: Unrolled, name: str = "point") -> str:
    """Source of a Numba function g -> [𝓛, ∂𝓛/∂g_1, …]: the program's forward steps, then its reverse
    accumulation (``unroll.Program.adjoint_steps``), printed one assignment per step."""
    from sympy.printing.pycode import pycode
    gs = unrolled.g_symbols
    steps, grads = unrolled.program.adjoint_steps(unrolled.out, gs)
    pr = lambda e: pycode(e, fully_qualified_modules=True)  # noqa: E731
    lines = ["@njit(cache=True)", f"def {name}(g):"]
    lines += [f"    {s.name} = g[{i}]" for i, s in enumerate(gs)]
    lines += [f"    {s.name} = {pr(e)}" for s, e in steps]
    lines.append(f"    out = np.zeros({len(gs) + 1})")
    lines.append(f"    out[0] = {unrolled.out.name}")
    lines += [f"    out[{i + 1}] = {pr(e)}" for i, e in enumerate(grads) if e != 0]
    lines.append("    return out")
    return "\n".join(lines) + "\n"


def compiled_loss_gradient(unrolled: Unrolled, jit: bool = True):
    """A compiled batch(g[n, P], out[n, 1 + P]) writing (𝓛, ∂𝓛/∂g) per row (``program_code``), loaded
    through the verified cache (``codegen.load``). ``jit=False``: the same source run by Python (no Numba
    compilation; for a few rows)."""
    from ..codegen.load import _cached
    head = ("from numba import njit" if jit else
            "def njit(*args, **kwargs):\n    return lambda f: f")
    src = f"import math\nimport numpy as np\n{head}\n\n\n" + program_code(unrolled) + "\n" + _BATCH
    return _cached("a" if jit else "ap", src).batch


class GaussianLimit:
    """The QMC potential of an unrolled residual model (module docstring).

    ``points``: Sobol points per scrambling (a power of 2), ``replicas``: independent scramblings."""

    def __init__(self, unrolled: Unrolled, points: int = 2**13, replicas: int = 4, seed: int = 0):
        m = int(round(np.log2(points)))
        if 2**m != int(points) or m < 4:
            raise ValueError(f"points {points}: must be a power of 2, >= 16")
        if int(replicas) < 1:
            raise ValueError(f"replicas {replicas}: must be >= 1")
        self.unrolled = unrolled
        op = OrderParameters(unrolled.index_spec)
        # the engine's covariance needs the loss only for its shape (L, K, no label-noise symbols)
        gg = GaussianG(Loss(unrolled.index_spec, sp.Integer(0), []), op)
        gs = unrolled.g_symbols
        self.symbols = op.symbols
        self.names = [s.name for s in self.symbols]
        n = len(gs)
        self.D = np.zeros((len(self.symbols), n, n))
        for a in range(n):
            for b in range(a, n):
                c = sp.expand(gg.cov(gs[a], gs[b]))
                for r, s in enumerate(self.symbols):
                    v = float(c.coeff(s))
                    self.D[r, a, b] = self.D[r, b, a] = v
        self.pairs = order_pairs(unrolled)[1]
        self._batch = compiled_loss_gradient(unrolled)
        self.R = int(replicas)
        z = [qmc.Sobol(d=n, scramble=True, seed=seed + r).random_base2(m) for r in range(self.R)]
        self.z = ndtri(np.clip(np.concatenate(z), 1e-16, 1 - 1e-16))
        self.noise_constant = 0.5 * unrolled.spec.tokens ** 2 * unrolled.spec.label_noise

    # ------------------------------------------------------------------ order parameters
    def values(self, words: list, dim: int) -> np.ndarray:
        return trace_values(self.pairs, words, dim)

    def word_gradients(self, words: list, gtheta, dim: int) -> list:
        return word_gradients(self.pairs, words, gtheta, dim)

    # ------------------------------------------------------------------ Φ
    def covariance(self, theta) -> np.ndarray:
        return np.tensordot(np.asarray(theta, float), self.D, axes=1)

    def _samples(self, theta):
        lam, U = np.linalg.eigh(self.covariance(theta))
        if lam.min() < -1e-9 * max(1.0, lam.max()):
            from ..errors import NumericalFailure
            raise NumericalFailure(f"order parameters give an indefinite covariance (eigenvalue {lam.min():.3g})")
        root = np.sqrt(np.clip(lam, 0.0, None))
        B = (U * root) @ U.T
        return self.z @ B, U, root

    def _evaluate(self, g):
        out = np.empty((g.shape[0], g.shape[1] + 1))
        self._batch(np.ascontiguousarray(g), out)
        return out[:, 0], out[:, 1:]

    def phi(self, theta) -> tuple:
        """(Φ, standard error over the scramblings)."""
        g, _, _ = self._samples(theta)
        loss, _ = self._evaluate(g)
        means = loss.reshape(self.R, -1).mean(axis=1)
        se = means.std(ddof=1) / np.sqrt(self.R) if self.R > 1 else np.nan
        return float(means.mean()) + self.noise_constant, float(se)

    def phi_and_grad(self, theta) -> tuple:
        """(Φ, ∂Φ/∂θ) of the fixed-point estimate (its exact gradient, module docstring)."""
        g, U, root = self._samples(theta)
        loss, grad = self._evaluate(g)
        Gbar = grad.T @ self.z / len(self.z)
        Gp = U.T @ Gbar @ U
        Gp = 0.5 * (Gp + Gp.T)
        den = root[:, None] + root[None, :]
        tiny = 1e-12 * max(root.max(), 1e-300)
        W = np.divide(Gp, den, out=np.zeros_like(Gp), where=den > tiny)
        dSigma = U @ W @ U.T
        return float(loss.mean()) + self.noise_constant, np.tensordot(self.D, dSigma, axes=([1, 2], [0, 1]))
