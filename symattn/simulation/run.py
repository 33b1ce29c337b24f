"""``simulate``: online SGD over seeds, measurements, averages and CSV (docs/theory.md §3, docs/interface.md).

Seed s at dimension d draws its initial matrices, its batches and its test samples from separate
streams derived from (s, d, purpose[, index]) through ``SeedSequence`` (``simulation.init``:
runs at different d are independent). Seeds run in a fork-based process pool; every seed's
computation is the same as in a sequential run, so the tables are identical.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import signal
from dataclasses import dataclass, field

import numpy as np

from ..errors import NumericalFailure, UsageError
from ..measure import column_names, order_parameters, student_spectra, test_loss
from ..progress import Progress, note
from ..spec import Spec, SpecError, load_spec
from ..symbolic.loss import build_loss
from .init import BATCHES, TEST, draw_initial, stream
from .sgd import Model

TEST_STREAM = TEST          # purpose word of the test-loss stream (simulation.init)
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
        """Header of column names, one row per time point (exact numbers; written atomically)."""
        from ..integration import write_csv
        write_csv({c: self.table[c] for c in self.columns}, path, digits=None)

    def __getitem__(self, col):
        return self.table[col]


# ---------------------------------------------------------------------------- helpers
def _check(cond, option, msg):
    if not cond:
        raise UsageError(f"{option}: {msg}")


def _int(value, option, low):
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low
    _check(ok, option, f"must be a whole number >= {low}, got {value!r}")
    return int(value)


def _blas_name() -> str:
    """The BLAS libraries threadpoolctl controls in this process, e.g. ``openblas (1 threads)``."""
    from threadpoolctl import threadpool_info
    libs = [f"{i.get('internal_api')} ({i.get('num_threads')} threads)" for i in threadpool_info()
            if i.get("user_api") == "blas"]
    return ", ".join(libs) or "no BLAS library found"


def _blas_limits(n: int | None):
    """threadpoolctl limit of the BLAS threads (a context manager) and the line naming the library."""
    from threadpoolctl import threadpool_limits
    limits = threadpool_limits(limits=n, user_api="blas")
    return limits, _blas_name()


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(spec, dim: int) -> dict:
    """Memory (bytes, one seed) and work (flop per SGD step) of one simulation, before allocating.

    The state F (d × factor columns, a dense d × d for direct), the batch X (B·L·d), its products
    P and Z (B·L × columns) and the gradient (d × trainable columns), float64."""
    d, B, L = int(dim), spec.batch_size, spec.tokens
    cols = train = dense = 0
    for ix in spec.indices:
        w = ix.kind.columns(ix, d)
        dense += ix.kind.dense_entries(d)
        cols += w
        train += w if ix.trainable else 0
    numbers = d * cols + B * L * d + B * L * (cols + train) + d * train + dense + B * L * L * spec.K * 4
    return {"bytes": 8 * numbers, "flop_per_step": 2.0 * B * L * d * (cols + train)}


MAX_STEPS = 1e9          # SGD steps per seed refused beyond (docs/interface.md, "Limits")
MAX_FLOP = 1e17          # total floating-point work of one simulate call refused beyond


# ---------------------------------------------------------------------------- one seed
_JOB: dict = {}


def _divergence(n, model, what):
    t = n * model.alpha / model.d
    which = "training.learning_rate" if model.spec.learning_rate is not None else "training.noise_ratio"
    return NumericalFailure(
        f"SGD diverged at step n = {n} (time = {t:.6g}): {what}; try a smaller {which}", time=t)


def run_seed(seed: int, job: dict | None = None, report=None, on_row=None) -> dict:
    """Simulate one seed; returns {column: array over measurement points}. Raises NumericalFailure.

    ``report(k)``: k more steps done; ``on_row(row)``: a measurement row is complete (partial output)."""
    job = job or _JOB
    spec, d = job["spec"], job["dim"]
    model = Model(spec, d, loss_grad=job["loss_grad"], dtype=job.get("dtype", np.float64))
    model.set_state(draw_initial(spec, d, seed))
    rng = stream(seed, d, BATCHES)
    trng = stream(seed, d, TEST)
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
            row = order_parameters(spec, _float64(model.state), d)
            bad = [c for c, v in row.items() if not math.isfinite(v)]
            big = [c for c, v in row.items() if c.startswith("q") and abs(v) > BOUND]
            if bad or big:
                raise _divergence(n, model, f"{(bad or big)[0]} = {row[(bad or big)[0]]:.3g}")
            row["loss"] = float(pot.value({k: row[k] for k in names})) if pot is not None else float("nan")
            row["test_loss"] = test_loss(model, trng, job["test_samples"]) if job["test_samples"] else float("nan")
            rows.append(row)
            if on_row is not None:
                on_row(row)
            if want_spectra:
                for name, ev in student_spectra(spec, model.state, d).items():
                    eigs[name].append(ev)
    if report is not None and pending:
        report(pending)
    out = {c: np.array([r[c] for r in rows]) for c in rows[0]}
    for name, evs in eigs.items():           # not a column: kept apart by the "spectra:" prefix
        out[f"spectra:{name}"] = np.array(evs)
    return out


def _float64(state: list) -> list:
    """The state with float64 factors (traces are accumulated in float64 whatever the step's dtype)."""
    if all(v.dtype == np.float64 for s in state for v in s.values()):
        return state
    return [{k: np.asarray(v, dtype=np.float64) for k, v in s.items()} for s in state]


def _worker_init(threads):
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent handles Ctrl-C and ends the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _blas_limits(threads)


def _worker(seed):
    counter, rows = _JOB["counter"], _JOB.get("rows")

    def report(k):
        with counter.get_lock():
            counter.value += k

    on_row = None if rows is None else (lambda row: rows.put((seed, row)))
    try:
        return seed, run_seed(seed, report=report, on_row=on_row), None
    except NumericalFailure as exc:
        return seed, None, (str(exc), exc.time)


def _tabulate(spec, seed_rows: dict, tgrid: np.ndarray):
    """(table with means and ``_sem``, per-seed arrays, columns) from {seed: {column: array}}."""
    seeds = len(seed_rows)
    meas = column_names(spec) + ["loss", "test_loss"]
    per_seed = {c: np.stack([r[c] for r in seed_rows.values()]) for c in meas}
    per_seed["time"] = np.broadcast_to(tgrid, (seeds, len(tgrid))).copy()
    table = {"time": tgrid}
    for c in meas:
        table[c] = per_seed[c].mean(axis=0)
    for c in meas:
        table[f"{c}_sem"] = (per_seed[c].std(axis=0, ddof=1) / np.sqrt(seeds)) if seeds > 1 \
            else np.zeros(len(tgrid))
    return table, per_seed, ["time"] + meas + [f"{c}_sem" for c in meas]


# ---------------------------------------------------------------------------- driver
def simulate(spec, dim, seeds=1, time=1.0, points=21, *, seed0=0, workers=None, progress=True,
             test_samples=4096, potential=True, blas_threads=1, spectra=False,
             partial: dict | None = None, backend: str = "numpy", device: str = "cpu",
             dtype: str = "float64", log_time: bool = False) -> SimulationResult:
    """Online SGD of ``spec`` at dimension ``dim`` for seeds seed0..seed0+seeds−1, measured at
    ``points`` times equally spaced on [0, time] (package time nα/d, snapped to whole steps), or
    with ``log_time`` at 0 and points − 1 log-spaced times from max(one step, time/1000) to time.

    ``workers`` processes (default min(seeds, cores)) each run whole seeds with ``blas_threads``
    BLAS threads (threadpoolctl; default 1 in every process, sequential runs included: the tables
    are then bit-identical whatever ``workers`` is, and a loaded machine does not stall on BLAS
    spin-waits). ``test_samples`` fresh samples per point for ``test_loss`` (0: NaN);
    ``potential=False`` skips Φ. ``spectra=True`` also records the sorted eigenvalues of every
    student's S at every measurement time (tied: squared singular values of W; direct: eigvalsh of
    S; untied: of (S + S^T)/2) as ``result.spectra[name]``, shape (seeds, points, d); it does not
    change the SGD trajectories. ``partial``: a dict that, when the run is interrupted
    (KeyboardInterrupt, re-raised), receives ``table`` — the time points every seed finished.

    ``backend``: "numpy" (default; seed s draws its initial matrices, batches and test samples
    from the streams of ``simulation.init.stream(s, dim, ...)``) or "torch" (every seed in one leading array axis on ``device``, "cpu" or
    "cuda[:N]"; seed s starts from the same matrices as with NumPy, batches come from a torch
    stream, see ``simulate.torch_backend``). ``dtype``: "float64" or "float32" for the SGD step
    (both backends); traces and order parameters are accumulated in float64 either way.

    Sizes are checked before anything is allocated: a run needing more than 80% of this machine's
    memory, a horizon shorter than one step, or more points than steps raise UsageError."""
    spec = load_spec(spec)
    dim = _int(dim, "dim", 1)
    seeds = _int(seeds, "seeds", 1)
    points = _int(points, "points", 1)
    seed0 = _int(seed0, "seed0", 0)
    _check(isinstance(time, (int, float)) and not isinstance(time, bool) and math.isfinite(time) and time >= 0,
           "time", f"must be a finite number >= 0, got {time!r}")
    if workers is None:
        workers = min(seeds, os.cpu_count() or 1)
    workers = min(_int(workers, "workers", 1), seeds)
    test_samples = _int(test_samples, "test_samples", 0)
    _check(backend in ("numpy", "torch", "jax"), "backend", f"expected numpy or torch, got {backend!r}")
    _check(dtype in ("float64", "float32"), "dtype", f"expected float64 or float32, got {dtype!r}")
    _check(isinstance(device, str) and (device == "cpu" or device.startswith("cuda")), "device",
           f"expected cpu or cuda[:N], got {device!r}")
    if backend == "jax":
        raise UsageError("backend jax: not available in this version; use backend torch "
                         "(pip install 'symattn[torch]')")
    if backend == "numpy" and device != "cpu":
        raise UsageError(f"device {device}: the numpy backend runs on the CPU; use backend torch for a GPU")
    if backend == "torch":
        from .torch_backend import import_torch
        torch = import_torch()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError(f"device {device}: no CUDA device is available to PyTorch here")
        if spectra:
            raise UsageError("spectra: recorded by the numpy backend only")
    alpha = spec.step_size(dim)
    if not alpha > 0:
        raise SpecError(f"{spec.source}: training.noise_ratio: ε = 0 gives a zero SGD step; "
                        f"the simulation needs ε > 0")
    est = estimate(spec, dim)
    mem = _physical_memory()
    if mem and est["bytes"] * workers > 0.8 * mem:
        raise UsageError(f"dim {dim}: the simulation needs ~{est['bytes'] * workers / 2**30:.3g} GiB "
                         f"({workers} worker(s)), more than 80% of this machine's {mem / 2**30:.0f} GiB; "
                         f"use a smaller dim, training.batch_size or width")
    steps_real = time * dim / alpha
    if not steps_real <= MAX_STEPS:                         # learning_rate = 1e-300: 1e302 steps
        which = "training.learning_rate" if spec.learning_rate is not None else "training.noise_ratio"
        raise UsageError(f"time {time:g}: needs {steps_real:.3g} SGD steps per seed at α = {alpha:.3g} (at most "
                         f"{MAX_STEPS:.0e}, docs/interface.md); use a shorter time or a larger {which}")
    if seeds * steps_real * est["flop_per_step"] > MAX_FLOP:
        raise UsageError(f"seeds {seeds}: {seeds} × {steps_real:.3g} steps of ~{est['flop_per_step']:.2g} FLOP is "
                         f"~{seeds * steps_real * est['flop_per_step']:.2g} FLOP, beyond the limit of {MAX_FLOP:.0e} "
                         f"(days on a workstation; docs/interface.md); use fewer seeds, a smaller dim or time")
    n_total = int(round(steps_real))
    if time > 0 and n_total == 0:
        raise UsageError(f"time {time:g}: shorter than one SGD step (one step is nα/d = {alpha / dim:.3g}); "
                         f"use a longer time or a smaller step")
    if points > n_total + 1:
        raise UsageError(f"points {points}: only {n_total} SGD steps up to time {time:g}, so at most "
                         f"{n_total + 1} distinct times; use fewer points or a longer time")
    if log_time:                        # 0, then log-spaced whole steps from max(1, n/1000) to n
        from ..integration import time_grid
        steps = np.rint(time_grid(n_total, points, True, first=max(1.0, n_total * 1e-3))).astype(np.int64)
        if len(np.unique(steps)) < points:
            raise UsageError(f"points {points}: {n_total} SGD steps are too few for {points} distinct "
                             f"log-spaced times; use fewer points or a longer time")
    else:
        steps = np.rint(np.linspace(0, n_total, points)).astype(np.int64)

    pot = names = None
    if potential:
        from ..derivation.potential import Potential
        pot = Potential(spec)
        names = pot.names
        # calibrate the quadrature once, at seed0's initial order parameters, so that every seed
        # (sequential or in a worker) evaluates Φ with the same rule
        init = order_parameters(spec, draw_initial(spec, dim, seed0), dim)
        pot.calibrate({k: init[k] for k in names})
    seed_list = list(range(seed0, seed0 + seeds))
    job = dict(spec=spec, dim=dim, steps=steps,
               loss_grad=build_loss(spec).compile_gradient() if backend == "numpy" else None,
               potential=pot, potential_names=names, test_samples=test_samples, spectra=bool(spectra),
               dtype=np.dtype(dtype))
    tgrid = steps * alpha / dim
    bar = Progress(n_total * seeds, "simulate", progress, unit="step")
    results, failures = {}, []
    collected = {s: [] for s in seed_list}
    limits, blas = _blas_limits(blas_threads if workers <= 1 else None)
    if progress:
        where = f"{backend} {dtype} on {device}" if backend != "numpy" else \
            f"numpy {dtype}, {workers} process(es) × {blas_threads} thread(s) of {blas.split(' (')[0]}"
        note(f"simulate {spec.name}: d = {dim}, {seeds} seed(s) × {n_total} steps, "
             f"~{est['flop_per_step'] * n_total * seeds / 1e9:.3g} GFLOP, ~{est['bytes'] / 2**20:.0f} MiB per seed; "
             f"{where}")
    try:
        if backend == "torch":
            done = [0]

            def report_all(k):
                done[0] += k * seeds
                bar.update(done[0])

            def on_rows(rows):
                for s_, row in rows.items():
                    collected[s_].append(row)

            from .torch_backend import run_torch
            results = run_torch(spec, dim, seed_list, steps, device=device, dtype=dtype,
                                test_samples=test_samples, potential=pot, potential_names=names,
                                report=report_all, on_rows=on_rows, check_every=CHECK_EVERY, bound=BOUND,
                                test_stream=TEST_STREAM)
            workers = 1
        elif workers <= 1:
            done = [0]

            def report(k):
                done[0] += k
                bar.update(done[0])

            for s in seed_list:
                try:
                    results[s] = run_seed(s, job, report, on_row=collected[s].append)
                except NumericalFailure as exc:
                    failures.append((s, str(exc), exc.time))
                    break
        else:
            ctx = mp.get_context("fork")
            job["counter"] = ctx.Value("q", 0)
            if partial is not None:
                job["rows"] = ctx.Queue()
            _JOB.clear()
            _JOB.update(job)
            pool = ctx.Pool(workers, initializer=_worker_init, initargs=(blas_threads,))
            try:
                res = pool.map_async(_worker, seed_list, chunksize=1)
                while not res.ready():
                    res.wait(0.25)
                    bar.update(job["counter"].value)
                    _drain(job.get("rows"), collected)
                for s, r, err in res.get():
                    if err is not None:
                        failures.append((s, *err))
                    else:
                        results[s] = r
                pool.close()
            except BaseException:
                pool.terminate()
                _drain(job.get("rows"), collected)
                raise
            finally:
                pool.join()
                _JOB.clear()
    except KeyboardInterrupt:
        if partial is not None:
            n_common = min(len(v) for v in collected.values())
            if n_common:
                rows = {s: {c: np.array([r[c] for r in v[:n_common]]) for c in v[0]} for s, v in collected.items()}
                partial["table"] = _tabulate(spec, rows, tgrid[:n_common])[0]
        raise
    finally:
        bar.close()
        limits.restore_original_limits()
    if failures:
        s, msg, t = min(failures)
        raise NumericalFailure(f"seed {s}: {msg}", time=t)

    table, per_seed, columns = _tabulate(spec, {s: results[s] for s in seed_list}, tgrid)
    eig = {spec.names[k]: np.stack([results[s][f"spectra:{spec.names[k]}"] for s in seed_list])
           for k in spec.students} if spectra else {}
    return SimulationResult(spec=spec, dim=dim, seeds=seed_list, alpha=alpha, steps=steps, columns=columns,
                            table=table, per_seed=per_seed,
                            info={"steps_total": n_total, "workers": workers, "blas": blas,
                                  "backend": backend, "device": device, "dtype": dtype,
                                  "epsilon": alpha * dim / spec.batch_size},
                            spectra=eig)


def _drain(queue, collected: dict) -> None:
    """Move the rows the workers reported into ``collected`` (partial output)."""
    if queue is None:
        return
    import queue as _queue
    while True:
        try:
            s, row = queue.get_nowait()
        except (_queue.Empty, OSError, EOFError, ValueError):
            return
        collected[s].append(row)
