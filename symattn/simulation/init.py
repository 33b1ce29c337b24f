"""Initial matrices of a simulation (docs/theory.md §3 "Initialisation", §7 "Sampled initial conditions").

``draw_initial(spec, dim, rng)`` returns one dict per index, in spec order, each index's kind
drawing its own factors (symattn.kinds): ``{'W': W}`` (tied, S = WW^T), ``{'U': U, 'V': V}``
(untied, S = UV^T), ``{'S': S}`` (direct, identity). Factor entries are N(0, σ²/d) with
d_k = round(κ d) columns; a direct S is σ·Z with Z = (A + A^T)/√(2d) a GOE matrix (Tr Z²/d → 1;
nothing is drawn when σ = 0); an identity teacher is scale·I (nothing drawn).

**Seed policy.** Every random stream of a simulation derives from (seed, d, what it is for)
through ``numpy.random.SeedSequence``: index k's initial matrices from ``stream(seed, d,
INITIAL, k)``, the batches from ``stream(seed, d, BATCHES)``, the test-loss samples from
``stream(seed, d, TEST)``. Runs at different d are therefore independent (``compare --dims`` fits
1/d through independent points), and an index's matrices do not change when another index is
added to the spec. ``draw_initial(spec, d, s)`` with an integer s reproduces seed s's initial
state; with a ``numpy.random.Generator`` it draws every index in spec order from that generator.
"""
from __future__ import annotations

import numpy as np

from ..kinds import factor_width, goe  # noqa: F401 (re-exported)
from ..spec import Spec

BATCHES, INITIAL, TEST = 0, 1, 7919      # the purposes of a simulation's random streams


def stream(seed: int, dim: int, purpose: int, index: int | None = None) -> np.random.Generator:
    """The generator of one purpose of simulation seed ``seed`` at dimension ``dim`` (module docstring)."""
    key = [int(seed), int(dim), int(purpose)] + ([] if index is None else [int(index)])
    return np.random.default_rng(np.random.SeedSequence(key))


def draw_initial(spec: Spec, dim: int, rng) -> list:
    """Initial (student) / frozen (teacher) matrices of every index, docs/theory.md §3 laws, spec order.

    ``rng``: a seed (int: seed policy of the module docstring) or a Generator (drawn in order)."""
    out = []
    seeded = isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)
    seed = int(rng) if seeded else None
    for k, ix in enumerate(spec.indices):
        if seeded:
            rng = stream(seed, dim, INITIAL, k)
        out.append(ix.kind.draw(ix, dim, rng))
    return out


def dense(state_k: dict) -> np.ndarray:
    """The d×d matrix S of one index from its factor dict (for tests and small d)."""
    if "W" in state_k:
        return state_k["W"] @ state_k["W"].T
    if "U" in state_k:
        return state_k["U"] @ state_k["V"].T
    return state_k["S"]


def psd_sqrt(C: np.ndarray) -> np.ndarray:
    """Symmetric square root R of a PSD matrix C (R R^T = C), negative round-off clipped."""
    w, Q = np.linalg.eigh(np.asarray(C, dtype=float))
    return (Q * np.sqrt(np.clip(w, 0.0, None))) @ Q.T
