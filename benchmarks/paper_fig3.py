"""The paper's Fig. 3 on a CPU: untied S = UVᵀ, L = 1, h1/h2/h3, B = 4096, ε = 0.002 — escape times against d.

Student and teacher untied (κ = 1, σ_U = σ_V = 1), the overlap of M₁ + M₁ᵀ with M₂ + M₂ᵀ
(``paper_fig3_gpu.overlap``). Three kinds of runs, each stored as JSON in ``--out`` (a rerun skips what
exists, so the parts can run in separate processes):

* ``free``: the matrix-level slow phase from the free laws (N = 128, 4 rotations, with the O(ε) noise),
  and the fast phase of the means (``theory --fast``) — the d → ∞ limit;
* ``theory D``: the matrix-level slow phase from each seed's own U, V at d = D (N = D, 2 antithetic
  noise paths) — the limit dynamics of that very start; the escape from the O(d^-½) initial overlap;
* ``sgd D``: online SGD at d = D (float32, the package's simulator), the same seeds.

The escape time is the first τ (package time nα/d) with |overlap| > 0.3, interpolated linearly. ``summary``
fits τ_esc = a + b ln d to the per-d means of theory and SGD (a weak-recovery escape from an O(d^-½)
overlap grows like ln d at a fixed rate) and draws the figure.

    python benchmarks/paper_fig3.py free
    python benchmarks/paper_fig3.py sgd --dims 100,200
    python benchmarks/paper_fig3.py theory --dims 100,200,400 --acts h1,h2
    python benchmarks/paper_fig3.py theory --dims 100,200,400 --acts h3 --time 3 --points 61
    python benchmarks/paper_fig3.py theory --dims 800 --acts h1 --time 0.3 --points 31
    python benchmarks/paper_fig3.py theory --dims 800 --acts h2 --time 1.6 --points 33
    python benchmarks/paper_fig3.py sgd --dims 400 --acts h2 --seeds 2 --time 0.75 --points 31
    python benchmarks/paper_fig3.py sgd --dims 400 --acts h3 --seeds 2 --time 1.5 --points 31
    python benchmarks/paper_fig3.py summary --figure docs/figures/paper_fig3.png

(the results page's numbers; ≈ 3.5 CPU-hours, the four d = 400 SGD runs ≈ 21–45 min each of them).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from paper_fig3_gpu import overlap, spec  # noqa: E402

THRESHOLD = 0.3


def escape(t, ov) -> float | None:
    """First τ with |overlap| > THRESHOLD (linear interpolation), None if never."""
    a = np.abs(np.asarray(ov, dtype=float))
    hit = np.nonzero(a > THRESHOLD)[0]
    if not hit.size:
        return None
    j = hit[0]
    if j == 0:
        return float(t[0])
    return float(t[j - 1] + (THRESHOLD - a[j - 1]) / (a[j] - a[j - 1]) * (t[j] - t[j - 1]))


def _save(path: Path, rec: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)


def run_free(out: Path, T: float, points: int) -> None:
    from symattn import load_spec
    from symattn.derivation.state import fast_phase
    from symattn.spectral import solve_spectral
    for act in ("h1", "h2", "h3"):
        path = out / f"free_{act}.json"
        if path.exists():
            continue
        sp = load_spec(spec(act))
        t0 = time.perf_counter()
        th = solve_spectral(load_spec(sp), time=T, points=points, size=128, rotations=4, epsilon=sp.epsilon(), spectra=False)
        wall = time.perf_counter() - t0
        fp = fast_phase(sp, time=20.0, points=5)
        ov = overlap(th.table)
        _save(path, {"act": act, "time": th.table["time"].tolist(), "overlap": ov.tolist(), "wall_s": wall,
                     "escape": escape(th.table["time"], ov), "m_star": fp.m_star})
        print(f"free {act}: escape {escape(th.table['time'], ov)}, overlap(T) {ov[-1]:.3f}, m* {fp.m_star}, "
              f"{wall:.0f} s", flush=True)


def run_theory(out: Path, dims, acts, seeds, T, points) -> None:
    from symattn import load_spec
    from symattn.spectral import solve_spectral

    def table(act, d, s):
        sp = load_spec(spec(act))
        return solve_spectral(load_spec(sp), time=T, points=points, size=d, seed=s, init="sample", epsilon=sp.epsilon(d),
                              spectra=False, noise_realisations=2, noise_antithetic=True).table
    _runs(out, "theory", dims, acts, seeds, table)


def run_sgd(out: Path, dims, acts, seeds, T, points) -> None:
    import symattn

    def table(act, d, s):
        return symattn.simulate(spec(act), dim=d, seeds=1, seed0=s, time=T, points=points, dtype="float32",
                                test_samples=0, progress=False, workers=1).table
    _runs(out, "sgd", dims, acts, seeds, table)


def _runs(out: Path, kind: str, dims, acts, seeds, table) -> None:
    """Each (d, activation, seed) not yet stored: ``table(act, d, seed)``'s overlap and escape time, or the
    divergence time of a numerical failure, as ``<kind>_<act>_d<d>_s<seed>.json``."""
    from symattn.errors import NumericalFailure
    for d in dims:
        for act in acts:
            for s in range(seeds):
                path = out / f"{kind}_{act}_d{d}_s{s}.json"
                if path.exists():
                    continue
                t0 = time.perf_counter()
                try:
                    tab = table(act, d, s)
                    rec = {"time": tab["time"].tolist(), "overlap": overlap(tab).tolist()}
                except NumericalFailure as exc:
                    rec = {"time": [], "overlap": [], "diverged_at": exc.time}
                rec.update(kind=kind, act=act, dim=d, seed=s, wall_s=time.perf_counter() - t0)
                rec["escape"] = escape(rec["time"], rec["overlap"]) if rec["time"] else None
                _save(path, rec)
                print(f"{kind} {act} d={d} seed={s}: escape {rec['escape']}, {rec['wall_s']:.0f} s", flush=True)


def summary(out: Path, figure: str | None) -> None:
    recs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    free = {r["act"]: r for r in recs if "dim" not in r}
    runs = [r for r in recs if "dim" in r]
    kinds = {k: [r for r in runs if r["kind"] == k] for k in ("sgd", "theory")}
    print("| activation | d | seeds | SGD escape τ | theory (same U, V) escape τ | SGD wall s | theory wall s |")
    print("|---|---|---|---|---|---|---|")
    fits = {}
    for act in ("h1", "h2", "h3"):
        dims = sorted({r["dim"] for r in runs if r["act"] == act})
        for d in dims:
            row = {}
            for k in ("sgd", "theory"):
                rs = [r for r in kinds[k] if r["act"] == act and r["dim"] == d]
                esc = [r["escape"] for r in rs]
                row[k] = (esc, sum(r["wall_s"] for r in rs))
            fmt = lambda e: ", ".join("–" if x is None else f"{x:.3f}" for x in e) or "not run"   # noqa: E731
            print(f"| {act} | {d} | {max(len(row['sgd'][0]), len(row['theory'][0]))} | {fmt(row['sgd'][0])} | "
                  f"{fmt(row['theory'][0])} | {row['sgd'][1]:.0f} | {row['theory'][1]:.0f} |")
        for k in ("sgd", "theory"):
            pts = [(r["dim"], r["escape"]) for r in kinds[k] if r["act"] == act and r["escape"] is not None]
            ds = sorted({d for d, _ in pts})
            if len(ds) >= 2:
                mean = [np.mean([e for dd, e in pts if dd == d]) for d in ds]
                b, a = np.polyfit(np.log(ds), mean, 1)
                fits[act, k] = (a, b)
                print(f"  {act} {k}: τ_esc = {a:.3f} + {b:.3f} ln d over d = {ds} (at d = 800: {a + b * np.log(800):.3f})")
        if act in free:
            f = free[act]
            print(f"  {act} free-law limit: escape {f['escape']}, overlap(τ = {f['time'][-1]:.2f}) = "
                  f"{f['overlap'][-1]:.3f}; fast-phase means m* = {f['m_star']}")
    if figure:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(14, 4))
        for ax, act in zip(axes, ("h1", "h2", "h3")):
            for r in sorted(runs, key=lambda r: (r["dim"], r["seed"])):
                if r["act"] != act or not r["time"]:
                    continue
                sgd = r["kind"] == "sgd"
                ax.plot(r["time"], np.abs(r["overlap"]), "-" if sgd else "--", lw=1,
                        color=plt.cm.viridis(np.log2(r["dim"] / 100) / 3),
                        label=f"{'SGD' if sgd else 'theory'} d={r['dim']}" if r["seed"] == 0 else None)
            if act in free:
                ax.plot(free[act]["time"], np.abs(free[act]["overlap"]), "k:", label="free-law limit")
            ax.axhline(THRESHOLD, color="grey", lw=0.5)
            ax.set_title(f"untied {act}, B = 4096, ε = 0.002")
            ax.set_xlabel("package time τ")
            ax.set_ylabel("|overlap|")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(figure, dpi=110)
        print(f"wrote {figure}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["free", "theory", "sgd", "summary"])
    ap.add_argument("--dims", default="100,200")
    ap.add_argument("--acts", default="h1,h2,h3")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--time", type=float, default=1.0)
    ap.add_argument("--points", type=int, default=41)
    ap.add_argument("--out", default="fig3_runs")
    ap.add_argument("--figure", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dims = [int(x) for x in args.dims.split(",")]
    acts = args.acts.split(",")
    if args.part == "free":
        run_free(out, args.time, args.points)
    elif args.part == "theory":
        run_theory(out, dims, acts, args.seeds, args.time, args.points)
    elif args.part == "sgd":
        run_sgd(out, dims, acts, args.seeds, args.time, args.points)
    else:
        summary(out, args.figure)


if __name__ == "__main__":
    main()
