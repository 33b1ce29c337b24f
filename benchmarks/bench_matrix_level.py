"""Matrix-level solver speed (issue: all-time limit). Wall times of
1. the README's spectral example ``theory examples/tied_h2_L1.toml --method spectral --size 500 --time 2``
   (SGD noise on: ε = 0.01, 4 antithetic paths, plus the N/2 error run);
2. tied h2 with SGD noise ε = 0.01 at N = 800 to τ = 0.05 (4 paths, no N/2 run);
3. matrix-level theory against SGD at d = N = 200 on the same horizon (tied h2, τ = 2, the example's): the ratio,
   theory with the noise terms (4 antithetic paths, and 1 path: one noise realisation, as one SGD seed) and
   without.
Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_matrix_level.py`` (state the machine load)."""
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from symattn.simulation.run import simulate  # noqa: E402
from symattn.spec import load_spec
from symattn.spectral import solve_spectral  # noqa: E402

SPEC = load_spec("examples/tied_h2_L1.toml")


def clock(f):
    t = time.perf_counter()
    out = f()
    return time.perf_counter() - t, out


if __name__ == "__main__":
    print(f"load average at start: {os.getloadavg()}")
    w1, r1 = clock(lambda: solve_spectral(SPEC, time=2.0, size=500, epsilon=0.01, noise_realisations=4,
                                          noise_antithetic=True))
    print(f"1. README spectral example N=500 τ=2 (noise, 4 paths, + N/2): {w1:.1f} s, "
          f"{r1.info['noise_steps']} noise steps")
    w2, r2 = clock(lambda: solve_spectral(SPEC, time=0.05, size=800, points=6, epsilon=0.01, noise_realisations=4,
                                          noise_antithetic=True, error_estimate=False))
    print(f"2. tied h2 noise ε=0.01 N=800 τ≤0.05 (4 paths): {w2:.1f} s, {r2.info['noise_steps']} noise steps")
    w3, _ = clock(lambda: solve_spectral(SPEC, time=2.0, size=200, points=21, epsilon=0.01, noise_realisations=4,
                                         noise_antithetic=True, error_estimate=False))
    w6, _ = clock(lambda: solve_spectral(SPEC, time=2.0, size=200, points=21, epsilon=0.01, error_estimate=False))
    w5 = min(clock(lambda: solve_spectral(SPEC, time=2.0, size=200, points=21, error_estimate=False))[0]
             for _ in range(3))
    w4, _ = clock(lambda: simulate(SPEC, 200, seeds=1, time=2.0, points=21, progress=False, workers=1))
    print(f"3. d = N = 200, τ ≤ 2: SGD (1 seed) {w4:.1f} s; matrix level with noise, 4 paths {w3:.2f} s "
          f"(ratio {w4 / w3:.0f}×), 1 path {w6:.2f} s ({w4 / w6:.0f}×); without noise {w5:.2f} s, ratio {w4 / w5:.0f}×")
    print(f"load average at end: {os.getloadavg()}")
