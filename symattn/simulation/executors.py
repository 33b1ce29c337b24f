"""How a simulation :class:`~symattn.simulation.plan.Plan` runs: one executor per strategy, one interface.

``Executor.run(plan, progress, collected)`` returns ({seed: {column: array}}, [(seed, message, time) of the seeds
that diverged]) and appends every finished measurement row to ``collected[seed]`` as it comes (the partial output
of an interrupted run). ``Sequential``: the seeds one after the other in this process (the first divergence ends
the run). ``ForkPool``: whole seeds in forked worker processes, each with ``plan.blas_threads`` BLAS threads (the
tables are identical to a sequential run). ``Torch``: every seed in one leading array axis on the plan's device.
:func:`executor_for` picks one from the plan.
"""
from __future__ import annotations

import multiprocessing as mp
from typing import Protocol

from ..errors import NumericalFailure
from ..threads import blas_limits
from ..workers import ignore_interrupts
from .seed import BOUND, CHECK_EVERY, TEST_STREAM, run_seed


class Executor(Protocol):
    def run(self, plan, progress, collected: dict) -> tuple[dict, list]: ...


class Sequential:
    """The seeds one after the other in this process."""

    def run(self, plan, progress, collected):
        results, done = {}, [0]
        job = plan.job()

        def report(k):
            done[0] += k
            progress.update(done[0])

        for s in plan.seeds:
            try:
                results[s] = run_seed(s, job, report, on_row=collected[s].append)
            except NumericalFailure as exc:
                return results, [(s, str(exc), exc.time)]
        return results, []


_JOB: dict = {}          # the plan's job in the forked workers (inherited, not pickled)


def _worker_init(threads):
    ignore_interrupts()                               # the parent handles Ctrl-C and ends the pool
    blas_limits(threads)


def _worker(seed):
    counter, rows = _JOB["counter"], _JOB.get("rows")

    def report(k):
        with counter.get_lock():
            counter.value += k

    on_row = None if rows is None else (lambda row: rows.put((seed, row)))
    try:
        return seed, run_seed(seed, _JOB, report=report, on_row=on_row), None
    except NumericalFailure as exc:
        return seed, None, (str(exc), exc.time)


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


class ForkPool:
    """Whole seeds in ``plan.workers`` forked processes; ``rows``: stream the rows back (partial output)."""

    def __init__(self, rows: bool = False):
        self.rows = rows

    def run(self, plan, progress, collected):
        ctx = mp.get_context("fork")
        job = plan.job()
        job["counter"] = ctx.Value("q", 0)
        if self.rows:
            job["rows"] = ctx.Queue()
        _JOB.clear()
        _JOB.update(job)
        results, failures = {}, []
        pool = ctx.Pool(plan.workers, initializer=_worker_init, initargs=(plan.blas_threads,))
        try:
            res = pool.map_async(_worker, plan.seeds, chunksize=1)
            while not res.ready():
                res.wait(0.25)
                progress.update(job["counter"].value)
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
        return results, failures


class Torch:
    """Every seed at once on PyTorch (``simulation.torch_backend``); a divergence raises."""

    def run(self, plan, progress, collected):
        from .torch_backend import run_torch
        done, S = [0], len(plan.seeds)

        def report_all(k):
            done[0] += k * S
            progress.update(done[0])

        def on_rows(rows):
            for s_, row in rows.items():
                collected[s_].append(row)

        results = run_torch(plan.spec, plan.dim, plan.seeds, plan.steps, device=plan.device, dtype=plan.dtype,
                            test_samples=plan.test_samples, potential=plan.potential,
                            potential_names=plan.potential_names, report=report_all, on_rows=on_rows,
                            check_every=CHECK_EVERY, bound=BOUND, test_stream=TEST_STREAM)
        return results, []


def executor_for(plan, stream_rows: bool = False) -> Executor:
    """Torch for the torch backend, a forked pool for more than one worker, else sequential."""
    if plan.backend == "torch":
        return Torch()
    if plan.workers > 1:
        return ForkPool(rows=stream_rows)
    return Sequential()
