"""Wall time of the spectral solver vs matrix size N (issue 6).

    python benchmarks/bench_spectral.py [--sizes 250 500 1000 2000] [--time 1.25] [--out FILE.md]
    python benchmarks/bench_spectral.py --cases sgd [--sgd-case h2|softmax] [--sgd-sizes 50 100 200]
                                        [--sgd-time 0.05] [--sgd-eps 0.002]

Integrates the Riccati example (tied κ=0.5 student, identity teacher) and tied L=1 h2
(student κ=1, teacher κ=0.5) to package time 1.25 (no N/2 error run), and prints a markdown
table: N, wall time, right-hand-side evaluations, time per evaluation, and for Riccati the
maximal deviation of tr_student from the exact quadrature. BLAS threads are whatever the
environment sets (OPENBLAS_NUM_THREADS etc.); state it with the numbers.

Case ``sgd``: wall time of ``solve_spectral`` at size N (no N/2 error run) against one seed of
``simulate`` at d = N (one worker, no test loss, no Φ) over the same package-time horizon, at
noise ratio ε (the SGD step count is time·d²/(ε·B)); the table gives both and their ratio.
Setup (building the symbolic potential / loss gradient) is timed apart, once per method.
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

from symattn.spec import load_spec  # noqa: E402
from symattn.spectral import solve_spectral  # noqa: E402

RICCATI = ROOT / "examples" / "riccati.toml"
H2 = ROOT / "examples" / "tied_h2_L1.toml"
SOFTMAX = ROOT / "examples" / "tied_softmax_L2.toml"


def bench_vs_sgd(case: str, sizes, horizon: float, eps: float, points: int = 11):
    """Markdown lines: N = d, spectral wall time, SGD steps and wall time (1 seed), ratio."""
    import tomllib

    from symattn.derivation.potential import Potential
    from symattn.simulation import simulate
    from symattn.spec import load_spec

    raw = tomllib.load(open(H2 if case == "h2" else SOFTMAX, "rb"))
    raw["training"]["noise_ratio"] = eps
    spec = load_spec(raw)
    t0 = time.perf_counter()
    P = Potential(spec)
    setup_spec = time.perf_counter() - t0
    t0 = time.perf_counter()
    simulate(spec, dim=8, seeds=1, time=0.0, points=1, progress=False, test_samples=0, potential=False, workers=1)
    setup_sim = time.perf_counter() - t0
    lines = [f"spectral vs SGD: tied {case}, package time {horizon}, ε = {eps}, B = {spec.batch_size}, "
             f"{points} output points; setup (not in the table): potential {setup_spec:.1f} s, "
             f"simulate (loss gradient) {setup_sim:.1f} s", "",
             "| N = d | spectral [s] | RHS evals | SGD steps | SGD 1 seed [s] | SGD / spectral |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for N in sizes:
        t0 = time.perf_counter()
        res = solve_spectral(spec, time=horizon, points=points, size=N, error_estimate=False, potential=P)
        ts = time.perf_counter() - t0
        t0 = time.perf_counter()
        sim = simulate(spec, dim=N, seeds=1, time=horizon, points=points, progress=False, test_samples=0,
                       potential=False, workers=1)
        tg = time.perf_counter() - t0
        line = (f"| {N} | {ts:.2f} | {res.info['rhs_evaluations']} | {sim.info['steps_total']} | {tg:.2f} "
                f"| {tg / ts:.1f} |")
        lines.append(line)
        print(line, flush=True)
    return lines


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
    ap.add_argument("--sgd-case", choices=["h2", "softmax"], default="h2")
    ap.add_argument("--sgd-sizes", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--sgd-time", type=float, default=0.05)
    ap.add_argument("--sgd-eps", type=float, default=0.002)
    args = ap.parse_args(argv)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "default"))
    lines = [f"BLAS threads: {threads}; cpus: {os.cpu_count()}; package time {args.time}; "
             f"DOP853 rtol 1e-8; {args.points} output points with spectra", "",
             "| case | N | wall time [s] | RHS evals | ms / eval | max abs err tr (Riccati) |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for case in args.cases:
        if case == "sgd":
            lines += [""] + bench_vs_sgd(args.sgd_case, args.sgd_sizes, args.sgd_time, args.sgd_eps)
            continue
        spec = load_spec(RICCATI if case == "riccati" else H2)
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
