"""Quantile spectra of the initial laws and Haar rotations (docs/theory.md §7): the size-N
realisations of asymptotically free laws used by the matrix-level solver (``symattn.spectral``)."""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np


def free_poisson_density(x, rate: float, jump: float = 1.0):
    """Density of the continuous part of the free Poisson law (rate κ, jump σ²) — Marchenko–Pastur."""
    x = np.asarray(x, dtype=float)
    a, b = jump * (1 - math.sqrt(rate)) ** 2, jump * (1 + math.sqrt(rate)) ** 2
    inside = (x > a) & (x < b)
    out = np.zeros_like(x)
    xi = x[inside]
    out[inside] = np.sqrt((b - xi) * (xi - a)) / (2 * math.pi * jump * xi)
    return out


def free_poisson_moments(n: int, rate: float, jump: float = 1.0) -> float:
    """φ(S^n) = σ^{2n} Σ_k Narayana(n, k) κ^k (exact moments of the free Poisson law)."""
    if n == 0:
        return 1.0
    tot = sum(math.comb(n, k) * math.comb(n, k - 1) // n * rate ** k for k in range(1, n + 1))
    return jump ** n * tot


_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)


def _theta_quantiles(g, v, grid: int = 1 << 15):
    """θ_i in [0, π] with ∫_0^θ_i g = v_i, g a smooth vectorised density in the angle variable.

    The angle parametrisation x = m − h cos θ removes the square-root edges of the laws
    (both integrand and CDF are smooth in θ). The CDF on a fine grid (an 8-point Gauss–Legendre
    integral per cell, summed), linear inversion, then Newton polishing with the same rule from the
    nearest grid node (quantiles accurate to ~1e-14)."""
    th = np.linspace(0.0, math.pi, grid + 1)
    half = 0.5 * (th[1] - th[0])
    cells = (th[:-1, None] + half * (_GL_X[None, :] + 1.0))
    G = np.concatenate([[0.0], np.cumsum(half * (g(cells) * _GL_W[None, :]).sum(axis=1))])
    v = np.asarray(v, dtype=float)
    t = np.interp(v, G, th)
    for _ in range(3):
        j = np.clip(np.searchsorted(th, t, side="right") - 1, 0, grid)
        lo = th[j]
        half = 0.5 * (t - lo)
        nodes = lo[:, None] + half[:, None] * (_GL_X[None, :] + 1.0)
        F = G[j] + half * (g(nodes) * _GL_W[None, :]).sum(axis=1)
        gt = g(t)
        step = np.where(gt > 0, (F - v) / np.where(gt > 0, gt, 1.0), 0.0)
        t = np.clip(t - step, 0.0, math.pi)
    return t


def _midpoints(N: int) -> np.ndarray:
    return (np.arange(1, N + 1) - 0.5) / N


def free_poisson_quantiles(N: int, rate: float, jump: float = 1.0) -> np.ndarray:
    """λ_i = F^{-1}((i − ½)/N), i = 1..N, of the free Poisson law (increasing; zeros for the atom)."""
    return _free_poisson_quantiles(int(N), float(rate), float(jump)).copy()


@lru_cache(maxsize=64)
def _free_poisson_quantiles(N: int, rate: float, jump: float) -> np.ndarray:
    a, b = jump * (1 - math.sqrt(rate)) ** 2, jump * (1 + math.sqrt(rate)) ** 2
    m, h = 0.5 * (a + b), 0.5 * (b - a)
    atom = max(0.0, 1.0 - rate)
    edge0 = a <= 1e-14 * b

    def g(th):       # ρ(x) dx/dθ with x = m − h cos θ
        if edge0:    # a = 0 (κ = 1): sin²θ / (1 − cos θ) = 1 + cos θ
            return h * (1.0 + np.cos(th)) / (2 * math.pi * jump)
        return h * h * np.sin(th) ** 2 / (2 * math.pi * jump * (m - h * np.cos(th)))

    u = _midpoints(N)
    lam = np.zeros(N)
    cont = u > atom
    lam[cont] = m - h * np.cos(_theta_quantiles(g, u[cont] - atom))
    return lam


def semicircle_quantiles(N: int, radius: float) -> np.ndarray:
    """Quantiles of the semicircle law on [−radius, radius] (σ·GOE: radius 2σ)."""
    if radius == 0:
        return np.zeros(N)
    return -radius * _semicircle_angles(int(N))


@lru_cache(maxsize=64)
def _semicircle_angles(N: int) -> np.ndarray:
    return np.cos(_theta_quantiles(lambda t: 2.0 * np.sin(t) ** 2 / math.pi, _midpoints(N)))


def haar_orthogonal(N: int, rng) -> np.ndarray:
    """Haar-distributed O(N): QR of a Gaussian matrix with the signs of diag(R) fixed."""
    Q, R = np.linalg.qr(rng.standard_normal((N, N)))
    return Q * np.sign(np.diag(R))[None, :]


