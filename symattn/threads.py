"""BLAS threads sized to the matrices a theory multiplies (docs/results/theory_cost.md): the matrix-level flow,
the residual networks' flow and the exact finite-d flow run their products in ``blas_threads(N)``."""
from __future__ import annotations

SINGLE_THREAD_UP_TO = 1024   # N at or below which the flow runs its BLAS single-threaded. Measured (benchmarks/
                             # bench_blas_threads.py, docs/results/theory_cost.md), README flow, one realisation, 2 cores:
                             # two OpenBLAS threads lose at every N ≤ 1024 (N = 512: 0.61 s vs 0.26 s idle, 0.82 vs 0.28
                             # beside a busy process; N = 1024: 2.19 vs 1.67, 3.11 vs 1.70) and pay only idle at N = 2048
                             # (8.7 vs 10.0 s; beside a busy process 13.6 vs 10.4)


def blas_threads(N: int):
    """A threadpoolctl context limiting the BLAS to one thread for matrices of size N ≤ SINGLE_THREAD_UP_TO (small
    products spin threads for nothing, and against any other load lose by factors), else a no-op; realisations,
    seeds and grid points run in parallel across processes instead."""
    import contextlib
    if N > SINGLE_THREAD_UP_TO:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


def blas_name() -> str:
    """The BLAS libraries threadpoolctl controls in this process, e.g. ``openblas (1 threads)``."""
    from threadpoolctl import threadpool_info
    libs = [f"{i.get('internal_api')} ({i.get('num_threads')} threads)" for i in threadpool_info()
            if i.get("user_api") == "blas"]
    return ", ".join(libs) or "no BLAS library found"


def blas_limits(n: int | None):
    """threadpoolctl limit of the BLAS threads to ``n`` (None: unchanged) — ``simulate``'s seeds each run with its
    ``blas_threads`` —, and the line naming the library."""
    from threadpoolctl import threadpool_limits
    limits = threadpool_limits(limits=n, user_api="blas")
    return limits, blas_name()
