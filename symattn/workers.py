"""Forked worker pools for independent tasks (sweep tasks, phase-diagram points), stopped cleanly on an interrupt."""
from __future__ import annotations


def ignore_interrupts():
    """A worker leaves Ctrl-C to the parent, which cancels the pool (:func:`forked_map`, and simulate's
    ``simulation.executors.ForkPool``)."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def forked_map(fn, items, workers: int, done=None) -> list:
    """``[fn(x) for x in items]`` in a pool of ``workers`` forked processes, in order; ``done(k)`` after the k-th
    result. An interrupt (or any failure) cancels the items not started, stops the workers and re-raises."""
    import concurrent.futures as cf
    import multiprocessing as mp
    pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=ignore_interrupts)
    out = []
    try:
        for result in pool.map(fn, items):
            out.append(result)
            if done is not None:
                done(len(out))
    except BaseException:
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(timeout=10)
        raise
    pool.shutdown(wait=True)
    return out
