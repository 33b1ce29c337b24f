"""The noisy matrix-level flow (ε > 0): a stochastic integrator split the way diffrax splits one.

* the **terms** (:class:`StrangSplitting`): the drift (the vector field, ``field.Flow.rhs``) and the noise map
  (``noise.Noise``) composed in the symmetric (Strang) order — before a drift step the noise brings the noise clock
  to the step's midpoint, at a knot also to the step's end; ν at the state each map acts on (Itô);
* the **step-size controller** (:class:`Controller`): an embedded Runge–Kutta pair (``DRIFTS``) with error control
  at ``rtol`` and its growth rule, and the caps of a step — NOISE_STEP/(εν_max), SPLIT_STEP/(the relative speed of
  the trained parameters, each array's divided by its kind's ``split_degree``), ``dt_max`` and horizon/KNOTS;
* the **output policy** (:class:`Knots`): a step that reaches an output time lands on it (a knot) unless that would
  more than halve it; then it passes over it if the knots interpolate the outputs it passes to PASS_TOL, and its
  end is a knot. The output table holds the knots' values at the knots and cubics through the four nearest knots
  between them (``interpolation.at_times``; an O(h⁴) error of the mean path, far below its O(1/N) error,
  docs/theory.md §7): the steps follow the flow, not the output grid — 10 steps instead of 53 output-bound ones on
  the README example. With ``land`` every output time is a knot, where the eigenvalues are recorded.

:func:`integrate_noisy` runs them: one batch of noise paths (realisations × paths) with common steps.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import NumericalFailure
from ..stepping import BogackiShampine, CashKarp
from .deterministic import MIN_STEP
from .field import finite_start
from .interpolation import at_times, lagrange
from .noise import FLOAT32_RANGE, NOISY_DTYPE, Noise
from .realisation import start

NOISE_STEP = 0.01      # εν_max·dt per noise step: the kick's operator norm stays ≈ 2√0.01 = 0.2
SPLIT_STEP = 0.04      # relative change of the trained parameters per step; with the symmetric (Strang) order the O(ε)
                       # effect of tests/test_spectral_noise.py is the same (within 0.2 %) at 0.01, 0.02, 0.04
# The drift's embedded pair (symattn.stepping): Bogacki–Shampine 3(2) (four evaluations a step) while the caps bound
# its steps (the output knots, the noise and splitting caps), Cash–Karp 5(4) (six, 4th order, a stability interval
# 1.7× as long) from the first step it rejects or its error control shortens: where stability or accuracy bound the
# steps (the stiff tied h2 flow, long horizons) Cash–Karp takes fewer evaluations.
DRIFTS = (BogackiShampine, CashKarp)
KNOTS = 8              # a noise path's drift steps are at most horizon/KNOTS: its outputs are interpolated between ≥ 9 knots
PASS_TOL = 3e-3        # a step passes over output times only where the knots interpolate them to this (relative; a
                       # noise path's knots fluctuate by more than 1e-4, which would refuse nearly every pass)


class StrangSplitting:
    """The drift and the noise map of the flow's trained matrices, composed in the symmetric (Strang) order."""

    def __init__(self, flow, noise: Noise, schedule, N: int):
        self.flow, self.noise, self.schedule, self.N = flow, noise, schedule, N
        self.per_degree = np.concatenate([np.full(np.size(p), 1.0 / flow.spec.indices[k].kind.split_degree(flow.mats[k]))
                                          for k in flow.train for p in flow.mats[k].parts()])

    def rate(self, k1, y) -> float:
        """Relative speed of the trained parameters (an array of degree p in them changes p times as fast)."""
        return float(np.linalg.norm(k1 * self.per_degree)) / max(float(np.linalg.norm(y)), 1e-300)

    def kick(self, y, length: float, t_now: float, start: float | None = None):
        """(state after the noise map of the ``length`` time units from ``start`` (the noise clock), the noise step
        cap at the old state); ``length`` 0: the cap only. With a schedule the noise of the interval is ε₀ ∫ s²
        (docs/theory.md §3, "Schedules")."""
        flow, noise, sched = self.flow, self.noise, self.schedule
        th, _ = flow.theta(flow.unpack(y), t_now)                 # raises beyond BLOWUP
        Vs, Va = noise.nu_matrices(th)
        V = Vs + Va                                               # over the realisations:
        nu_max = max(float(np.max(np.abs(V if V.shape[-1] == 1 else np.linalg.eigvalsh(V)))), 1e-300)
        if length > 0:
            dt = length if sched.constant else length * sched.mean_square(start, start + length)
            flow.mats = noise.apply(flow.unpack(y), noise.increments(noise.factor(Vs), noise.factor(Va), dt, self.N))
            y = flow.pack()
        rate = 1.0 if sched.constant else max(float(sched(t_now)) ** 2, 1e-300)
        return y, NOISE_STEP / (noise.eps * nu_max * rate)


class Controller:
    """Step sizes of the drift: an embedded pair with error control (RMS of err/(atol + rtol·max(|y|, |y_new|)) ≤ 1),
    Bogacki–Shampine until the first rejection or error-bounded step, then Cash–Karp; the caps of a step."""

    def __init__(self, rtol: float, atol: float, size: int, dtype, h_max: float):
        self.rtol, self.atol, self.h_max = rtol, atol, h_max
        self.method = DRIFTS[0]
        self.stages = np.empty((max(len(m.B) for m in DRIFTS), size), dtype=dtype)
        self.cap = np.inf

    def set_cap(self, noise_cap: float, rate: float) -> None:
        """The longest next step: the noise cap, the splitting cap at the parameters' relative speed, h_max."""
        self.cap = min(noise_cap, SPLIT_STEP / max(rate, 1e-300), self.h_max)

    def attempt(self, rhs, t: float, y, h: float, k1):
        """One error-controlled drift step from (t, y) (k1 = rhs(t, y)), shortened until accepted: (y_new, error
        norm, h taken, the pair that took it)."""
        while True:
            method = self.method
            with np.errstate(over="ignore", invalid="ignore"):
                y_new, err = method.step(rhs, t, y, h, k1, self.stages)
                scale = np.abs(y)
                np.maximum(scale, np.abs(y_new), out=scale)
                scale *= self.rtol
                scale += self.atol
                np.divide(err, scale, out=scale)
                e = math.sqrt(float(np.dot(scale, scale)) / scale.size)
            if np.isfinite(e) and e <= 1.0:
                return y_new, e, h, method
            self.method = DRIFTS[-1]                     # a rejection: the pair with the longer stability interval
            h *= 0.2 if not np.isfinite(e) else max(0.2, 0.9 * e ** (-1.0 / method.error_order))
            if not h >= MIN_STEP * max(1.0, t):                 # (NaN-safe: a NaN step is an underflow too)
                raise NumericalFailure(f"spectral flow: step size underflow at time {t:.6g} (the vector field is "
                                       f"not finite or too fast to follow there)", t)

    def next(self, h: float, e: float, method, h_free: float, cut: bool) -> float:
        """The next step after an accepted one of length h and error norm e; ``cut``: h was shortened to reach an
        output time, not by the error control (then the next is not shrunk)."""
        grow = 0.9 * e ** (-1.0 / method.error_order) if e > 0 else np.inf
        h *= min(5.0, grow)
        if cut:
            h = max(h, h_free)
        if grow < 5.0 and h < self.cap:     # the error control, not a cap, bounds the steps: the higher-order pair
            self.method = DRIFTS[-1]
        return h


class Knots:
    """The output policy: the knots (complete states of the path, recorded), the decision to land on an output time
    or pass over it, and the output table interpolated from the knots."""

    def __init__(self, flow, times, spectra: bool, land: bool):
        self.flow, self.times, self.spectra, self.land = flow, times, spectra, land
        self.knots, self.rows = [], []
        self.spectra_rows = {flow.spec.names[k]: [] for k in flow.spec.students}
        self._outputs = iter(times)
        self.next_out = next(self._outputs)

    def record(self, y, t: float) -> None:
        """A knot at (t, y); the output times it reaches are done (their eigenvalues recorded)."""
        row, sp_ = self.flow.observe(y, t, spectra=self.spectra)
        self.knots.append(t)
        self.rows.append(row)
        while self.next_out is not None and self.next_out <= t + 1e-12 * max(1.0, abs(t)):
            if self.spectra:
                for n, ev in sp_.items():
                    self.spectra_rows[n].append(ev)
            self.next_out = next(self._outputs, None)

    def lands(self, h: float, to_out: float) -> bool:
        """Whether a step of length h lands on the output time ``to_out`` ahead: it reaches it, and landing would
        not more than halve it (or every output time is a knot)."""
        return to_out <= h and (self.land or h <= 2.0 * to_out)

    def interpolable(self, y1, t1: float) -> bool:
        """Whether the knots interpolate the outputs a step to t1 passes over: the cubic through the last three knots
        and the step's end and the quadratic through the last two and the end differ there by at most PASS_TOL of
        each column's scale (with fewer than three knots: no; the step lands). The columns are the means over the
        batch: what the outputs report."""
        knots, rows = self.knots, self.rows
        if len(knots) < 3:
            return False
        row, _ = self.flow.observe(y1, t1, spectra=False)
        cols = [c for c in row if c != "time"]
        x = np.array(knots[-3:] + [t1])
        v = np.array([[np.mean(r[c]) for c in cols] for r in rows[-3:]] + [[np.mean(row[c]) for c in cols]])
        inside = np.array([o for o in self.times if x[2] < o < t1])
        cubic, quad = lagrange(x, v, inside), lagrange(x[1:], v[1:], inside)
        scale = np.maximum(np.max(np.abs(v), axis=0), 1e-3)
        return bool(np.all(np.abs(cubic - quad) <= PASS_TOL * scale))

    def table(self):
        """(column → (R, outputs) values at the output times, student → its recorded eigenvalues)."""
        knots, out_t = np.array(self.knots), np.array(self.times)
        table = {"time": out_t}
        for c in self.rows[0]:
            if c != "time":
                vals = np.array([r[c] for r in self.rows])                  # (knots, R)
                table[c] = at_times(knots, vals, out_t).T
        return table, {n: np.array(v) for n, v in self.spectra_rows.items()}


def integrate_noisy(spec, P, nu, N, seeds, times, epsilon, rngs, dt_max, spectra=True, signs=None, init="free",
                    rtol=1e-4, odd=(), land=None):
    """Noise paths of the stochastic flow, one per entry of ``seeds`` (its initial realisation) and ``rngs`` (its
    noise stream; ``signs``: ±1 each, antithetic pairs), integrated as one batch with common steps (module
    docstring; ``land`` defaults to ``spectra``: all paths of a run alike). Returns (table, spectra, evaluations,
    steps)."""
    land = spectra if land is None else land
    flow = start(spec, P, N, seeds, init, odd)
    big = max((float(np.max(np.abs(p))) for k in flow.train for p in flow.mats[k].parts()), default=1.0)
    if FLOAT32_RANGE[0] <= big <= FLOAT32_RANGE[1]:     # else products of the matrices under/overflow in float32
        flow.to_dtype(NOISY_DTYPE)
    noise = Noise(flow, nu, epsilon, rngs, signs)
    theta0 = flow.theta(flow.mats, 0.0)[0][0]
    for E in nu.values():                  # non-polynomial ν: quadrature order chosen at the start
        if E.has_quadrature and E.order is None:
            E.calibrate(dict(zip(P.names, theta0)))
    times = [float(t) for t in times]
    knots = Knots(flow, times, spectra, land)
    y = flow.pack()
    t, T = times[0], times[-1]
    atol = rtol * 1e-2 * max(float(np.sqrt(np.mean(y ** 2))), 1e-300)
    terms = StrangSplitting(flow, noise, spec.schedule, N)
    knots.record(y, t)
    ctl = Controller(rtol, atol, y.size, y.dtype, min(dt_max or np.inf, (T - t) / KNOTS) if T > t else np.inf)
    steps, s = 0, t                           # s: the noise clock (≥ t; ahead only after a rejected step)
    finite_start(flow, t, y)
    k1 = flow.rhs(t, y)
    _, noise_cap = terms.kick(y, 0.0, t)
    ctl.set_cap(noise_cap, terms.rate(k1, y))
    h = min(ctl.cap, 1e-2 * (T - t) + 1e-3 * ctl.cap)
    tiny = 1e-12 * max(1.0, abs(T))
    floor = MIN_STEP * max(1.0, abs(T))
    while t < T - tiny:
        h_free = min(h, ctl.cap)
        if not h_free >= floor:                 # a step that cannot move t (or NaN): the flow is too fast to follow
            raise NumericalFailure(f"spectral flow: the step would be {h_free:.2g} at time {t:.6g} (the noise, the "
                                   f"parameters' speed or the error control allow no more): the flow is too fast to "
                                   f"integrate — Φ's gradient is too large or the state has left the stable range", t)
        h = min(h_free, T - t)
        to_out = knots.next_out - t if knots.next_out is not None else np.inf
        if knots.lands(h, to_out):
            h = to_out
        if t + 0.5 * h > s:                                    # noise up to the step's midpoint
            y, noise_cap = terms.kick(y, t + 0.5 * h - s, t, s)
            s = t + 0.5 * h
        k1 = flow.rhs(t, y)
        while True:
            h_try = h
            y_new, e, h, method = ctl.attempt(flow.rhs, t, y, h, k1)
            if h <= to_out + tiny or knots.interpolable(y_new, t + h):
                break
            h = to_out                                             # too fast to interpolate: land
        cut = h_try < h_free and h == h_try        # shortened to reach an output time or T, not by the error control
        flow.check(y_new, t + h)
        rate = terms.rate(k1, y)
        y, t = y_new, t + h
        if t >= T - tiny:
            t = T
        if t == T or t >= knots.next_out - tiny or h > to_out:          # a knot: complete the state, record it
            if s < t:                                          # the step's second half noise
                y, noise_cap = terms.kick(y, t - s, t, s)
                s = t
            flow.mats = flow.unpack(y)
            knots.record(y, t)
        ctl.set_cap(noise_cap, rate)
        steps += 1
        h = ctl.next(h, e, method, h_free, cut)
    table, spectra_rows = knots.table()
    return table, spectra_rows, flow.nevals * flow.R, steps * flow.R
