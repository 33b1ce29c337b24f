"""``simulate``: online SGD over seeds, measurements, averages and CSV (docs/theory.md §3, docs/interface.md).

A call is a plan (``simulation.plan``: arguments checked, cost estimated and refused past the limits, measurement
steps, Φ calibrated), run by one executor (``simulation.executors``: sequential, forked pool or torch; one seed's
loop is ``simulation.seed``), then tabulated here: seed means, their standard errors and the per-seed arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import NumericalFailure
from ..measure import column_names
from ..progress import Progress, note
from ..spec import Spec, load_spec
from ..threads import blas_limits
from .executors import executor_for
from .plan import MAX_FLOP, MAX_STEPS, estimate, plan_simulation
from .seed import BOUND, CHECK_EVERY, TEST_STREAM, run_seed

__all__ = ["simulate", "SimulationResult", "run_seed", "estimate", "plan_simulation", "MAX_STEPS", "MAX_FLOP",
           "CHECK_EVERY", "BOUND", "TEST_STREAM"]


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
    plan = plan_simulation(spec, dim, seeds, time, points, seed0=seed0, workers=workers, test_samples=test_samples,
                           potential=potential, blas_threads=blas_threads, spectra=spectra, backend=backend,
                           device=device, dtype=dtype, log_time=log_time)
    seed_list, n_total, est = plan.seeds, plan.n_total, plan.estimate
    bar = Progress(n_total * len(seed_list), "simulate", progress, unit="step")
    collected = {s: [] for s in seed_list}
    limits, blas = blas_limits(plan.blas_threads if plan.workers <= 1 else None)
    if progress:
        where = f"{backend} {dtype} on {device}" if backend != "numpy" else \
            f"numpy {dtype}, {plan.workers} process(es) × {plan.blas_threads} thread(s) of {blas.split(' (')[0]}"
        note(f"simulate {spec.name}: d = {plan.dim}, {len(seed_list)} seed(s) × {n_total} steps, "
             f"~{est['flop_per_step'] * n_total * len(seed_list) / 1e9:.3g} GFLOP, "
             f"~{est['bytes'] / 2**20:.0f} MiB per seed; {where}")
    try:
        results, failures = executor_for(plan, stream_rows=partial is not None).run(plan, bar, collected)
    except KeyboardInterrupt:
        if partial is not None:
            n_common = min(len(v) for v in collected.values())
            if n_common:
                rows = {s: {c: np.array([r[c] for r in v[:n_common]]) for c in v[0]} for s, v in collected.items()}
                partial["table"] = _tabulate(spec, rows, plan.times[:n_common])[0]
        raise
    finally:
        bar.close()
        limits.restore_original_limits()
    if failures:
        s, msg, t = min(failures)
        raise NumericalFailure(f"seed {s}: {msg}", time=t)

    table, per_seed, columns = _tabulate(spec, {s: results[s] for s in seed_list}, plan.times)
    eig = {spec.names[k]: np.stack([results[s][f"spectra:{spec.names[k]}"] for s in seed_list])
           for k in spec.students} if plan.spectra else {}
    return SimulationResult(spec=spec, dim=plan.dim, seeds=seed_list, alpha=plan.alpha, steps=plan.steps,
                            columns=columns, table=table, per_seed=per_seed,
                            info={"steps_total": n_total, "workers": 1 if backend == "torch" else plan.workers,
                                  "blas": blas,
                                  "backend": backend, "device": device, "dtype": dtype,
                                  "epsilon": plan.alpha * plan.dim / spec.batch_size},
                            spectra=eig)
