"""Steps/s and GFLOP/s of the simulator backends: NumPy and PyTorch, float64 and float32, per device.

The README example (tied softmax L = 2, κ = 1, teacher κ* = 0.5, B = 512) at d = 200, 400, 800.
One timed unit is an SGD step of every seed including drawing its batch (what ``simulate`` does
between measurements). NumPy runs one seed per process (its contract), so its figure is per seed;
torch runs ``--seeds`` seeds in one batched step. Samples/s: steps/s × seeds served × the batch size B. GFLOP/s counts the matmul flops of the step
(``simulate.run.estimate``) times the seeds served. Each configuration is warmed up for two steps.

    python benchmarks/bench_backends.py [--dims 200 400 800] [--steps N] [--seeds S] [--threads T]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from symattn import load_spec
from symattn.simulation.init import draw_initial
from symattn.simulation.run import estimate
from symattn.simulation.sgd import Model


def bench_numpy(spec, d, dtype, steps):
    m = Model(spec, d, dtype=np.dtype(dtype))
    rng = np.random.default_rng(0)
    m.set_state(draw_initial(spec, d, rng))
    for _ in range(2):
        m.step(*m.sample(rng))
    t0 = time.perf_counter()
    for _ in range(steps):
        m.step(*m.sample(rng))
    return steps / (time.perf_counter() - t0), 1


def bench_torch(spec, d, dtype, steps, seeds, device):
    import torch

    from symattn.simulation.torch_backend import TorchModel
    m = TorchModel(spec, d, seeds, device=device, dtype=dtype)
    m.set_state([draw_initial(spec, d, np.random.default_rng(s)) for s in range(seeds)])
    gen = torch.Generator(device=m.device)
    gen.manual_seed(0)
    sync = torch.cuda.synchronize if m.device.type == "cuda" else (lambda: None)
    with torch.no_grad():
        for _ in range(2):
            m.step(*m.sample(gen))
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            m.step(*m.sample(gen))
        sync()
    return steps / (time.perf_counter() - t0), seeds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="tied_softmax_L2")
    ap.add_argument("--dims", type=int, nargs="+", default=[200, 400, 800])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=4, help="seeds batched by the torch backend")
    ap.add_argument("--threads", type=int, default=1, help="BLAS / torch CPU threads")
    ap.add_argument("--no-numpy", action="store_true", help="only the torch backend (the device run)")
    args = ap.parse_args()
    spec = load_spec(args.spec)
    rows = []
    try:
        import torch
        torch.set_num_threads(args.threads)
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        name = {"cpu": "CPU", "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""}
    except ImportError:
        torch, devices, name = None, [], {}
    with threadpool_limits(args.threads, user_api="blas"):
        for d in args.dims:
            flop = estimate(spec, d)["flop_per_step"]
            for dtype in ("float64", "float32"):
                if not args.no_numpy:
                    sps, s = bench_numpy(spec, d, dtype, args.steps)
                    rows.append(("numpy", "CPU", dtype, d, sps, s, sps * s * flop / 1e9))
                for dev in devices:
                    n = args.steps * (20 if dev == "cuda" else 1)
                    sps, s = bench_torch(spec, d, dtype, n, args.seeds, dev)
                    rows.append(("torch", name[dev], dtype, d, sps, s, sps * s * flop / 1e9))
                print(*[f"{r}" for r in rows[-1]], flush=True)
    print(f"\n{args.spec}, B = {spec.batch_size}, {args.threads} CPU thread(s)\n")
    print("| backend | device | dtype | d | steps/s | seeds per step | samples/s | GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for b, dev, dt, d, sps, s, gf in rows:
        print(f"| {b} | {dev} | {dt} | {d} | {sps:.3g} | {s} | {sps * s * spec.batch_size:.3g} | {gf:.3g} |")


if __name__ == "__main__":
    main()
