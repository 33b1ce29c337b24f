"""Untied h2 escape time against d (paper Fig. 3's open question; README "Matrix-level limit").

SGD (ε = 0.01, B = 256, κ = σ_U = σ_V = 1, L = 1) at d = 100, 200 (4 seeds, τ ≤ 1.5) and 400
(2 seeds, τ ≤ 1), and the matrix-level slow phase started from each seed's own U, V (N = d, with
the O(ε) noise terms, 2 antithetic paths). Prints, per seed, the first τ with |overlap| > 0.3 of
both. Measured (README): SGD 0.56 / 0.61 / 0.61 (means); |theory − SGD| per seed 0.16 / 0.09 /
0.025 (means). Cost: ≈ 30 min on one core, most of it SGD at d = 400.
Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/untied_h2_escape.py``."""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from symattn.simulation.run import simulate  # noqa: E402
from symattn.spec import load_spec
from symattn.spectral import solve_spectral  # noqa: E402

SPEC = {"name": "untied_h2_escape", "model": {"tokens": 1, "activation": "h2"},
        "indices": [{"name": n, "role": n, "parameterization": "untied", "width": 1.0, "init_scale": 1.0}
                    for n in ("student", "teacher")],
        "training": {"batch_size": 256, "noise_ratio": 0.01, "weight_decay": 0.0}, "theory": {"truncation": 4}}
RUNS = [(100, 4, 1.5), (200, 4, 1.5), (400, 2, 1.0)]


def overlap(tab):
    num = tab["q1_student_teacher"] + tab["q2_student_teacher"]
    den = np.sqrt(np.abs((tab["q1_student_student"] + tab["q2_student_student"])
                         * (tab["q1_teacher_teacher"] + tab["q2_teacher_teacher"])))
    return num / den


def escape(t, ov, level=0.3):
    hit = np.nonzero(np.abs(ov) > level)[0]
    return float(t[hit[0]]) if hit.size else float("nan")


if __name__ == "__main__":
    for d, seeds, T in RUNS:
        sim = simulate(SPEC, d, seeds=seeds, time=T, points=41, progress=False)
        t_sim = np.asarray(sim.table["time"])
        gaps = []
        for s in range(seeds):
            tab = {c: np.asarray(sim.per_seed[c])[s] for c in sim.per_seed}
            th = solve_spectral(load_spec(SPEC), time=T, points=41, size=d, seed=s, init="sample", epsilon=0.01,
                                noise_realisations=2, noise_antithetic=True).table
            a, b = escape(th["time"], th["overlap_student_teacher"]), escape(t_sim, overlap(tab))
            gaps.append(abs(a - b))
            print(f"d = {d} seed {s}: m_teacher {tab['m_teacher'][0]:+.3f}, escape τ: matrix level {a:.3f}, SGD {b:.3f}")
        print(f"d = {d}: mean |theory − SGD| {np.mean(gaps):.3f}")
