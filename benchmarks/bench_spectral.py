"""Wall time of the spectral solver vs matrix size N (issue 6).

    python benchmarks/bench_spectral.py [--sizes 250 500 1000 2000] [--time 1.25] [--out FILE.md]

Integrates the Riccati example (tied κ=0.5 student, identity teacher) and tied L=1 h2
(student κ=1, teacher κ=0.5) to package time 1.25 (no N/2 error run), and prints a markdown
table: N, wall time, right-hand-side evaluations, time per evaluation, and for Riccati the
maximal deviation of tr_student from the exact quadrature. BLAS threads are whatever the
environment sets (OPENBLAS_NUM_THREADS etc.); state it with the numbers.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from scipy.integrate import quad

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from symattn.spectral import solve_spectral  # noqa: E402

RICCATI = ROOT / "examples" / "riccati.toml"
H2 = ROOT / "examples" / "tied_h2_L1.toml"


def riccati_exact(t, kappa=0.5, c=1.0):
    a, b = (1 - kappa ** 0.5) ** 2, (1 + kappa ** 0.5) ** 2
    f = lambda x: c * x / (x + (c - x) * np.exp(-8 * c * t)) / (2 * np.pi * x)  # noqa: E731
    return quad(f, a, b, weight="alg", wvar=(0.5, 0.5), epsabs=1e-13, epsrel=1e-12)[0]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 500, 1000, 2000])
    ap.add_argument("--time", type=float, default=1.25)
    ap.add_argument("--points", type=int, default=26)
    ap.add_argument("--cases", nargs="+", default=["riccati", "h2"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "default"))
    lines = [f"BLAS threads: {threads}; cpus: {os.cpu_count()}; package time {args.time}; "
             f"DOP853 rtol 1e-8; {args.points} output points with spectra", "",
             "| case | N | wall time [s] | RHS evals | ms / eval | max abs err tr (Riccati) |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for case in args.cases:
        spec = RICCATI if case == "riccati" else H2
        for N in args.sizes:
            t0 = time.perf_counter()
            res = solve_spectral(spec, time=args.time, points=args.points, size=N, error_estimate=False)
            wall = time.perf_counter() - t0
            nev = res.info["rhs_evaluations"]
            err = ""
            if case == "riccati":
                ex = np.array([riccati_exact(t) for t in res.time])
                err = f"{np.abs(res.table['tr_student'] - ex).max():.2e}"
            line = f"| {case} | {N} | {wall:.1f} | {nev} | {1e3 * wall / nev:.1f} | {err} |"
            lines.append(line)
            print(line, flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
