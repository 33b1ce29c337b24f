"""Where two BLAS threads start to pay for the matrix-level flow, and what the default environment costs.

For N in --sizes the README example's matrix-level flow (tied softmax L = 2, τ ≤ 0.25, ε = 0.01, one realisation at N,
no error estimate) is timed in-process with one and with two OpenBLAS threads (threadpoolctl), on an idle machine and
beside one competing busy process (a pure-Python loop on one core, as another user's job would be); then the whole
process `symattn theory tied_softmax_L2 --time 0.25` with no BLAS variable set (the user's default: the package now
limits the flow itself, ``symattn.threads.blas_threads``) against the same with OPENBLAS_NUM_THREADS=1, both beside the busy
process. Medians of --repeat runs. Prints a table (docs/results/theory_cost.md).

    python benchmarks/bench_blas_threads.py [--sizes 128 256 512 1024] [--repeat 3]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time

import numpy as np


def _busy(stop):
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def _flow_time(N, threads, repeat):
    from threadpoolctl import threadpool_limits

    from symattn import load_spec, spectral
    from symattn import threads as rule
    spec = load_spec("tied_softmax_L2")                 # loaded once, outside the timed calls
    saved = rule.SINGLE_THREAD_UP_TO
    rule.SINGLE_THREAD_UP_TO = -1                       # the package's own rule off: the limit below decides
    out = []
    try:
        for r in range(repeat):
            with threadpool_limits(limits=threads, user_api="blas"):
                t0 = time.perf_counter()
                spectral.solve_spectral(spec, time=0.25, points=11, size=N, seed=r, epsilon=0.01,
                                        error_estimate=False, spectra=False)
                out.append(time.perf_counter() - t0)
    finally:
        rule.SINGLE_THREAD_UP_TO = saved
    return float(np.median(out))


def _process_time(env_extra, repeat, command=("theory", "tied_softmax_L2", "--time", "0.25")):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                                              "OMP_NUM_THREADS")}
    env.update(env_extra)
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "symattn", *command, "--quiet", "--out", os.devnull], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    _flow_time(64, 1, 1)                                       # warm: derivation, compilation
    print(f"load at start {os.getloadavg()[0]:.2f}")
    print("| N | 1 thread, idle | 2 threads, idle | 1 thread, busy | 2 threads, busy |")
    print("|---|---|---|---|---|")
    for N in args.sizes:
        idle = [_flow_time(N, t, args.repeat) for t in (1, 2)]
        stop = mp.Event()
        p = mp.Process(target=_busy, args=(stop,))
        p.start()
        try:
            busy = [_flow_time(N, t, args.repeat) for t in (1, 2)]
        finally:
            stop.set()
            p.join()
        print(f"| {N} | {idle[0]:.2f} s | {idle[1]:.2f} s | {busy[0]:.2f} s | {busy[1]:.2f} s |", flush=True)
    stop = mp.Event()
    p = mp.Process(target=_busy, args=(stop,))
    p.start()
    try:
        for name, T in (("tied_softmax_L2", "0.25"), ("tied_h2_L1", "2")):
            default = _process_time({}, args.repeat, ("theory", name, "--time", T))
            pinned = _process_time({"OPENBLAS_NUM_THREADS": "1"}, args.repeat, ("theory", name, "--time", T))
            sim = _process_time({}, 1, ("simulate", name, "--dim", "200", "--seeds", "1", "--time", T))
            print(f"whole process, beside a busy process, `theory {name} --time {T}`: default environment "
                  f"{default:.2f} s, OPENBLAS_NUM_THREADS=1 {pinned:.2f} s; `simulate --dim 200 --seeds 1` (default "
                  f"environment) {sim:.1f} s: {sim / default:.1f}× the default theory", flush=True)
    finally:
        stop.set()
        p.join()


if __name__ == "__main__":
    main()
