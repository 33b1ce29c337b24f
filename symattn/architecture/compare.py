"""Theory and SGD side by side for a residual network (docs/theory.md §10): the matrix-level flow from each seed's
own initial matrices against online SGD on the recursion, per seed and as seed means."""
from __future__ import annotations

import numpy as np

from ..errors import UsageError
from .flow import flow_from
from .limit import GaussianLimit
from .network import draw_factors
from .sgd import simulate_residual
from .spec import load_residual
from .unroll import unroll


def seed_means(sim: dict) -> dict:
    """The table of ``sgd.simulate_residual``'s output: per column the mean over the seeds and ``<col>_sem``
    (NaN for one seed)."""
    out = {"time": sim["time"]}
    for c, v in sim.items():
        if c != "time":
            out[c] = v.mean(axis=0)
            out[f"{c}_sem"] = v.std(axis=0, ddof=1) / np.sqrt(v.shape[0]) if v.shape[0] > 1 else np.full(v.shape[1], np.nan)
    return out


def compare_residual(spec, dim: int, seeds: int = 2, time: float = 0.2, points: int = 11, seed0: int = 0,
                     qmc_points: int = 2**14, test_samples: int = 2000) -> dict:
    """{"theory": table, "simulation": table, "max_abs_dev": {column: max over seeds and times}}: the tables hold
    the seed means (``<col>_sem`` for SGD); the theory of each seed starts from that seed's matrices (N = d)."""
    spec = load_residual(spec)
    if int(seeds) < 1:
        raise UsageError(f"seeds {seeds}: must be >= 1")
    if int(points) < 2:
        raise UsageError(f"points {points}: must be >= 2")
    seeds = list(range(int(seed0), int(seed0) + int(seeds)))
    u = unroll(spec)
    lim = GaussianLimit(u, points=qmc_points)
    sim = simulate_residual(spec, dim, time, points=points, seeds=seeds, test_samples=test_samples)
    th = [flow_from(spec, draw_factors(spec, dim, s), dim, sim["time"], lim, u) for s in seeds]
    cols = lim.names + ["loss"]
    theory = {"time": sim["time"], **{c: np.mean([t[c] for t in th], axis=0) for c in cols}}
    simulation = seed_means(sim)
    dev = {c: float(max(np.abs(sim[c][i] - th[i][c]).max() for i in range(len(seeds)))) for c in cols}
    return {"theory": theory, "simulation": simulation, "max_abs_dev": dev, "seeds": seeds}
