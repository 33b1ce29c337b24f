"""Phase diagrams (`symattn.phase`): the two grids of issue 42, their cost per point against SGD, and whether the grid
points should share one flow.

1. batching: the matrix-level flow of R realisations in one batch (one vector field over a leading axis) against R
   separate flows, in-process (tied h3, σ = 0.8, ε = 0.01, τ ≤ 2, no error estimate) — the saving a batched grid
   could have over separate points;
2. a 32 × 32 grid of tied h3 escape time over (σ, ε) and a 32 × 32 grid of tied softmax L = 2 loss at τ = 0.25 over
   (σ, β), the default theory at every point in a pool of the machine's cores, with SGD (d = 200, 2 seeds) at five
   grid points; the cost per point (wall time of the whole grid over its points, derivations included) against one
   SGD run at d = 200 at the same point (the checks' own time per seed).

    python benchmarks/bench_phase.py [--n 32] [--out DIR] [--figures docs/figures] [--skip-batching] [--replot]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from symattn.spec import load_spec

GRIDS = [("tied_h3_L1_small", ["sigma=0.3:1.2:{n}", "epsilon=0.0005:0.05:{n}:log"], "escape_time", 2.0,
          "phase_tied_h3_escape"),
         ("tied_softmax_L2", ["sigma=0.5:1.5:{n}", "beta=0.5:3:{n}"], "loss_at=0.25", 0.25, "phase_softmax_loss")]


def batching():
    from symattn.spectral import solve_spectral
    spec = {"name": "batch", "model": {"tokens": 1, "activation": "h3"},
            "indices": [{"name": "student", "role": "student", "parameterization": "tied", "width": 1.0,
                         "init_scale": 0.8},
                        {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5,
                         "init_scale": 0.5}],
            "training": {"batch_size": 64, "noise_ratio": 0.01}}
    spec = load_spec(spec)
    kw = dict(time=2.0, points=21, error_estimate=False, spectra=False, epsilon=0.01)
    solve_spectral(spec, size=32, **{**kw, "time": 0.01})
    print("1. R realisations in one batched flow against R separate flows (tied h3, τ ≤ 2, ε = 0.01)")
    for N in (64, 128):
        for R in (4, 16):
            one = min(_clock(lambda: solve_spectral(spec, size=N, rotations=R, **kw)) for _ in range(2))
            sep = min(_clock(lambda: [solve_spectral(spec, size=N, seed=r, **kw) for r in range(R)]) for _ in range(2))
            print(f"  N = {N}, R = {R}: batched {one:.2f} s, separate {sep:.2f} s: {sep / one:.2f}×", flush=True)


def _clock(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def grids(n, out: Path, figures: Path | None, only=None):
    from symattn import phase
    out.mkdir(parents=True, exist_ok=True)
    print(f"2. {n} × {n} grids, SGD checks at five points (d = 200, 2 seeds)")
    for spec, vary, measure, T, name in GRIDS:
        if only and name not in only:
            continue
        pd = phase(spec, [v.format(n=n) for v in vary], measure, time=T, check=5, check_dim=200, check_seeds=2)
        per_sgd = np.mean([c["sgd_seconds"] / c["seeds"] for c in pd.checks if not c.get("failed")])
        cost = pd.info["seconds_per_point"]
        ok = sum(c["within"] for c in pd.checks)
        print(f"  {spec}: {measure} over {', '.join(a.label for a in pd.axes)}: {pd.value.size} points in "
              f"{pd.info['wall_seconds']:.0f} s on {pd.info['workers']} processes = {cost:.3f} s per point; one SGD run "
              f"at d = 200: {per_sgd:.1f} s: {per_sgd / cost:.0f}× per point; {np.sum(np.isnan(pd.value))} points "
              f"without a value; {pd.boundary.get('text')}", flush=True)
        for c in pd.checks:
            if c.get("failed"):
                print(f"    SGD at {c['at']}: {c['failed']}; theory {c['theory']:.4g} ± {c['theory_err']:.2g}")
                continue
            print(f"    SGD at {c['at']}: {c['sgd']:.4g} ± {c['sgd_sem']:.2g} (seeds {c['per_seed']}), theory "
                  f"{c['theory']:.4g} ± {c['theory_err']:.2g}: {'within' if c['within'] else 'OUTSIDE'} "
                  f"2√(SEM² + err²)", flush=True)
        print(f"    {ok}/{len(pd.checks)} within", flush=True)
        pd.to_csv(out / f"{name}.csv")
        pd.plot(out / f"{name}.png")
        (out / f"{name}.json").write_text(json.dumps({"info": pd.info, "checks": pd.checks,
                                                      "boundary": pd.boundary.get("text")}, indent=1, default=str))
        if figures is not None:
            pd.plot(figures / f"{name}.png")


def replot(n, out: Path, figures: Path | None):
    """The figures again from the files a run wrote (its CSV and JSON), without re-running anything."""
    import csv

    from symattn import load_spec
    from symattn.phase_diagram import PhaseDiagram, _boundary, parse_axis, parse_measure
    for spec_name, vary, measure, T, name in GRIDS:
        spec = load_spec(spec_name)
        axes = [parse_axis(v.format(n=n), spec) for v in vary]
        rows = list(csv.DictReader(open(out / f"{name}.csv")))
        shape = tuple(len(a.values) for a in axes)
        value = np.array([float(r["value"]) for r in rows]).reshape(shape)
        err = np.array([float(r["err"]) for r in rows]).reshape(shape)
        failed = np.array([r["failed"] for r in rows], dtype=object).reshape(shape)
        saved = json.loads((out / f"{name}.json").read_text())
        pd = PhaseDiagram(spec.name, axes, parse_measure(measure, spec, T), value, err, failed, saved["info"],
                          saved["checks"], _boundary(spec, axes))
        for target in [out] + ([figures] if figures is not None else []):
            pd.plot(target / f"{name}.png")
        print(f"replotted {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--out", default="phase_bench")
    ap.add_argument("--figures", default=None)
    ap.add_argument("--skip-batching", action="store_true")
    ap.add_argument("--replot", action="store_true", help="only redraw the figures from --out's CSV and JSON files")
    ap.add_argument("--only", nargs="+", default=None, help="run only these grids (by figure name)")
    args = ap.parse_args()
    if args.replot:
        return replot(args.n, Path(args.out), Path(args.figures) if args.figures else None)
    if not args.skip_batching:
        batching()
    grids(args.n, Path(args.out), Path(args.figures) if args.figures else None, args.only)


if __name__ == "__main__":
    main()
