"""The cost table of the theory: kinds × methods × N × horizon, in-process and whole process (docs/results/theory_cost.md).

Every row is one call of ``symattn.theory(spec, method, time=T, **options)`` (in-process: warm — derivation and
compilation done by a first call — median of --repeat runs with seeds 0, 1, …) and, for the method's default size, the
whole process ``python -m symattn theory SPEC --method M --time T`` (warm caches, median of --repeat). Run in the
environment the benchmark is started in; the BLAS setting it found is printed with the table (the matrix-level flow
(and the residual and exact finite-d flows) limit their own BLAS threads at N ≤ 1024 whatever the environment
says, ``symattn.threads``).

    python benchmarks/bench_cost_table.py [--repeat 3] [--horizons 0.25 2]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

# (spec, kind as the table names it, [(method, options, whole-process flags or None)])
ROWS = [
    ("direct_h2_L1_small", "direct", [("moments", {}, [])]),
    ("general_softmax_L2", "general", [("moments", {}, [])]),
    ("tied_h2_L1_small", "tied", [("moments", {"truncation": 4}, ["--truncation", "4"]),
                                  ("spectral", {"size": 64}, None),
                                  ("spectral", {}, []),
                                  ("spectral", {"size": 256}, None),
                                  ("finite_d", {"dim": 100}, ["--dim", "100"])]),
    ("tied_softmax_L2", "tied, softmax L = 2", [("spectral", {"size": 64}, None), ("spectral", {}, []),
                                                ("spectral", {"size": 256}, None)]),
    ("untied_h2_L1", "untied", [("fast_phase", {}, []), ("spectral", {"size": 64}, None), ("spectral", {}, []),
                                ("spectral", {"size": 256}, None)]),
    ("residual_tied_softmax_L2", "residual", [("residual", {}, [])]),
]


def _in_process(spec, method, options, T, repeat):
    from symattn import theory
    seeded = method in ("spectral", "finite_d", "fast_phase")
    theory(spec, method, time=T, **options)                       # warm
    out = []
    for r in range(repeat):
        extra = {"seed": r} if seeded else {}
        t0 = time.perf_counter()
        theory(spec, method, time=T, **options, **extra)
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _whole(spec, method, flags, T, repeat):
    how = {"finite_d": ["--exact-finite-d"], "fast_phase": ["--fast"], "residual": []}.get(method, ["--method", method])
    cmd = [sys.executable, "-m", "symattn", "theory", spec, *how, "--time", str(T), *flags, "--quiet", "--out",
           os.devnull]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)    # warm caches
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return float(np.median(out))


def _size(method, options):
    from symattn.methods import DEFAULT_ROTATIONS, DEFAULT_SIZE
    if method != "spectral":
        return "—"
    return f"{options.get('size', DEFAULT_SIZE)} × {options.get('rotations', DEFAULT_ROTATIONS)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--horizons", type=float, nargs="+", default=[0.25, 2.0])
    args = ap.parse_args()
    from threadpoolctl import threadpool_info
    blas = [f"{i['internal_api']} {i['num_threads']} threads" for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(not set)')}; found: {', '.join(blas)}; "
          f"{os.cpu_count()} cores; load at start {os.getloadavg()[0]:.2f}")
    heads = " | ".join(f"τ ≤ {T:g} in-process | whole process" for T in args.horizons)
    print(f"| model | kind | method | N × realisations | {heads} |")
    print("|---|---|---|---|" + "---|---|" * len(args.horizons))
    for spec, kind, methods in ROWS:
        for method, options, flags in methods:
            cells = []
            for T in args.horizons:
                inp = _in_process(spec, method, options, T, args.repeat)
                whole = _whole(spec, method, flags, T, args.repeat) if flags is not None else None
                cells += [f"{inp:.3f} s", f"{whole:.2f} s" if whole is not None else "—"]
            extra = ", ".join(f"{k} = {v}" for k, v in options.items() if k != "size")
            print(f"| {spec} | {kind} | {method}{' (' + extra + ')' if extra else ''} | {_size(method, options)} | "
                  f"{' | '.join(cells)} |", flush=True)
    print(f"load at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
