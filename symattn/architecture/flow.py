"""The matrix-level all-time limit of a residual network on its factors (docs/theory.md §10).

At size N the trained factors θ follow the gradient flow of the population loss of their word
order parameters (package time τ = nα/d; the ε → 0 limit of online SGD):

    dθ/dτ = −N ∇_θ Φ(Ω(θ), Ψ(θ)) − γ θ,

∇_θ by the chain rule: ∂Φ/∂θ_r (``limit.GaussianLimit``) → ∂Φ/∂M_w of each word → ∂Φ/∂(factor
matrix) along the word (``Unrolled.word_pullback``) → ∂Φ/∂(factor parts) by its kind
(``Kind.pullback``). ``extrapolate``: f∞ = 2f(N) − f(N/2) (Richardson in 1/N) with |f(N) − f(N/2)|
as its error estimate, each size averaged over ``draws`` independent initial draws.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.integrate import solve_ivp

from ..errors import NumericalFailure, UsageError
from ..threads import blas_threads
from .limit import GaussianLimit
from .network import draw_factors, matrices
from .spec import load_residual
from .unroll import unroll


class _Flow:
    def __init__(self, spec, unrolled, limit, states, N):
        self.spec, self.u, self.lim, self.N = spec, unrolled, limit, N
        self.states = states
        self.keys = [(n, f) for n in spec.trained for f in sorted(states[n])]
        self.shapes = [states[n][f].shape for n, f in self.keys]
        self.nev = 0

    def pack(self, states):
        return np.concatenate([states[n][f].ravel() for n, f in self.keys])

    def unpack(self, y):
        out = {n: dict(s) for n, s in self.states.items()}
        o = 0
        for (n, f), sh in zip(self.keys, self.shapes, strict=True):
            size = int(np.prod(sh))
            out[n][f] = y[o:o + size].reshape(sh)
            o += size
        return out

    def observe(self, y):
        states = self.unpack(y)
        words = self.u.word_matrices(matrices(self.spec, states))
        theta = self.lim.values(words, self.N)
        return states, words, theta

    def __call__(self, t, y):
        self.nev += 1
        states, words, theta = self.observe(y)
        if not np.all(np.isfinite(theta)):
            raise NumericalFailure("matrix-level flow: non-finite order parameters", float(t))
        try:
            _, g = self.lim.phi_and_grad(theta)
        except NumericalFailure as exc:
            raise NumericalFailure(f"matrix-level flow: {exc}", float(t)) from None
        gm = self.u.word_pullback(matrices(self.spec, states), self.lim.word_gradients(words, g, self.N))
        vel = []
        for n, f in self.keys:
            kind = self.spec.factors[n].kind
            gf = kind.pullback(states[n], gm[n])[f]
            vel.append((-self.N * gf - self.spec.weight_decay * states[n][f]).ravel())
        return np.concatenate(vel)


def flow_from(spec, states: dict, N: int, times, limit=None, unrolled=None, rtol=1e-6, atol=1e-8) -> dict:
    """Integrate the flow from given factor states at size N; {"time", order parameters, "loss"}."""
    u = unrolled or unroll(spec)
    lim = limit or GaussianLimit(u)
    f = _Flow(spec, u, lim, states, N)
    y0 = f.pack(states)
    times = np.asarray(times, float)
    try:
        sol = solve_ivp(f, (0.0, float(times[-1])), y0, t_eval=times, method="RK45", rtol=rtol, atol=atol)
    except FloatingPointError as exc:
        raise NumericalFailure(f"matrix-level flow: {exc}") from None
    if sol.status != 0:
        raise NumericalFailure(f"matrix-level flow: {sol.message}", float(sol.t[-1]) if sol.t.size else 0.0)
    out = {c: np.empty(len(times)) for c in lim.names + ["loss"]}
    for i in range(len(times)):
        _, _, theta = f.observe(sol.y[:, i])
        for c, v in zip(lim.names, theta, strict=True):
            out[c][i] = v
        out["loss"][i] = lim.phi(theta)[0]
    out["time"] = times
    out["rhs_evaluations"] = f.nev
    return out


def solve_residual(spec, time: float, points: int = 11, size: int = 200, seed: int = 0, extrapolate: bool = True,
                   draws: int = 1, limit=None, rtol: float = 1e-6) -> dict:
    """The all-time limit of a residual network by the matrix-level flow (module docstring).

    Returns {"time", <order parameter>, "loss", and with ``extrapolate`` "<col>_err"}; the initial
    factors are drawn at size N by their kinds (``network.draw_factors``) from seeds seed, seed+1, …"""
    spec = load_residual(spec)
    size = int(size)
    if size < 8:
        raise UsageError(f"size {size}: must be >= 8")
    if not (time >= 0 and math.isfinite(time)):
        raise UsageError(f"time {time}: must be a finite number >= 0")
    if int(draws) < 1:
        raise UsageError(f"draws {draws}: must be >= 1")
    u = unroll(spec)
    lim = limit or GaussianLimit(u)
    times = np.linspace(0.0, float(time), int(points))

    def at(N):
        with blas_threads(N):
            runs = [flow_from(spec, draw_factors(spec, N, seed + r), N, times, lim, u, rtol=rtol) for r in range(draws)]
        return {c: np.mean([r[c] for r in runs], axis=0) for c in lim.names + ["loss"]}, sum(r["rhs_evaluations"] for r in runs)

    table, nev = at(size)
    info = {"size": size, "draws": int(draws), "rhs_evaluations": nev, "extrapolated": bool(extrapolate)}
    if extrapolate:
        half = size // 2
        low, nev2 = at(half)
        for c in list(table):
            diff = table[c] - low[c]
            table[f"{c}_err"] = np.abs(diff)
            table[c] = table[c] + diff * (half / (size - half))
        info.update(size_half=half, rhs_evaluations_half=nev2)
    table["time"] = times
    table["info"] = info
    return table
