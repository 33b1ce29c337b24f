"""The paper's Fig. 2 setting at its own d = 400: direct S vs tied S = WWᵀ from uninformative starts.

L = 1, activations h1 (linear), h2, h3; B = 512, ε = 0.0039 (paper α = 0.005, the step on the batch-mean gradient:
ε = αd/B); teacher tied with unit-variance pre-activations (κ* = 0.5, σ* = (2/3)^{1/4}, Var G* = 2q₂₂ = 1).
Students at the paper's reading (docs/theory.md §8): the tied student at unit pre-activation variance, the remark
after Cor. 3's q₁₁(0) = q₂₂ (κ = 1, σ = 2^{−½}: Var G(0) = 2σ⁴κ(1 + κ) = 1; ``--sigma 1`` is the stability boundary
of the h3 panel, see the results page); the direct student from App. E's start, "centred i.i.d. entries of
variance Θ(d⁻¹)": a non-symmetric S with i.i.d. N(0, 1/d) entries (``general``, σ = 1), whose symmetric part gives
Var G(0) = Ω₁₁ + Ψ₁₁ = 1 (printed; ``--direct-kind direct`` runs the symmetric GOE start instead, Var G(0) = 2σ²).
The plotted quantity is the unnormalised structural overlap p₁₂ = q₁₂ − t₁t₂ (direct: its seed mean of |p₁₂|).
SGD per (activation, kind, seed) is run on its own (a diverging seed is recorded with the time at
which it diverged, not dropped silently); theory: the closed direct system (docs/theory.md §4) and,
for tied, the matrix-level limit (N = ``--size``, ε → 0). Each finished SGD run is saved under
``--out`` (``sgd_<act>_<kind>_<seed>.npz``, written atomically), so an interrupted run resumes.

    python benchmarks/paper_fig2_d400.py [--dim 400] [--seeds 2] [--time 0.5] [--out fig2_d400]

Prints the per-run outcome, max |theory − SGD| of p₁₂ over the run (direct: seed-mean |p₁₂| against
the limit's |p₁₂|, seeds escape toward ±S*), wall times, and writes ``fig2_d400.png``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import symattn
from symattn.files import atomic_target
from symattn.spec import load_spec

ACTS = ("linear", "h2", "h3")
KINDS = ("direct", "tied")


def make(act, kind, eps, batch, sigma, direct_kind="general"):
    teacher = {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5,
               "init_scale": (2 / 3) ** 0.25}
    if kind == "tied":
        st = {"name": "student", "role": "student", "parameterization": "tied", "init_scale": sigma, "width": 1.0}
    else:                                              # App. E: i.i.d. N(0, 1/d) entries (general, σ = 1)
        st = {"name": "student", "role": "student", "parameterization": direct_kind, "init_scale": 1.0}
    return {"name": f"fig2_{kind}_{act}", "model": {"tokens": 1, "activation": act}, "indices": [st, teacher],
            "training": {"batch_size": batch, "noise_ratio": eps}, "theory": {"truncation": 2}}


def run_sgd(spec, dim, seed, horizon, points, out: Path, dtype):
    path = out / f"sgd_{spec['model']['activation']}_{spec['indices'][0]['parameterization']}_{seed}.npz"
    if path.exists():
        z = np.load(path)
        return {k: z[k] for k in z.files}
    t0 = time.perf_counter()
    try:
        sim = symattn.simulate(spec, dim=dim, seeds=1, seed0=seed, time=horizon, points=points, progress=False,
                               test_samples=0, potential=False, dtype=dtype)
        res = {"time": sim.table["time"], "p": sim.table["p_student_teacher"], "q11": sim.table["q_student_student"],
               "diverged_at": np.nan, "steps": sim.info["steps_total"]}
    except symattn.NumericalFailure as exc:
        res = {"time": np.zeros(0), "p": np.zeros(0), "q11": np.zeros(0), "diverged_at": float(exc.time), "steps": -1}
    res["wall_s"] = time.perf_counter() - t0
    with atomic_target(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **res)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--time", type=float, default=0.5)
    ap.add_argument("--points", type=int, default=26)
    ap.add_argument("--eps", type=float, default=0.0039)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--sigma", type=float, default=2 ** -0.5, help="tied student's init scale (default 2^-1/2)")
    ap.add_argument("--direct-kind", choices=["general", "direct"], default="general")
    ap.add_argument("--size", type=int, default=400)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--acts", nargs="+", default=list(ACTS))
    ap.add_argument("--out", default="fig2_d400")
    ap.add_argument("--figure", default=None, help="also write the figure here (e.g. docs/figures/paper_fig2_d400.png)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from symattn.derivation import derive
    from symattn.integration import integrate
    from symattn.spectral import solve_spectral

    summary, theory, sims = {}, {}, {}
    for act in args.acts:
        for kind in KINDS:
            spec = make(act, kind, args.eps, args.batch, args.sigma, args.direct_kind)
            from symattn.initial import initial_order_parameters
            th0 = initial_order_parameters(spec)
            var0 = (th0["q1_student_student"] + th0["q2_student_student"] if "q1_student_student" in th0
                    else 2 * th0["q_student_student"])
            print(f"{act:6s} {kind:6s}: student Var G(0) = {var0:.6g}, teacher Var G* = "
                  f"{2 * th0['q_teacher_teacher']:.6g}", flush=True)
            t0 = time.perf_counter()
            if kind == "direct":
                th = integrate(derive(spec), time=args.time, points=201, epsilon=0.0).table
            else:
                th = solve_spectral(load_spec(spec), time=args.time, points=101, size=args.size, error_estimate=False).table
            theory[act, kind] = th
            t_th = time.perf_counter() - t0
            runs = [run_sgd(spec, args.dim, s, args.time, args.points, out, args.dtype) for s in range(args.seeds)]
            sims[act, kind] = runs
            ok = [r for r in runs if np.isnan(r["diverged_at"])]
            row = {"var_g0": var0, "theory_s": t_th, "sgd_s": [float(r["wall_s"]) for r in runs],
                   "diverged_at": [None if np.isnan(r["diverged_at"]) else float(r["diverged_at"]) for r in runs]}
            if ok:
                ts = ok[0]["time"]
                p_sim = np.mean([np.abs(r["p"]) if kind == "direct" else r["p"] for r in ok], axis=0)
                p_th = np.interp(ts, th["time"], th["p_student_teacher"])
                p_th = np.abs(p_th) if kind == "direct" else p_th
                row.update(max_dev=float(np.max(np.abs(p_th - p_sim))), final_sgd=float(p_sim[-1]),
                           final_theory=float(p_th[-1]), seeds_ok=len(ok))
            summary[f"{act}_{kind}"] = row
            print(f"{act:6s} {kind:6s}: " + json.dumps(row), flush=True)
    with atomic_target(out / "summary.json") as tmp:
        Path(tmp).write_text(json.dumps({"settings": vars(args), "runs": summary}, indent=1))

    from matplotlib.figure import Figure
    fig = Figure(figsize=(15, 4))
    axes = fig.subplots(1, len(args.acts))
    for ax, act in zip(np.atleast_1d(axes), args.acts):
        for kind, col in (("direct", "C3"), ("tied", "C0")):
            th = theory[act, kind]
            y = th["p_student_teacher"]
            ax.plot(th["time"], np.abs(y) if kind == "direct" else y, "-", color=col, lw=2,
                    label=f"{kind}: " + ("closed system" if kind == "direct" else f"matrix-level limit N={args.size}"))
            for r in sims[act, kind]:
                if np.isnan(r["diverged_at"]):
                    ax.plot(r["time"], np.abs(r["p"]) if kind == "direct" else r["p"], "o", color=col, ms=3, alpha=0.6)
                else:
                    ax.axvline(r["diverged_at"], color=col, ls=":", lw=1)
        ax.set_title(f"{act}: unnormalised p₁₂ = q₁₂ − t₁t₂ (direct: seed mean of |p₁₂|)", fontsize=9)
        ax.set_xlabel("time τ = nα/d")
        ax.set_ylabel("p₁₂")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fig.suptitle(f"Fig. 2 setting: SGD d = {args.dim} (dots: {args.seeds} seeds; dotted line: a seed diverged), "
                 f"B = {args.batch}, ε = {args.eps}; tied σ = {args.sigma:.4g}, direct: {args.direct_kind} (App. E start)")
    fig.tight_layout()
    fig.savefig(out / "fig2_d400.png", dpi=110)
    if args.figure:
        fig.savefig(args.figure, dpi=110)


if __name__ == "__main__":
    main()
