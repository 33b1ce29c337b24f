"""Accuracy of the default all-time theory against a large-N reference, and whether its `<col>_err` columns
hold the true error (issue: the default theory cheaper than SGD, `_err` still honest).

Reference: the mean of 4 realisations at N = 1024 (README example, tied softmax L = 2, τ ≤ 0.25) or N = 512
(tied h2 L = 1, τ ≤ 2), with the SGD-noise terms. Candidates, each from three base seeds: the former default
(one realisation at N = 256 and 128, extrapolated in 1/N, 4 antithetic noise paths), the default (the mean of
4 realisations at N = 128, `_err` = |m(N) − m(N/2)| ⊕ t·SEM) and `--quick` (N = 64). Printed: the largest
|candidate − reference| over all columns and times, and the share of (time, column) points where it exceeds
the candidate's own `_err`.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/theory_accuracy.py`` (≈ 3 min on the 2-core machine).
``--coverage`` instead scans the default estimator over twelve base seeds (0, 50, …, 550) against the same
reference — whether `_err` holds the deviation depends on the draws, and three seeds can show 0 % by luck —
and prints the share outside per seed and on average (≈ 1 min more).
"""
import sys
import time

import numpy as np

from symattn.methods import DEFAULT_ROTATIONS, DEFAULT_SIZE, QUICK_SIZE
from symattn.spec import load_spec
from symattn.spectral import solve_spectral

CASES = [("README example", "examples/tied_softmax_L2.toml", 0.25, 1024), ("tied h2 L = 1", "examples/tied_h2_L1.toml", 2.0, 512)]
CANDIDATES = [("former default", dict(size=256, rotations=1, noise_realisations=4, noise_antithetic=True, extrapolate=True)),
              ("default", dict(size=DEFAULT_SIZE, rotations=DEFAULT_ROTATIONS)),
              ("--quick", dict(size=QUICK_SIZE, rotations=DEFAULT_ROTATIONS))]

if __name__ == "__main__":
    for label, path, T, ref_size in CASES:
        spec = load_spec(path)
        eps = spec.epsilon(None)
        t0 = time.perf_counter()
        ref = solve_spectral(load_spec(spec), time=T, points=51, size=ref_size, seed=1000, epsilon=eps, spectra=False,
                             rotations=4, error_estimate=False)
        worst_sem = max(float(np.max(v)) for v in ref.info["rotation_sem"].values())
        print(f"{label}, τ ≤ {T}: reference N = {ref_size}, 4 realisations ({time.perf_counter() - t0:.0f} s; "
              f"its largest standard error {worst_sem:.1e})", flush=True)
        cols = [c for c in ref.table if c != "time" and not c.endswith("_err")]
        if "--coverage" in sys.argv:
            shares = []
            for seed in range(0, 600, 50):
                r = solve_spectral(load_spec(spec), time=T, points=51, seed=seed, epsilon=eps, spectra=False, **CANDIDATES[1][1])
                out = sum(int(np.sum(np.abs(r.table[c] - ref.table[c]) > r.table[c + "_err"])) for c in cols)
                shares.append(100 * out / sum(r.table[c].size for c in cols))
            print(f"  default, twelve base seeds: outside _err at {np.mean(shares):.2f} % of the points "
                  f"(per seed {', '.join(f'{x:.1f}' for x in shares)} %)", flush=True)
            continue
        for name, kw in CANDIDATES:
            for seed in (0, 50, 100):
                t0 = time.perf_counter()
                r = solve_spectral(load_spec(spec), time=T, points=51, seed=seed, epsilon=eps, spectra=False, **kw)
                wall = time.perf_counter() - t0
                dev = {c: np.abs(r.table[c] - ref.table[c]) for c in cols}
                worst = max(dev, key=lambda c: dev[c].max())
                out = sum(int(np.sum(dev[c] > r.table[c + "_err"])) for c in cols)
                total = sum(dev[c].size for c in cols)
                print(f"  {name:15s} seed {seed:3d}: max |dev| {dev[worst].max():.2e} ({worst}), outside _err at "
                      f"{100 * out / total:4.1f} % of {total} points, {wall:.2f} s", flush=True)
