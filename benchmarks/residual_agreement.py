"""Residual attention with value matrices (docs/theory.md §10): the measured agreement of issue "beyond one layer".

1. Φ of the two-layer example in the Gaussian limit (QMC, 2^15 × 8 points) against Monte Carlo of the residual
   recursion on real d × d matrices (each d its own draw, Φ_limit at that draw's order parameters; 400 000 samples
   each): deviation, standard errors, deviation / combined SE; d = 400 and 800 (``--scan``: also d = 12 … 200,
   where the O(1/d) finite-d deviation is resolved).
2. The matrix-level flow started from each SGD seed's own matrices against online SGD on the recursion, every order
   parameter, τ ≤ 0.2, d = 100, 200 (and 400 unless --quick), 3 seeds, at ε = 0.05 and ε = 0.01 (the O(ε) SGD-noise
   correction, absent from the flow, sets a floor under the finite-d gap).
3. The N → ∞ theory (N = 400 and 200, Richardson, 4 draws) against the seed mean at d = 200.
Run: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/residual_agreement.py [--quick] [--skip-phi]``
(state the machine load; torch's threads oversubscribe a shared machine otherwise)."""
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from symattn.architecture import GaussianLimit, flow, load_residual, sgd, unroll  # noqa: E402  # noqa: E402
from symattn.architecture import network as nw  # noqa: E402

SPEC = "residual_tied_softmax_L2"


def phi_vs_real(u, spec, dims=(400, 800), samples=400_000):
    lim = GaussianLimit(u, points=2**15, replicas=8)
    for d in dims:
        t = time.perf_counter()
        mats = nw.matrices(spec, nw.draw_factors(spec, d, 2))
        phi, se = lim.phi(lim.values(u.word_matrices(mats), d))
        rng = np.random.default_rng(d)
        v = np.concatenate([nw.batch_loss(spec, mats, rng.standard_normal((5000, 2, d)))
                            for _ in range(samples // 5000)])
        mse = v.std() / math.sqrt(len(v))
        dev = v.mean() - phi
        print(f"1. d={d}: Φ_limit={phi:.5f} ± {se:.1e}, MC={v.mean():.5f} ± {mse:.1e}, deviation={dev:+.2e} "
              f"= {dev / math.hypot(se, mse):+.2f} SE  ({time.perf_counter() - t:.0f} s)", flush=True)


def flow_vs_sgd(spec, u, lim, d, eps, seeds=(0, 1, 2), horizon=0.2):
    spec = load_residual({**spec.raw, "training": {**spec.raw["training"], "noise_ratio": eps}})
    t = time.perf_counter()
    res = sgd.simulate_residual(spec, d, horizon, points=5, seeds=seeds)
    ts = time.perf_counter() - t
    worst, which = [], []
    t = time.perf_counter()
    for i, s in enumerate(seeds):
        fl = flow.flow_from(spec, nw.draw_factors(spec, d, s), d, res["time"], lim, u)
        devs = {c: np.abs(res[c][i] - fl[c]).max() for c in lim.names}
        c = max(devs, key=devs.get)
        worst.append(devs[c])
        which.append(c)
    tf = time.perf_counter() - t
    print(f"2. d={d} ε={eps}: max |SGD − flow| per seed {np.round(worst, 4).tolist()} ({', '.join(which)}); "
          f"SGD {ts:.0f} s, flow {tf:.0f} s", flush=True)
    return res


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    print(f"load average at start: {os.getloadavg()}", flush=True)
    spec = load_residual(SPEC)
    u = unroll(spec)
    if "--scan" in sys.argv:
        phi_vs_real(u, spec, dims=(12, 25, 50, 100, 200), samples=400_000)
        sys.exit(0)
    if "--skip-phi" not in sys.argv:
        phi_vs_real(u, spec, samples=100_000 if quick else 400_000)
    lim = GaussianLimit(u, points=2**14, replicas=4)
    for eps in (0.05, 0.01):
        for d in ((100, 200) if quick or eps == 0.01 else (100, 200, 400)):
            res = flow_vs_sgd(spec, u, lim, d, eps)
            if d == 200 and eps == 0.05:
                keep = res
    free = flow.solve_residual(spec, 0.2, points=5, size=400, draws=4, limit=lim)
    dev = {c: np.abs(keep[c].mean(0) - free[c]).max() for c in lim.names}
    sem = {c: (keep[c].std(0, ddof=1) / math.sqrt(keep[c].shape[0])).max() for c in lim.names}
    c = max(dev, key=dev.get)
    print(f"3. N→∞ theory (N=400/200, 4 draws) vs the 3-seed mean at d=200, ε=0.05: max deviation {dev[c]:.4f} "
          f"({c}; its seed SEM {sem[c]:.4f}; extrapolation error estimate {free[c + '_err'].max():.4f})")
