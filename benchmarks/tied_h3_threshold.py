"""Tied h3 from a student init-scale scan: where does weak recovery switch on? (matrix-level limit)

Paper Fig. 2 setting at CPU scale: L = 1, h3, tied student (κ = 1, init scale σ), tied teacher with
unit-variance pre-activations (κ* = 0.5, σ* = (2/3)^{1/4}, Var G* = 2q₂₂ = 1). The matrix-level
("spectral") solver integrates the d → ∞ flow (ε → 0) on size-N free-law realisations to τ = 1
for each σ; p₁₂(τ = 1) is reported at N = 200 and N = 400. Below the threshold the student
shrinks to zero and the symmetry-breaking trace term t₁ dies with it; above it p₁₂ escapes.

    python benchmarks/tied_h3_threshold.py [--sigmas 0.50 0.52 ...] [--sizes 200 400] [--time 1]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from symattn.spec import load_spec
from symattn.spectral import solve_spectral


def spec(sigma):
    return {"name": "tied_h3_threshold", "model": {"tokens": 1, "activation": "h3"},
            "indices": [{"name": "student", "role": "student", "parameterization": "tied", "width": 1.0,
                         "init_scale": float(sigma)},
                        {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5,
                         "init_scale": (2 / 3) ** 0.25}],
            "training": {"batch_size": 64, "noise_ratio": 0.0005}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sigmas", type=float, nargs="+", default=list(np.round(np.arange(0.50, 0.701, 0.02), 2)))
    ap.add_argument("--sizes", type=int, nargs="+", default=[200, 400])
    ap.add_argument("--time", type=float, default=1.0)
    args = ap.parse_args()
    print("| σ | " + " | ".join(f"p₁₂(τ={args.time:g}), N={n}" for n in args.sizes) + " | q₁₁(τ) N=max | loss N=max |")
    print("|---|" + "---|" * (len(args.sizes) + 2))
    for s in args.sigmas:
        vals = []
        t0 = time.perf_counter()
        for n in args.sizes:
            r = solve_spectral(load_spec(spec(s)), time=args.time, points=11, size=n, error_estimate=False)
            vals.append(r.table)
        last = vals[-1]
        print(f"| {s:.3f} | " + " | ".join(f"{v['p_student_teacher'][-1]:.4f}" for v in vals)
              + f" | {last['q_student_student'][-1]:.4f} | {last['loss'][-1]:.3g} |  ({time.perf_counter() - t0:.0f} s)",
              flush=True)


if __name__ == "__main__":
    main()
