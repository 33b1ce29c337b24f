"""Fig. 1's truncated hierarchies: the truncation error against M, and its geometric decay (P Cor. 2).

Tied softmax attention, L = 2 (the README example at the paper's Fig. 1 setting, ε → 0 as in the
figure). The hierarchies M = 2, 4, …, ``--max-m`` are integrated from the free start; the error of
truncation M at time τ is e_M(τ) = max over the columns (tr, q, p, loss) of |μ_M(τ) − μ_ref(τ)|, with
the reference the largest truncation, itself checked against the matrix-level flow (N = ``--size``, 4
rotations, inside its ``_err``). Corollary 2 bounds the truncation error by C·(τ/τ*)^{M/2}-type geometric
decay inside a radius τ*: at each τ the slope of log e_M against M gives the rate ρ(τ) (e_M ∝ ρ^M), and
ρ(τ) = (τ/τ*)^β fitted over τ gives the radius τ* (where ρ = 1: the hierarchy stops converging).

    python benchmarks/paper_fig1_truncation.py [--max-m 12] [--size 1024] [--time 0.5] [--out docs/figures/paper_fig1_truncation.png]
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from symattn.spec import load_spec

COLS = ("tr_student", "q_student_student", "p_student_student", "q_student_teacher", "loss")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-m", type=int, default=12)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--time", type=float, default=0.5)
    ap.add_argument("--points", type=int, default=21)
    ap.add_argument("--out", default="docs/figures/paper_fig1_truncation.png")
    args = ap.parse_args()
    from symattn.derivation import derive
    from symattn.integration import integrate
    from symattn.spectral import solve_spectral
    spec = load_spec("tied_softmax_L2", settings={"training.noise_ratio": 0.0078, "training.batch_size": 512})
    Ms = list(range(2, args.max_m + 1, 2))
    tab, cost = {}, {}
    for M in Ms:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = integrate(derive(spec, M), time=args.time, points=args.points, epsilon=0.0, check_truncation=False)
        cost[M] = time.perf_counter() - t0
        tab[M] = r.table
        n = len(r.table["time"])
        print(f"M = {M:2d}: {n} of {args.points} points before divergence, {cost[M]:.1f} s", flush=True)
    t = tab[Ms[0]]["time"]
    t0 = time.perf_counter()
    th = solve_spectral(load_spec(spec), time=args.time, points=args.points, size=args.size, rotations=4, epsilon=None,
                        spectra=False)
    top, below = tab[Ms[-1]], tab[Ms[-2]]
    # the reference: the largest truncation where it has converged (its gap to M − 2 below 1e-7), else the
    # matrix-level flow, whose <col>_err then bounds what can be resolved (errors under 3·err are dropped)
    conv = np.max([np.abs(top[c] - below[c]) for c in COLS], axis=0)
    use_top = conv < 1e-7
    floor = np.where(use_top, 1e-11, 3 * np.max([th.table[c + "_err"] for c in COLS], axis=0))
    check = max(float(np.max((np.abs(top[c] - th.table[c]) - th.table[c + "_err"])[use_top])) for c in COLS)
    print(f"matrix level N = {args.size} ({time.perf_counter() - t0:.0f} s); M = {Ms[-1]} is the reference to "
          f"τ = {t[use_top][-1]:.3f} (max(|dev| − err) against the matrix level there {check:.1e}: ≤ 0 inside its "
          f"error), the matrix level after it")
    ref = {c: np.where(use_top, top[c], th.table[c]) for c in COLS}
    err = np.full((len(Ms) - 1, len(t)), np.nan)
    for i, M in enumerate(Ms[:-1]):
        n = len(tab[M]["time"])
        e = np.max([np.abs(tab[M][c] - ref[c][:n]) for c in COLS], axis=0)
        err[i, :n] = np.where(e > floor[:n], e, np.nan)
    print("e_M(τ) = max over columns |M − M_ref|:")
    print("  τ      " + "  ".join(f"M={M:<7d}" for M in Ms[:-1]) + "  rate ρ per unit M")
    rates = []
    for j in range(1, len(t)):
        e = err[:, j]
        # M = 2 keeps no word beyond q (its error is first order in τ, not on the geometric line); values
        # below 1e-11 are the reference's own integration error
        ok = np.isfinite(e) & (np.array(Ms[:-1]) >= 4)
        slope = np.polyfit(np.array(Ms[:-1])[ok], np.log(e[ok]), 1)[0] if ok.sum() >= 2 else np.nan
        rates.append(np.exp(slope))
        print(f"  {t[j]:.4f} " + "  ".join(f"{v:9.2e}" for v in e) + f"  {np.exp(slope):.3f}")
    rates = np.array(rates)
    good = np.isfinite(rates) & (rates < 0.9)
    beta, logc = np.polyfit(np.log(t[1:][good]), np.log(rates[good]), 1)
    radius = np.exp(-logc / beta)
    print(f"fit ρ(τ) = (τ/τ*)^β: β = {beta:.2f}, radius τ* = {radius:.4f} (paper time {4 * radius:.3f})")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    for j in range(2, len(t), 2):
        ax[0].semilogy(Ms[:-1], err[:, j], "o-", label=f"τ = {t[j]:.3f}")
    ax[0].set_xlabel("truncation M")
    ax[0].set_ylabel("max over columns |μ_M − μ_ref|")
    ax[0].legend(fontsize=8)
    ax[0].set_title("truncation error against M (geometric)")
    ax[1].loglog(t[1:], rates, "o", label="fitted rate ρ(τ)")
    tt = np.geomspace(t[1], max(radius, t[-1]) * 1.2, 50)
    ax[1].loglog(tt, (tt / radius) ** beta, "-", label=f"(τ/τ*)^{beta:.2f}, τ* = {radius:.3f}")
    ax[1].axhline(1.0, color="k", lw=0.5)
    from matplotlib.ticker import NullFormatter
    ax[1].xaxis.set_minor_formatter(NullFormatter())
    ax[1].set_xlabel("package time τ")
    ax[1].set_ylabel("ρ (per unit of M)")
    ax[1].legend(fontsize=8)
    ax[1].set_title("rate and radius (Corollary 2)")
    fig.suptitle("Fig. 1 setting: tied softmax L = 2, ε → 0")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}; hierarchy cost {', '.join(f'M={M}: {c:.1f} s' for M, c in cost.items())}")


if __name__ == "__main__":
    main()
