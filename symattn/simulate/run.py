"""``simulate``: online SGD over seeds, measurements, averages and CSV (THEORY.md §3, INTERFACE.md).

Seed s uses ``rng = np.random.default_rng(s)``: ``draw_initial`` first, then one batch per step
from the same stream; the test loss draws from the separate stream ``default_rng([s, 7919])``.
Seeds run in a fork-based process pool; every seed's computation is the same as in a sequential
run, so the tables are identical.
"""
from __future__ import annotations

import ctypes
import glob
import math
import multiprocessing as mp
import os
import sys
import time as _time
from dataclasses import dataclass, field

import numpy as np

from ..errors import NumericalFailure
from ..spec import Spec, SpecError, load_spec
from ..symbolic.loss import build_loss
from .init import draw_initial
from .measure import column_names, order_parameters, student_spectra, test_loss
from .sgd import Model

TEST_STREAM = 7919          # second entropy word of the test-loss stream
CHECK_EVERY = 100           # steps between cheap divergence checks
BOUND = 1e8                 # Tr S²/d beyond this counts as divergence


@dataclass
class SimulationResult:
    """Seed-averaged table (``table[col]``, with ``<col>_sem``) and raw ``per_seed[col]`` (seeds, points).

    ``spectra`` (only with ``simulate(..., spectra=True)``, else empty): student name → array
    (seeds, points, d) of the sorted eigenvalues of that student's S at every measurement time."""

    spec: Spec
    dim: int
    seeds: list
    alpha: float
    steps: np.ndarray
    columns: list
    table: dict
    per_seed: dict
    info: dict = field(default_factory=dict)
    spectra: dict = field(default_factory=dict)

    def to_csv(self, path) -> None:
        """Header of column names, one row per time point."""
        data = np.column_stack([self.table[c] for c in self.columns])
        with open(path, "w") as fh:
            fh.write(",".join(self.columns) + "\n")
            for row in data:
                fh.write(",".join(repr(float(v)) for v in row) + "\n")

    def __getitem__(self, col):
        return self.table[col]


# ---------------------------------------------------------------------------- helpers
def _check(cond, option, msg):
    if not cond:
        raise SpecError(f"{option}: {msg}")


def _int(value, option, low):
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low
    _check(ok, option, f"must be a whole number >= {low}, got {value!r}")
    return int(value)


def _openblas():
    """ctypes handles (set, get) of numpy's OpenBLAS thread control, or (None, None)."""
    import numpy
    for lib in glob.glob(os.path.join(os.path.dirname(numpy.__file__), "..", "numpy.libs", "*openblas*")):
        try:
            h = ctypes.CDLL(lib)
        except OSError:
            continue
        for pre in ("scipy_openblas", "openblas"):
            for suf in ("64_", ""):
                st, gt = getattr(h, f"{pre}_set_num_threads{suf}", None), getattr(h, f"{pre}_get_num_threads{suf}", None)
                if st is not None and gt is not None:
                    gt.restype = ctypes.c_int
                    return st, gt
    return None, None


def _blas_threads(n: int | None) -> int | None:
    """Best effort: set the number of OpenBLAS threads; returns the previous number (None if unknown)."""
    st, gt = _openblas()
    if st is None or n is None:
        return None
    old = int(gt())
    st(ctypes.c_int(int(n)))
    return old


class _Progress:
    """Text progress bar on stderr, shown only once a run has lasted > ``delay`` s; ≤ 4 updates/s."""

    def __init__(self, total: int, enabled: bool, delay: float = 2.0):
        self.total, self.enabled, self.delay = max(total, 1), enabled, delay
        self.t0 = self.last = _time.monotonic()
        self.shown = False

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = _time.monotonic()
        if now - self.t0 < self.delay or now - self.last < 0.25:
            return
        self.last, self.shown = now, True
        f = min(done / self.total, 1.0)
        el = now - self.t0
        left = el * (1 - f) / f if f > 0 else float("nan")
        bar = "#" * int(30 * f) + "." * (30 - int(30 * f))
        sys.stderr.write(f"\rsimulate [{bar}] {100 * f:5.1f}%  {el:6.1f} s, ~{left:6.1f} s left ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


# ---------------------------------------------------------------------------- one seed
_JOB: dict = {}


def _divergence(n, model, what):
    t = n * model.alpha / model.d
    which = "training.learning_rate" if model.spec.learning_rate is not None else "training.noise_ratio"
    return NumericalFailure(
        f"SGD diverged at step n = {n} (time = {t:.6g}): {what}; try a smaller {which}", time=t)


def run_seed(seed: int, job: dict | None = None, report=None) -> dict:
    """Simulate one seed; returns {column: array over measurement points}. Raises NumericalFailure."""
    job = job or _JOB
    spec, d = job["spec"], job["dim"]
    model = Model(spec, d, loss_grad=job["loss_grad"])
    rng = np.random.default_rng(seed)
    model.set_state(draw_initial(spec, d, rng))
    trng = np.random.default_rng([seed, TEST_STREAM])
    pot, names = job["potential"], job["potential_names"]
    rows, n, pending = [], 0, 0
    want_spectra = bool(job.get("spectra"))
    eigs = {spec.names[k]: [] for k in spec.students} if want_spectra else {}
    with np.errstate(all="ignore"):
        for target in job["steps"]:
            while n < target:
                X, xi = model.sample(rng)
                loss = model.step(X, xi)
                n += 1
                pending += 1
                if not math.isfinite(loss):
                    raise _divergence(n, model, f"batch loss {loss}")
                if n % CHECK_EVERY == 0:
                    b = model.norm_bound()
                    if not math.isfinite(b):
                        raise _divergence(n, model, "non-finite parameters")
                    if report is not None:
                        report(pending)
                        pending = 0
            row = order_parameters(spec, model.state, d)
            bad = [c for c, v in row.items() if not math.isfinite(v)]
            big = [c for c, v in row.items() if c.startswith("q") and abs(v) > BOUND]
            if bad or big:
                raise _divergence(n, model, f"{(bad or big)[0]} = {row[(bad or big)[0]]:.3g}")
            row["loss"] = float(pot.value({k: row[k] for k in names})) if pot is not None else float("nan")
            row["test_loss"] = test_loss(model, trng, job["test_samples"]) if job["test_samples"] else float("nan")
            rows.append(row)
            if want_spectra:
                for name, ev in student_spectra(spec, model.state, d).items():
                    eigs[name].append(ev)
    if report is not None and pending:
        report(pending)
    out = {c: np.array([r[c] for r in rows]) for c in rows[0]}
    for name, evs in eigs.items():           # not a column: kept apart by the "spectra:" prefix
        out[f"spectra:{name}"] = np.array(evs)
    return out


def _worker_init(threads):
    _blas_threads(threads)


def _worker(seed):
    counter = _JOB["counter"]

    def report(k):
        with counter.get_lock():
            counter.value += k

    try:
        return seed, run_seed(seed, report=report), None
    except NumericalFailure as exc:
        return seed, None, (str(exc), exc.time)


# ---------------------------------------------------------------------------- driver
def simulate(spec, dim, seeds=1, time=1.0, points=21, *, seed0=0, workers=None, progress=True,
             test_samples=4096, potential=True, blas_threads=1, spectra=False) -> SimulationResult:
    """Online SGD of ``spec`` at dimension ``dim`` for seeds seed0..seed0+seeds−1, measured at
    ``points`` times equally spaced on [0, time] (package time nα/d, snapped to whole steps).

    ``workers`` processes (default min(seeds, cores)) each run whole seeds with ``blas_threads``
    OpenBLAS threads (default 1 in every process, sequential runs included: the tables are then
    bit-identical whatever ``workers`` is, and a loaded machine does not stall on BLAS spin-waits).
    ``test_samples`` fresh samples per point for ``test_loss`` (0: NaN); ``potential=False`` skips Φ.
    ``spectra=True`` also records the sorted eigenvalues of every student's S at every measurement
    time (tied: squared singular values of W; direct: eigvalsh of S; untied: of (S + S^T)/2) as
    ``result.spectra[name]``, shape (seeds, points, d); it does not change the SGD trajectories."""
    spec = load_spec(spec)
    dim = _int(dim, "--dim", 1)
    seeds = _int(seeds, "--seeds", 1)
    points = _int(points, "--points", 1)
    seed0 = _int(seed0, "--seed0", 0)
    _check(isinstance(time, (int, float)) and not isinstance(time, bool) and math.isfinite(time) and time >= 0,
           "--time", f"must be a finite number >= 0, got {time!r}")
    if workers is None:
        workers = min(seeds, os.cpu_count() or 1)
    workers = min(_int(workers, "--workers", 1), seeds)
    test_samples = _int(test_samples, "test_samples", 0)
    alpha = spec.step_size(dim)
    if not alpha > 0:
        raise SpecError(f"{spec.source}: training.noise_ratio: ε = 0 gives a zero SGD step; "
                        f"the simulation needs ε > 0")
    n_total = int(round(time * dim / alpha))
    steps = np.rint(np.linspace(0, n_total, points)).astype(np.int64)

    pot = names = None
    if potential:
        from ..derive.potential import Potential
        pot = Potential(spec)
        names = pot.names
        # calibrate the quadrature once, at seed0's initial order parameters, so that every seed
        # (sequential or in a worker) evaluates Φ with the same rule
        init = order_parameters(spec, draw_initial(spec, dim, np.random.default_rng(seed0)), dim)
        pot.calibrate({k: init[k] for k in names})
    seed_list = list(range(seed0, seed0 + seeds))
    job = dict(spec=spec, dim=dim, loss_grad=build_loss(spec).compile_gradient(), steps=steps,
               potential=pot, potential_names=names, test_samples=test_samples, spectra=bool(spectra))
    bar = _Progress(n_total * seeds, progress)
    results, failures = {}, []
    old_threads = _blas_threads(blas_threads) if workers <= 1 else None
    try:
        if workers <= 1:
            done = [0]

            def report(k):
                done[0] += k
                bar.update(done[0])

            for s in seed_list:
                try:
                    results[s] = run_seed(s, job, report)
                except NumericalFailure as exc:
                    failures.append((s, str(exc), exc.time))
                    break
        else:
            ctx = mp.get_context("fork")
            job["counter"] = ctx.Value("q", 0)
            _JOB.clear()
            _JOB.update(job)
            with ctx.Pool(workers, initializer=_worker_init, initargs=(blas_threads,)) as pool:
                res = pool.map_async(_worker, seed_list, chunksize=1)
                while not res.ready():
                    res.wait(0.25)
                    bar.update(job["counter"].value)
                for s, r, err in res.get():
                    if err is not None:
                        failures.append((s, *err))
                    else:
                        results[s] = r
            _JOB.clear()
    finally:
        bar.close()
        if old_threads is not None:
            _blas_threads(old_threads)
    if failures:
        s, msg, t = min(failures)
        raise NumericalFailure(f"seed {s}: {msg}", time=t)

    meas = column_names(spec) + ["loss", "test_loss"]
    per_seed = {c: np.stack([results[s][c] for s in seed_list]) for c in meas}
    tgrid = steps * alpha / dim
    per_seed["time"] = np.broadcast_to(tgrid, (seeds, points)).copy()
    table = {"time": tgrid}
    for c in meas:
        table[c] = per_seed[c].mean(axis=0)
    for c in meas:
        table[f"{c}_sem"] = (per_seed[c].std(axis=0, ddof=1) / np.sqrt(seeds)) if seeds > 1 \
            else np.zeros(points)
    columns = ["time"] + meas + [f"{c}_sem" for c in meas]
    eig = {spec.names[k]: np.stack([results[s][f"spectra:{spec.names[k]}"] for s in seed_list])
           for k in spec.students} if spectra else {}
    return SimulationResult(spec=spec, dim=dim, seeds=seed_list, alpha=alpha, steps=steps, columns=columns,
                            table=table, per_seed=per_seed,
                            info={"steps_total": n_total, "workers": workers, "epsilon": alpha * dim / spec.batch_size},
                            spectra=eig)
