"""Embedded explicit Runge–Kutta pairs for the drift of the matrix-level flow (docs/theory.md §5, "Time
stepping"). A step is ``(y, f(t, y)) → (y_new, error vector)`` and shares no evaluation with the next: the
noise map comes in between, so a first-same-as-last stage cannot be reused.

* :class:`BogackiShampine` — 3(2), four evaluations, real stability interval [−2.51, 0];
* :class:`CashKarp` — 5(4) propagating its 4th-order solution, six evaluations, [−4.21, 0].

Where the steps are bounded by the output knots or the noise caps the cheaper pair holds the tolerance; where
stability bounds them (the stiff tied h2 flow, stiffest mode ≈ 140–1200) Cash–Karp's longer interval wins.
"""
from __future__ import annotations

import numpy as np


class _EmbeddedPair:
    """An embedded explicit pair: tableau C, A, B (the propagated solution) and E (the error estimate)."""
    B: np.ndarray
    E: np.ndarray

    def __init_subclass__(cls):
        cls.BE = np.stack([cls.B, cls.E])     # both final combinations in one product

    @classmethod
    def step(cls, f, t, y, h, k1, K):
        """(y_new, error vector) from (t, y) with k1 = f(t, y); ``K``: a (stages × y.size) buffer, so that each
        combination is one GEMV (NumPy's vector × matrix product: the package then imports no SciPy on the warm
        matrix-level path — Numba still does, so the measured saving is ≈ 0.04 s, docs/results/theory_cost.md)."""
        n, dt = len(cls.B), K.dtype
        K[0] = k1
        for s in range(1, n):       # y + h Σ_j a_sj k_j: one GEMV on the stages
            stage = (h * cls.A[s, :s]).astype(dt) @ K[:s]
            stage += y
            K[s] = f(t + cls.C[s] * h, stage)
        step, err = (h * cls.BE).astype(dt) @ K[:n]
        step += y
        return step, err


class CashKarp(_EmbeddedPair):
    """Cash & Karp's embedded 5(4) pair (ACM TOMS 16 (1990) 201), propagating its 4th-order solution
    (the Fehlberg mode): six evaluations a step, a real stability interval [−4.21, 0] against
    Dormand–Prince's [−3.31, 0] in seven. ``E`` = b5 − b4 estimates its error."""
    C = np.array([0.0, 1 / 5, 3 / 10, 3 / 5, 1.0, 7 / 8])
    A = np.array([[0, 0, 0, 0, 0],
                  [1 / 5, 0, 0, 0, 0],
                  [3 / 40, 9 / 40, 0, 0, 0],
                  [3 / 10, -9 / 10, 6 / 5, 0, 0],
                  [-11 / 54, 5 / 2, -70 / 27, 35 / 27, 0],
                  [1631 / 55296, 175 / 512, 575 / 13824, 44275 / 110592, 253 / 4096]])
    B = np.array([2825 / 27648, 0, 18575 / 48384, 13525 / 55296, 277 / 14336, 1 / 4])
    E = np.array([37 / 378, 0, 250 / 621, 125 / 594, 0, 512 / 1771]) - B
    order = 4
    error_order = 5        # the error estimate is O(h⁵)
    stability = 4.21


class BogackiShampine(_EmbeddedPair):
    """Bogacki & Shampine's embedded 3(2) pair (Appl. Math. Lett. 2 (1989) 321), propagating its 3rd-order
    solution: four evaluations a step here (its first-same-as-last stage cannot be reused: the noise map
    comes between two steps), real stability interval [−2.51, 0]."""
    C = np.array([0.0, 1 / 2, 3 / 4, 1.0])
    A = np.array([[0, 0, 0], [1 / 2, 0, 0], [0, 3 / 4, 0], [2 / 9, 1 / 3, 4 / 9]])
    B = np.array([2 / 9, 1 / 3, 4 / 9, 0.0])
    E = B - np.array([7 / 24, 1 / 4, 1 / 3, 1 / 8])
    order = 3
    error_order = 3
    stability = 2.51

