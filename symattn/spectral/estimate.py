"""The finite-N error estimate ``<col>_err`` of the matrix-level flow (docs/theory.md §5, §7).

With R realisations at N (means m, standard error SEM) and the same R at N/2: the systematic O(1/N^p) error of
m(N) is estimated by c_sys·|m(N) − m(N/2)|, c_sys = 1/(2^p − 1) (p = 1, less for a heavy power-law feature
covariance: ``features.convergence_order``), combined in quadrature with t·(the random error of m(N) and of that
estimate), Student's t at 97.5 % for R − 1 degrees of freedom (3.18 for R = 4); for R = 1 the systematic part
alone. ``extrapolate``: the columns become the Richardson extrapolation m(N) + c_ex (m(N) − m(N/2)),
c_ex = 1/((N/N')^p − 1), with the extrapolation's random error instead.
"""
from __future__ import annotations

import numpy as np

# Student's t at 97.5 % for 1 … 30 degrees of freedom (beyond: the 30's, a little above the normal 1.96)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(dof: int) -> float:
    """Student's t quantile at 97.5 % (a two-sided 95 % interval) for ``dof`` ≥ 1 degrees of freedom."""
    return _T975[min(int(dof), len(_T975)) - 1]


def half_size(N: int) -> int:
    """N' of the error estimate: about N/2, even (so that an atom of mass ½ is resolved alike), at least 4."""
    return max(4, 2 * (N // 4))


def add_errors(table: dict, half: dict, sem: dict, sem_half: dict, size: int, nhalf: int, order: float,
               rotations: int, extrapolate: bool) -> None:
    """Add ``<col>_err`` to ``table`` (the means at N) from ``half`` (at N' = ``nhalf``) and the realisations'
    standard errors (module docstring); with ``extrapolate`` replace the columns by the extrapolation."""
    c_ex = 1.0 / ((size / nhalf) ** order - 1.0)
    c_sys = 1.0 / (2.0 ** order - 1.0)
    t_factor = t975(rotations - 1) if rotations > 1 else 0.0
    for c in list(table):
        if c != "time":
            diff = table[c] - half[c]
            # the random part: of the extrapolation; else of m(N) and of the systematic estimate itself,
            # c_sys·(m(N) − m(N/2)), whose noise (SEM ⊕ SEM_{N/2}) is as large as its signal where it
            # crosses zero (docs/theory.md §5)
            rand = (np.hypot((1 + c_ex) * sem[c], c_ex * sem_half[c]) if extrapolate
                    else np.hypot(sem[c], c_sys * np.hypot(sem[c], sem_half[c])))
            sys = c_sys * np.abs(diff)
            table[f"{c}_err"] = np.hypot(sys, t_factor * rand) if rotations > 1 else sys
            if extrapolate:
                table[c] = table[c] + diff * c_ex
