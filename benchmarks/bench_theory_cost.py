"""Cost of the default all-time theory (`theory`, --method auto → the matrix-level flow) against the SGD
it replaces, and how that cost grows (issue: the default theory ≥ 10× cheaper than SGD).

1. whole processes, warm caches (each command run once before it is timed): `symattn theory SPEC --time T`
   against `symattn simulate SPEC --dim 200 --seeds 1 --time T`, on the README example (tied softmax
   L = 2, T = 0.25) and tied h2 L = 1 (T = 2); `theory --quick` too;
2. the same theory in-process, warm (the function the command calls, after one call; the median over five
   base seeds), before and right after the simulation (the ratio against their mean);
3. where a warm process spends its time (imports, loading the stored derivation and compiled module,
   the flow at each size);
4. cost growth of one noise path: time against N (64 … 1024, τ = 0.25), horizon (0.25 … 4, N = 128) and the
   number of indices (1 student + 1 teacher; 2 heads + 2 teachers), with the fitted exponent in N.

Run: ``python benchmarks/bench_theory_cost.py [--quick-only]`` (state the machine load; the simulate runs take
≈ 15 s and 60–110 s on the 2-core machine, whose speed drifts).
"""
import os
import subprocess
import sys
import time

import numpy as np

from symattn.spec import load_spec

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = [("README example, tied softmax L = 2", "examples/tied_softmax_L2.toml", 0.25),
         ("tied h2 L = 1", "examples/tied_h2_L1.toml", 2.0)]
TWO_HEADS = {"name": "two_head_softmax_L2", "model": {"tokens": 2, "activation": "softmax", "beta": 1.0},
             "indices": [{"name": n, "role": r, "parameterization": "tied", "width": w, "init_scale": s}
                         for n, r, w, s in [("s1", "student", 1.0, 0.7), ("s2", "student", 1.0, 0.7),
                                            ("t1", "teacher", 0.5, 1.0), ("t2", "teacher", 0.5, 1.0)]],
             "training": {"batch_size": 512, "noise_ratio": 0.01}}


def wall(cmd) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def symattn(*args):
    return [sys.executable, "-m", "symattn", *args, "--quiet"]


def in_process(path, T, quick=False, seeds=5) -> float:
    """Median wall time of the warm in-process theory (``symattn.theory``, what the command runs) over base seeds
    0 … seeds − 1: the number of steps a noise path takes depends on its draws (README example: 11–14 at N = 128)."""
    from symattn import theory
    quick = quick or None
    theory(path, time=T, quick=quick)
    walls = []
    for seed in range(seeds):
        t = time.perf_counter()
        theory(path, time=T, quick=quick, seed=seed)
        walls.append(time.perf_counter() - t)
    return float(np.median(walls))


def whole_process(sim=True):
    print("1./2. default theory vs simulate (d = 200, 1 seed), warm caches")
    for label, path, T in CASES:
        out = "/tmp/bench_theory_cost.csv"
        th_cmd = symattn("theory", path, "--time", str(T), "--out", out)
        q_cmd = symattn("theory", path, "--time", str(T), "--quick", "--out", out)
        wall(th_cmd)
        wall(q_cmd)
        th = min(wall(th_cmd) for _ in range(2))
        quick = min(wall(q_cmd) for _ in range(2))
        inproc, inproc_q = in_process(path, T), in_process(path, T, quick=True)
        line = (f"  {label}, τ ≤ {T}: theory {th:.2f} s (in-process {inproc:.3f} s), --quick {quick:.2f} s "
                f"(in-process {inproc_q:.3f} s)")
        if sim:
            s = wall(symattn("simulate", path, "--dim", "200", "--seeds", "1", "--time", str(T), "--out", out))
            # the machine's speed drifts by ±20 % over minutes: the in-process theory again right after the
            # simulation, and the ratio against the mean of the two
            after = in_process(path, T)
            line += (f"; simulate {s:.1f} s, then in-process {after:.3f} s → ratio {s / th:.1f}× whole process, "
                     f"{2 * s / (inproc + after):.0f}× in-process; --quick {s / quick:.1f}× / {s / inproc_q:.0f}×")
        print(line, flush=True)


def profile():
    print("3. where a warm `theory` process spends its time (README example)")
    imp = wall([sys.executable, "-c", "import symattn.cli, symattn.spectral, symattn.codegen.potential, sympy, numba"])
    print(f"  interpreter + imports: {imp:.2f} s")
    from symattn.codegen.potential import compiled_potential
    from symattn.spectral import solve_spectral
    spec = load_spec(CASES[0][1])
    t = time.perf_counter()
    P = compiled_potential(spec)
    print(f"  stored derivation + compiled module (in a process that has them loaded: a dictionary look-up): "
          f"{time.perf_counter() - t:.3f} s")
    for N in (128, 64):
        t = time.perf_counter()
        r = solve_spectral(spec, time=0.25, size=N, epsilon=0.01, noise_realisations=1, rotations=4,
                           spectra=False, error_estimate=False, potential=P)
        print(f"  flow at N = {N}, 4 realisations × 1 noise path: {time.perf_counter() - t:.3f} s, "
              f"{r.info['noise_steps']} steps, {r.info['rhs_evaluations']} evaluations", flush=True)


def growth():
    from symattn.spectral import solve_spectral

    def one(spec, N, T):
        spec = load_spec(spec)
        kw = dict(time=T, size=N, epsilon=0.01, noise_realisations=1, spectra=False, error_estimate=False)
        solve_spectral(spec, **{**kw, "size": 16, "time": min(T, 0.01)})            # warm
        t = time.perf_counter()
        r = solve_spectral(spec, **kw)
        return time.perf_counter() - t, r.info["noise_steps"]

    print("4. cost growth of one noise path (tied softmax L = 2)")
    sizes, times = [64, 128, 256, 512, 1024], []
    for N in sizes:
        w, steps = one(CASES[0][1], N, 0.25)
        times.append(w)
        print(f"  N = {N:5d}, τ = 0.25: {w:.3f} s ({steps} steps)", flush=True)
    big = [i for i, N in enumerate(sizes) if N >= 256]
    slope = np.polyfit(np.log([sizes[i] for i in big]), np.log([times[i] for i in big]), 1)[0]
    print(f"  fitted exponent in N (N ≥ 256): {slope:.2f}")
    for T in (0.25, 0.5, 1.0, 2.0, 4.0):
        w, steps = one(CASES[0][1], 128, T)
        print(f"  N = 128, τ = {T}: {w:.3f} s ({steps} steps)", flush=True)
    for label, spec in (("1 student + 1 teacher", CASES[0][1]), ("2 heads + 2 teachers", TWO_HEADS)):
        w, steps = one(spec, 128, 0.25)
        print(f"  {label}, N = 128, τ = 0.25: {w:.3f} s ({steps} steps)", flush=True)


if __name__ == "__main__":
    print(f"load average at start: {os.getloadavg()}; {os.cpu_count()} cores; BLAS threads "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'default')}")
    quick_only = "--quick-only" in sys.argv
    whole_process(sim=not quick_only)
    if not quick_only:
        profile()
        growth()
    print(f"load average at end: {os.getloadavg()}")
