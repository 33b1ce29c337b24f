"""The output table of a noise path from its knots: Lagrange interpolation through the nearest knots."""
from __future__ import annotations

import numpy as np


def lagrange_weights(x, at):
    """Weights w[i, l] of the values at the nodes x[i, l] in the polynomial through them, at the time at[i]."""
    n = x.shape[-1]
    w = np.ones(x.shape)
    for l in range(n):
        for m in range(n):
            if m != l:
                w[..., l] *= (at - x[..., m]) / (x[..., l] - x[..., m])
    return w


def lagrange(x, v, at):
    """Values at the times ``at`` of the polynomial through (x_i, v_i) (v: knots × columns)."""
    return lagrange_weights(np.broadcast_to(x, (len(at), len(x))), np.asarray(at, dtype=float)) @ v


def at_times(knots, vals, out_t):
    """The knots' values at the output times (``vals``: knots × columns, or knots): exact at a knot,
    between knots the cubic through the four nearest (two on each side where there are; O(h⁴)), linear
    with fewer than four knots."""
    n = len(knots)
    if n < 4:
        return np.stack([np.interp(out_t, knots, v) for v in vals.T], axis=-1) if vals.ndim == 2 \
            else np.interp(out_t, knots, vals)
    j = np.searchsorted(knots, out_t)
    nearest = np.clip(j - 2, 0, n - 4)[:, None] + np.arange(4)          # (outputs, 4) nearest knots
    w = lagrange_weights(knots[nearest], out_t)
    got = (w.reshape(w.shape + (1,) * (vals.ndim - 1)) * vals[nearest]).sum(axis=1)
    hit = (j < n) & (knots[np.minimum(j, n - 1)] == out_t)
    got[hit] = vals[j[hit]]
    return got
