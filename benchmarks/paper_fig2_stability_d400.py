"""Where online SGD of the paper's Fig. 2 tied-h3 panel is stable at the paper's d = 400: a scan of the noise
ratio ε = αd/B and the student's init scale σ (issue: the paper's conventions pinned down).

Tied h3 student (κ = 1, init scale σ) learning a unit-variance tied teacher (κ* = 0.5, σ* = (2/3)^{1/4}),
L = 1, B = 512, as in ``benchmarks/paper_fig2_d400.py``. Each cell runs ``--seeds`` seeds for ``--steps`` SGD steps
(every divergence of the earlier stability map happened within the first 1.9e-4 of package time, i.e. within
≈ 40 steps at these settings) and records whether and when it diverged. The student's pre-activation
variance at the start is Var G = 2σ⁴κ(1 + κ) = 4σ⁴: σ = 1 gives 4, σ = 2^{−½} gives 1 (unit variance, as the
teacher).

    python benchmarks/paper_fig2_stability_d400.py [--dim 400] [--seeds 2] [--steps 400] [--jobs 2]

Prints a table of diverged seeds per (ε, σ) and the time of the first divergence; writes
``fig2_stability_d400.json``.
"""
from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor

EPS = (2.5e-4, 5e-4, 1e-3, 2e-3, 3.9e-3)
SIGMAS = (0.6, 2 ** -0.5, 0.85, 1.0)


def cell(args):
    eps, sigma, dim, seed, steps, batch = args
    import os
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import symattn
    spec = {"name": "fig2_h3_stability", "model": {"tokens": 1, "activation": "h3"},
            "indices": [{"name": "student", "role": "student", "parameterization": "tied", "width": 1.0,
                         "init_scale": sigma},
                        {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5,
                         "init_scale": (2 / 3) ** 0.25}],
            "training": {"batch_size": batch, "noise_ratio": eps}}
    horizon = steps * eps * batch / dim ** 2          # n steps of α = εB/d: τ = nα/d
    t0 = time.perf_counter()
    try:
        sim = symattn.simulate(spec, dim=dim, seeds=1, seed0=seed, time=horizon, points=2, progress=False,
                               test_samples=0, potential=False, workers=1)
        out = {"diverged_at": None, "q11_end": float(sim.table["q_student_student"][-1])}
    except symattn.NumericalFailure as exc:
        out = {"diverged_at": float(exc.time)}
    out.update(eps=eps, sigma=sigma, seed=seed, wall_s=time.perf_counter() - t0, horizon=horizon)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="fig2_stability_d400.json")
    args = ap.parse_args()
    jobs = [(e, s, args.dim, k, args.steps, args.batch) for e in EPS for s in SIGMAS for k in range(args.seeds)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as ex:
        res = list(ex.map(cell, jobs))
    print(f"d = {args.dim}, B = {args.batch}, {args.steps} steps per run, {args.seeds} seeds per cell, "
          f"{time.perf_counter() - t0:.0f} s with {args.jobs} jobs")
    print("diverged seeds (first divergence τ) per ε (rows) and σ (columns; Var G(0) = 4σ⁴):")
    print("ε \\ σ    " + "  ".join(f"{s:>14.3f}" for s in SIGMAS))
    for e in EPS:
        row = []
        for s in SIGMAS:
            cells = [r for r in res if r["eps"] == e and r["sigma"] == s]
            div = [r["diverged_at"] for r in cells if r["diverged_at"] is not None]
            row.append(f"{len(div)}/{len(cells)}" + (f" ({min(div):.1e})" if div else "") )
        print(f"{e:<8.1e} " + "  ".join(f"{c:>14s}" for c in row))
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
