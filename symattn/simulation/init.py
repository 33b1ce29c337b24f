"""Initial matrices of a simulation (docs/theory.md §3 "Initialisation", §7 "Sampled initial conditions").

``draw_initial(spec, dim, rng)`` returns one dict per index, in spec order, each index's kind
drawing its own factors (symattn.kinds): ``{'W': W}`` (tied, S = WW^T), ``{'U': U, 'V': V}``
(untied, S = UV^T), ``{'S': S}`` (direct, identity). Factor entries are N(0, σ²/d) with
d_k = round(κ d) columns; a direct S is σ·Z with Z = (A + A^T)/√(2d) a GOE matrix (Tr Z²/d → 1;
nothing is drawn when σ = 0); an identity teacher is scale·I (nothing drawn).

Seed policy and the draw: ``symattn.initial`` (this module re-exports them).
"""
from __future__ import annotations

import numpy as np

from ..initial import BATCHES, INITIAL, TEST, draw_initial, stream  # noqa: F401 (re-exported)


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
