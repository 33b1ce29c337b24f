"""The matrix-level ("spectral") limit: the d → ∞ flow of the trained matrices at size N, for all times.

The zero-truncated moment hierarchy (docs/theory.md §5) converges only in a finite time window. Here the limit
flow is integrated at matrix level on realisations of size N of the asymptotically free initial laws, with
quantile (not random) spectra, so that the only finite-N effects are the discretisation of the spectra and the
O(1/N) fluctuations of the Haar rotations. One idea per file, in the order a run uses them:

* ``realisation`` — the size-N start (quantile spectra, Haar rotations, decoupled teachers, relaxed means);
* ``field`` — the vector field: the order parameters as traces, Φ's gradients, each kind's ``matrix_velocity``;
* ``protocol`` — what the engine asks of a kind (``MatrixLevelKind``);
* ``noise`` — the O(ε) SGD noise as a Gaussian-equivalent increment and each kind's noise map;
* ``deterministic`` — ε = 0: SciPy's Runge–Kutta on the packed matrices;
* ``stochastic`` — ε > 0: the Strang splitting of drift and noise, the step-size controller, the output knots;
* ``interpolation`` — the output table from the knots;
* ``estimate`` — ``<col>_err`` from the same flow at N/2;
* ``threads`` — BLAS threads sized to the matrices;
* ``solve`` — the driver (``solve_spectral``, its ``Options``); ``result`` — ``SpectralResult``; ``plot``.

Representations (``symattn.matrix``): ``scalar`` c·I, ``diag`` (a frozen diagonal teacher), ``factor`` W
(S = W Wᵀ never formed), ``dense`` S (direct, and tied of width κ > 0.618), ``ndense`` S (general), ``pair``
(U, V) (untied, M = UVᵀ never formed). All N³ work is BLAS.
"""
from __future__ import annotations

from ..matrix import Mat
from ..symbolic.spectra import (
    free_poisson_density,
    free_poisson_moments,
    free_poisson_quantiles,
    haar_orthogonal,
    semicircle_quantiles,
)
from ..threads import SINGLE_THREAD_UP_TO, blas_threads
from .plot import plot_spectra
from .protocol import MatrixLevelKind
from .realisation import decoupled_teachers, initial_realisation
from .result import SpectralResult
from .solve import Options, solve_spectral

__all__ = [
    "SpectralResult", "solve_spectral", "Options", "plot_spectra", "initial_realisation", "decoupled_teachers",
    "Mat", "MatrixLevelKind", "blas_threads", "SINGLE_THREAD_UP_TO",
    "free_poisson_quantiles", "free_poisson_moments", "free_poisson_density", "semicircle_quantiles",
    "haar_orthogonal",
]
