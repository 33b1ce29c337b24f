"""The BLAS-thread rule (``symattn.threads``) on and off for the residual networks' flow and the exact finite-d flow,
in the default environment (no OPENBLAS_NUM_THREADS: OpenBLAS takes every core), idle and beside one busy process.

    python benchmarks/bench_blas_rule_ab.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_blas_threads import _busy  # noqa: E402  (one competing busy process, as another user's job)

CASES = [("residual_tied_softmax_L2", "residual", {"size": 200}, "N = 200 (and N/2)"),
         ("tied_h2_L1_small", "finite_d", {"dim": 200}, "d = 200")]


def _time(spec, method, options, rule_on, repeat):
    from symattn import theory, threads
    saved = threads.SINGLE_THREAD_UP_TO
    threads.SINGLE_THREAD_UP_TO = saved if rule_on else -1
    try:
        out = []
        for r in range(repeat):
            t0 = time.perf_counter()
            theory(spec, method, time=0.05, points=6, seed=r, **options)
            out.append(time.perf_counter() - t0)
    finally:
        threads.SINGLE_THREAD_UP_TO = saved
    return float(np.median(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(not set)')}, load {os.getloadavg()[0]:.2f}")
    print("| flow | size | rule on, idle | rule off, idle | rule on, busy | rule off, busy |\n|---|---|---|---|---|---|")
    for spec, method, options, size in CASES:
        _time(spec, method, options, True, 1)                          # warm
        idle = [_time(spec, method, options, on, args.repeat) for on in (True, False)]
        stop = mp.Event()
        p = mp.Process(target=_busy, args=(stop,))
        p.start()
        try:
            busy = [_time(spec, method, options, on, args.repeat) for on in (True, False)]
        finally:
            stop.set()
            p.join()
        print(f"| {method} | {size} | " + " | ".join(f"{t:.2f} s" for t in idle + busy) + " |", flush=True)


if __name__ == "__main__":
    main()
