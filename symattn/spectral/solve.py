"""The driver of the matrix-level flow: its options, one batch of realisations × noise paths, the N/2 estimate.

``solve_spectral(spec, time, points, **options)`` integrates the d → ∞ flow of the trained matrices at size N
(docs/theory.md §5–§7): the mean over ``rotations`` independent realisations of the initial laws
(``realisation``), each with ``noise_realisations`` noise paths when ε > 0 (``stochastic``; else ``deterministic``),
integrated as one batch, and ``<col>_err`` from the same at N/2 (``estimate``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..spec import require_spec
from ..threads import blas_threads
from .deterministic import integrate_deterministic
from .estimate import add_errors, half_size
from .realisation import decoupled_teachers
from .result import SpectralResult
from .stochastic import integrate_noisy


@dataclass(frozen=True)
class Options:
    """The options of :func:`solve_spectral` (its docstring says what each does)."""

    size: int = 1000
    seed: int = 0
    rotations: int = 1
    init: str = "free"
    error_estimate: bool = True
    extrapolate: bool = False
    spectra: bool = True
    method: str = "RK45"
    rtol: float = 1e-7
    atol: float | None = None
    epsilon: float | None = None
    noise_seed: int | None = None
    noise_dt: float | None = None
    noise_realisations: int = 1
    noise_antithetic: bool = False

    @property
    def noisy(self) -> bool:
        return self.epsilon is not None and float(self.epsilon) != 0.0

    def checked(self, time: float, points: int) -> Options:
        """These options with whole numbers as ints, or UsageError naming the first invalid one."""
        if int(self.size) < 4:
            raise UsageError(f"size {self.size}: must be >= 4")
        if not (time >= 0 and math.isfinite(time)):
            raise UsageError(f"time {time}: must be a finite number >= 0")
        if points < 1:
            raise UsageError(f"points {points}: must be >= 1")
        if self.init not in ("free", "sample"):
            raise UsageError(f"init {self.init!r}: must be 'free' or 'sample'")
        if int(self.rotations) < 1:
            raise UsageError(f"rotations {self.rotations}: must be >= 1")
        out = dataclasses.replace(self, size=int(self.size), rotations=int(self.rotations))
        if self.init == "sample":
            out = dataclasses.replace(out, error_estimate=False, extrapolate=False)
        if not self.noisy:
            return out
        eps = float(self.epsilon)
        if not (eps > 0 and math.isfinite(eps)):
            raise UsageError(f"epsilon {eps}: the noise ratio must be a finite number >= 0")
        if self.noise_dt is not None and not (self.noise_dt > 0 and math.isfinite(self.noise_dt)):
            raise UsageError(f"noise_dt {self.noise_dt}: must be a finite number > 0")
        if int(self.noise_realisations) < 1:
            raise UsageError(f"noise_realisations {self.noise_realisations}: must be >= 1")
        if self.noise_antithetic and int(self.noise_realisations) % 2:
            raise UsageError(f"noise_realisations {self.noise_realisations}: must be even with noise_antithetic")
        return dataclasses.replace(out, epsilon=eps)


def output_times(time: float, points: int) -> np.ndarray:
    """The integration's times: ``points`` equally spaced from 0 to ``time`` (0 and ``time`` for one point)."""
    return np.linspace(0.0, float(time), int(points)) if points > 1 else np.array([0.0, float(time)])


class _Batch:
    """One flow at size n: the ``rotations`` realisations (seeds seed, seed + 1, …) × R noise paths each
    (realisation r's path j: stream [noise_seed + r, n, j]; antithetic pairs share one with ±)."""

    def __init__(self, spec, P, nu, times, points: int, o: Options, odd):
        self.spec, self.P, self.nu, self.times, self.points, self.o, self.odd = spec, P, nu, times, points, o, odd
        self.R = int(o.noise_realisations) if o.noisy else 1
        self.antithetic = o.noisy and bool(o.noise_antithetic)
        self.nseed = int(o.seed if o.noise_seed is None else o.noise_seed)

    def __call__(self, n: int, want_spectra: bool):
        """(the mean over the realisations of their path means, realisation 0's spectra, the evaluations, the
        noise information of realisation 0's paths, the standard error over the realisations)."""
        o = self.o
        seeds = [o.seed + r for r in range(o.rotations) for _ in range(self.R)]
        with blas_threads(n):
            if o.noisy:
                rngs, signs = [], []
                for r in range(o.rotations):
                    for j in range(self.R):
                        jj, sg = (j // 2, (-1.0) ** j) if self.antithetic else (j, 1.0)
                        rngs.append(np.random.default_rng(np.random.SeedSequence([self.nseed + r, int(n), jj, 0x5eed])))
                        signs.append(sg)
                tab, sp_, nev, steps = integrate_noisy(self.spec, self.P, self.nu, n, seeds, self.times, o.epsilon,
                                                       rngs, o.noise_dt, spectra=want_spectra, signs=signs,
                                                       init=o.init, odd=self.odd, land=want_spectra)
            else:
                tab, sp_, nev = integrate_deterministic(self.spec, self.P, n, seeds, self.times, o.method, o.rtol,
                                                        o.atol, spectra=want_spectra, init=o.init, odd=self.odd)
                steps = 0
        if self.points == 1:
            tab, sp_ = {c: v[..., -1:] for c, v in tab.items()}, {k: v[-1:] for k, v in sp_.items()}
        return (*self._means(tab), sp_, nev, steps // o.rotations)

    def _means(self, tab):
        """(means, standard errors over the realisations, the noise paths' standard errors of realisation 0)."""
        rotations = self.o.rotations
        mean, sem, noise_sem = {}, {}, {}
        for c, v in tab.items():
            if c == "time":
                mean[c], sem[c] = v, np.zeros_like(v)
                continue
            v = v.reshape(rotations, self.R, -1)
            if self.o.noisy:
                paths = 0.5 * (v[0, 0::2] + v[0, 1::2]) if self.antithetic else v[0]
                m = paths.shape[0]
                noise_sem[c] = paths.std(axis=0, ddof=1) / math.sqrt(m) if m > 1 else np.full(paths.shape[1], np.nan)
            per_realisation = v.mean(axis=1)
            mean[c] = per_realisation.mean(axis=0)
            sem[c] = (per_realisation.std(axis=0, ddof=1) / math.sqrt(rotations) if rotations > 1
                      else np.zeros(per_realisation.shape[1]))
        return mean, sem, noise_sem


def solve_spectral(spec, time: float = 1.0, points: int = 51, potential=None, options: Options | None = None,
                   **kw) -> SpectralResult:
    """Integrate the d → ∞ flow at matrix level on size-N realisations (``Options`` fields as keywords, or
    ``options``).

    Returns the theory columns (``time`` = package time nα/d, ``tr_a``, ``q_a_b``, ``p_a_b``,
    ``loss``; for uncentred indices ``m_a``, ``trA_a``, ``trB_a``; for non-symmetric pairs ``q1_…``,
    ``q2_…`` and ``overlap_…``), with ``error_estimate`` also ``<col>_err`` (below), and
    ``spectra``: student name → (points × N) sorted eigenvalues (of the symmetric part); ``spectra=False``
    records none (and lets a noise path's steps pass over the output times). Raises
    NumericalFailure(message, time) on divergence.

    ``rotations`` = R: the columns are the mean over R independent realisations of the initial laws
    (seeds ``seed`` … ``seed + R − 1``: their own rotations and noise streams), ``info['rotation_sem']``
    its standard error. ``<col>_err``: from the same R realisations at N/2 (``estimate``).
    The random O(1/N) error of one realisation's rotations is as large as the systematic one (README
    example: seed-to-seed spread of q_student_teacher 0.005 at N = 128, systematic shift from N = 128
    to 512 0.002), which is why the default ``theory`` averages 4 realisations at N = 128 (docs/theory.md §7).

    ``extrapolate``: the columns are the 1/N extrapolation 2m(N) − m(N/2) (Richardson; it removes
    the systematic O(1/N) error of the quantile spectra but doubles the random one of the rotations).
    ``init="sample"``: start from the matrices ``simulate`` draws at d = ``size`` for ``seed`` (no N/2 run: the
    columns then carry no ``_err``), the frozen means at their sampled values √d tr M.

    ``epsilon`` (noise ratio ε = αd/B; None or 0: the deterministic flow of SciPy's ``method`` at ``rtol``/``atol``)
    adds the O(ε) SGD noise (``noise``, ``stochastic``: error control at rtol 1e-4, below the O(1/N) noise spread;
    a step never longer than 0.01/(εν_max) nor ``noise_dt`` when given), from the noise stream ``noise_seed``
    (default ``seed``). ``noise_realisations`` = R independent noise paths on the same initial matrices are
    averaged (spectra: the first path); ``info['noise_sem']``: column → standard error of that mean (NaN for
    R = 1). With ``noise_antithetic`` (R even) the paths come in pairs driven by ±dΞ, which cancels the leading
    O(√dt/N)-per-step fluctuation of the mean. The N/2 error estimate uses its own R paths, so ``<col>_err`` then
    also contains the O(1/(N√R)) noise spread."""
    from ..codegen.potential import compiled_potential

    spec = require_spec(spec, "solve_spectral")
    o = dataclasses.replace(options or Options(), **kw).checked(time, points)
    P = potential if potential is not None else compiled_potential(spec)
    times = output_times(time, points)
    # teachers the students do not see at zero overlap: realised odd (exactly on the invariant set)
    odd = decoupled_teachers(spec, P) if o.init == "free" and o.size % 2 == 0 else []
    nu = getattr(P, "nu", None) if o.noisy else None
    if o.noisy and not nu:                      # a Python potential: its ν derived here
        from ..derivation.noise import nu_expectations
        nu = nu_expectations(P)
    run = _Batch(spec, P, nu, times, points, o, odd)
    table, sem, noise_sem, spectra, nev, steps = run(o.size, o.spectra)
    info = {"rhs_evaluations": nev, "method": o.method, "rtol": o.rtol, "init": o.init, "extrapolated": False,
            "decoupled": [spec.names[k] for k in odd], "rotations": o.rotations}
    if o.rotations > 1:
        info["rotation_sem"] = sem
    if o.noisy:
        info.update({"method": "adaptive Bogacki-Shampine / Cash-Karp drift + noise maps (Strang order)", "rtol": 1e-4,
                     "epsilon": o.epsilon, "noise_seed": run.nseed, "noise_dt": o.noise_dt,
                     "noise_realisations": run.R, "noise_antithetic": bool(o.noise_antithetic),
                     "noise_steps": steps, "noise_sem": noise_sem})
    if o.error_estimate or o.extrapolate:
        nhalf = half_size(o.size)
        half, sem_half, _, _, nev2, _ = run(nhalf, False)
        add_errors(table, half, sem, sem_half, o.size, nhalf, spec.features.convergence_order, o.rotations,
                   o.extrapolate)
        info.update({"rhs_evaluations_half": nev2, "size_half": nhalf, "extrapolated": bool(o.extrapolate)})
    return SpectralResult(table=table, spectra=spectra, size=o.size, seed=o.seed, spec_name=spec.name, info=info)
