"""BLAS threads of the matrix-level flow, sized to its matrices (docs/results/theory_cost.md)."""
from __future__ import annotations

SINGLE_THREAD_UP_TO = 1024   # N at or below which the flow runs its BLAS single-threaded (docs/results/theory_cost.md:
                             # at N = 128 two OpenBLAS threads made the README example 2.6–7× slower beside a busy
                             # process, and never paid below N = 1024 on an idle 2-core machine)


def blas_threads(N: int):
    """A threadpoolctl context limiting the BLAS to one thread for matrices of size N ≤ SINGLE_THREAD_UP_TO (small
    products spin threads for nothing, and against any other load lose by factors), else a no-op; the
    realisations and grid points run in parallel across processes instead."""
    import contextlib
    if N > SINGLE_THREAD_UP_TO:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")
