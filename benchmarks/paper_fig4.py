"""The paper's Fig. 4 (App. D.3): the matrix Riccati example at the caption's setting, for both of the paper's losses.

Tied student (κ = 0.5, σ = 1: a Marchenko–Pastur law with an atom ½ at 0), frozen identity teacher S₂ = cI (c = 1),
L = 1, linear, γ = 0; d = 400, "learning rate" 0.01 on the batch mean, B = 512 (ε = lr·d/B = 0.0078). Two losses:

* the paper's (339), 𝓛 = (G₁ − G₂)² (un-halved): each student eigenvalue obeys λ̇ = 4cλ − 4λ² in the paper's time
  (eq. 347), i.e. 16cλ − 16λ² in package time τ = nα/d;
* the package's ½-MSE, ½(G₁ − G₂)²: 8cλ − 8λ² in package time.

So μ₁(τ) = ∫ cλ/(λ + (c − λ)e^{−r c τ}) dρ₀(λ) with r = 16 or 8 (ρ₀ by 20 000 quantiles); the truncations M = 2, 4,
6, 8 (zero truncation, eq. 13) converge to it inside the radius ln(λ₀/(λ₀ − c))/(r c) (λ₀ = (1 + √κ)² the largest
initial eigenvalue: 0.026 and 0.053) and diverge beyond; online SGD (2 seeds, float64) follows it. Prints max errors
and wall times, writes the figure.

    python benchmarks/paper_fig4.py [--dim 400] [--seeds 2] [--time 0.1] [--out fig4] [--figure PNG]
"""
from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

import symattn
from symattn.derivation import derive
from symattn.integration import integrate
from symattn.symbolic.spectra import free_poisson_quantiles

LOSSES = {"paper (339): (G1 − G2)²": ("(G_1_1_1 - G_1_1_2)**2", 16.0),
          "package: ½(G1 − G2)²": ("(G_1_1_1 - G_1_1_2)**2/2", 8.0)}


def spec_of(loss, lr, batch):
    return {"name": "fig4", "model": {"tokens": 1, "loss": loss},
            "indices": [{"name": "student", "role": "student", "parameterization": "tied", "width": 0.5,
                         "init_scale": 1.0},
                        {"name": "teacher", "role": "teacher", "parameterization": "identity", "scale": 1.0}],
            "training": {"batch_size": batch, "learning_rate": lr, "weight_decay": 0.0}, "theory": {"truncation": 8}}


def exact_trace(t, rate, c=1.0, kappa=0.5, sigma2=1.0, n=20_000):
    lam = free_poisson_quantiles(n, kappa, sigma2)
    e = np.exp(-rate * c * np.asarray(t)[:, None])
    with np.errstate(invalid="ignore", divide="ignore"):
        v = np.where(lam[None, :] > 0, c * lam[None, :] / (lam[None, :] + (c - lam[None, :]) * e), 0.0)
    return v.mean(axis=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--time", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--out", default="fig4")
    ap.add_argument("--figure", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lam0 = (1 + np.sqrt(0.5)) ** 2
    from matplotlib.figure import Figure
    fig = Figure(figsize=(12, 4))
    axes = fig.subplots(1, 2)
    for ax, (label, (loss, rate)) in zip(axes, LOSSES.items()):
        spec = symattn.load_spec(spec_of(loss, args.lr, args.batch))
        radius = np.log(lam0 / (lam0 - 1.0)) / rate
        t = np.linspace(0, args.time, 101)
        exact = exact_trace(t, rate)
        ax.plot(t, exact, "k-", lw=2, label=f"exact (347): λ̇ = {rate:g}(cλ − λ²) in τ")
        print(f"[{label}] ε = {spec.epsilon(args.dim):.4g}, convergence radius τ = {radius:.4f}")
        for M in (2, 4, 6, 8):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = integrate(derive(spec, M), time=args.time, points=101, epsilon=0.0, check_truncation=False)
            n = len(res.table["time"])
            half = res.table["time"] <= radius / 2
            err_in = float(np.max(np.abs(res.table["tr_student"][half] - exact[:n][half])))
            print(f"  M = {M}: max |tr − exact| on τ ≤ radius/2 {err_in:.2e}; rows written to τ = "
                  f"{res.table['time'][-1]:.4g}" + (f" (diverged at {res.diverged_at:.4g})" if res.diverged_at else ""))
            ax.plot(res.table["time"], res.table["tr_student"], "--", label=f"M = {M}")
        t0 = time.perf_counter()
        sim = symattn.simulate(spec, dim=args.dim, seeds=args.seeds, time=args.time, points=21, progress=False,
                               test_samples=0, potential=False)
        wall = time.perf_counter() - t0
        ex = exact_trace(sim.table["time"], rate)
        dev = float(np.max(np.abs(sim.table["tr_student"] - ex)))
        print(f"  SGD d = {args.dim}, {args.seeds} seeds, {sim.info['steps_total']} steps: max |tr − exact| {dev:.4f} "
              f"(seed s.e. ≤ {float(np.max(sim.table['tr_student_sem'])):.4f}); {wall:.0f} s")
        ax.errorbar(sim.table["time"], sim.table["tr_student"], yerr=sim.table["tr_student_sem"], fmt="o", ms=3,
                    color="C3", label=f"SGD d = {args.dim}")
        ax.axvline(radius, color="grey", ls=":", lw=1)
        ax.set_ylim(min(exact) - 0.1, max(exact) + 0.1)
        ax.set_title(f"{label}: tr S₁ = Tr S₁/d", fontsize=9)
        ax.set_xlabel("package time τ = nα/d")
        ax.legend(fontsize=7)
    fig.suptitle(f"Fig. 4 setting: Riccati, κ = 0.5, σ = 1, c = 1, d = {args.dim}, lr {args.lr}, B = {args.batch}")
    fig.tight_layout()
    fig.savefig(out / "fig4.png", dpi=110)
    if args.figure:
        fig.savefig(args.figure, dpi=110)


if __name__ == "__main__":
    main()
