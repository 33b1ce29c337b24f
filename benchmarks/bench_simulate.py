"""Benchmark of the online-SGD step (symattn.simulation.sgd.Model.step) against a per-sample NumPy loop.

Tied L=2 softmax student (κ=1, σ=1) and tied teacher (κ*=0.5), B=512, d=200 and 400, ε=0.01.
Runs a fixed number of steps (package time 1 needs d²/(εB) steps: 7812 at d=200, 31250 at d=400)
and extrapolates the time to package time 1. Matmul flops per step (vectorised step, F = [W, W*]):
forward 2·BL·d·(d_k+d_k*), backward 2·BL·d·d_k, batched L×L products 2·B·L²·(2d_k+d_k*).

    python benchmarks/bench_simulate.py [--steps N] [--naive-steps N] [--threads T] [--dims 200 400]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_limits

from symattn import load_spec
from symattn.simulation import Model, draw_initial

SPEC = {
    "name": "bench_tied_softmax_L2",
    "model": {"tokens": 2, "activation": "softmax"},
    "indices": [
        {"name": "student", "role": "student", "parameterization": "tied", "width": 1.0, "init_scale": 1.0},
        {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5, "init_scale": 1.0},
    ],
    "training": {"batch_size": 512, "noise_ratio": 0.01},
}


def naive_step(model: Model, X, xi=None):
    """Reference: loop over samples, one d×d_k gradient matrix per sample, same update rule."""
    W, Wt = model.state[0]["W"], model.state[1]["W"]
    d, C, L = model.d, model.C, model.L
    sq = np.sqrt(d)
    trs, trt = np.sum(W * W), np.sum(Wt * Wt)
    grad = np.zeros_like(W)
    for b in range(X.shape[0]):
        x = X[b]                                   # L×d
        Y, Yt = x @ W, x @ Wt
        G = np.empty((1, L, L, 2))
        G[0, :, :, 0] = (Y @ Y.T - C * trs) / sq
        G[0, :, :, 1] = (Yt @ Yt.T - C * trt) / sq
        _, e = model.loss_grad(G, None if xi is None else xi[b:b + 1])
        e = e[0, :, :, 0]
        grad += (x.T @ ((e + e.T) @ Y) - 2 * np.sum(e * C) * W) / sq
    grad /= X.shape[0]
    W *= 1.0 - model.alpha * model.gamma / d
    W -= model.alpha * grad


def flops_per_step(B, L, d, dk, dkt):
    return 2 * B * L * d * (dk + dkt) + 2 * B * L * d * dk + 2 * B * L * L * (2 * dk + dkt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[200, 400])
    ap.add_argument("--steps", type=int, default=300, help="vectorised steps timed per d")
    ap.add_argument("--naive-steps", type=int, default=3, help="per-sample-loop steps timed per d")
    ap.add_argument("--threads", type=int, default=1, help="OpenBLAS threads (default 1)")
    args = ap.parse_args()
    threadpool_limits(args.threads, user_api="blas")
    spec = load_spec(SPEC)
    rows = []
    for d in args.dims:
        rng = np.random.default_rng(0)
        m = Model(spec, d)
        init = draw_initial(spec, d, rng)
        m.set_state(init)
        # agreement of the two implementations on one batch
        X, xi = m.sample(rng)
        ref = Model(spec, d, loss_grad=m.loss_grad)
        ref.set_state(init)
        m.step(X, xi)
        naive_step(ref, X, xi)
        err = np.abs(m.state[0]["W"] - ref.state[0]["W"]).max() / np.abs(init[0]["W"]).max()
        for _ in range(5):                         # warm-up
            m.step(*m.sample(rng))
        t0 = time.perf_counter()
        for _ in range(args.steps):
            m.step(*m.sample(rng))
        tv = (time.perf_counter() - t0) / args.steps
        t0 = time.perf_counter()
        for _ in range(args.naive_steps):
            naive_step(ref, *ref.sample(rng))
        tn = (time.perf_counter() - t0) / args.naive_steps
        B, L = spec.batch_size, spec.tokens
        dk, dkt = init[0]["W"].shape[1], init[1]["W"].shape[1]
        fl = flops_per_step(B, L, d, dk, dkt)
        n1 = int(round(d / m.alpha))               # steps to package time 1
        rows.append((d, 1 / tv, fl / tv / 1e9, 1 / tn, tn / tv, n1, n1 * tv, err))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nOpenBLAS threads {args.threads}, cores {os.cpu_count()}, load average {load:.2f}\n")
    print("| d | steps/s | GFLOP/s | naive steps/s | speed-up | steps to t=1 | est. time to t=1 (s) | max rel. diff |")
    print("|---|---|---|---|---|---|---|---|")
    for d, sps, gf, nsps, sp, n1, t1, err in rows:
        print(f"| {d} | {sps:.1f} | {gf:.1f} | {nsps:.3f} | {sp:.0f}× | {n1} | {t1:.0f} | {err:.1e} |")


if __name__ == "__main__":
    main()
