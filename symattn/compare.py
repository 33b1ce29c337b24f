"""Theory next to simulation (``symattn compare``): CSVs, a figure and summary.json (INTERFACE.md)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .integrate import write_csv

PLOT_PREFIXES = ("q_", "p_", "tr_", "m_", "q1_", "q2_", "loss")


def deviations(theory: dict, sim: dict, until: float | None = None) -> dict:
    """Per column in both tables: max |theory − simulation| over common times (≤ until) and theory range."""
    out = {}
    t_th, t_sim = np.asarray(theory["time"]), np.asarray(sim["time"])
    mask = t_sim <= t_th[-1] + 1e-12
    if until is not None:
        mask &= t_sim <= until + 1e-12
    for col in theory:
        if col == "time" or col not in sim or col.endswith("_sem"):
            continue
        th = np.interp(t_sim[mask], t_th, np.asarray(theory[col]))
        dev = np.abs(th - np.asarray(sim[col])[mask])
        sem = np.asarray(sim.get(col + "_sem", np.zeros_like(sim[col])))[mask]
        out[col] = {"max_abs_dev": float(dev.max()) if dev.size else None,
                    "max_dev_over_sem": float(np.max(dev / np.maximum(sem, 1e-300))) if dev.size and np.all(sem > 0) else None,
                    "theory_range": [float(np.min(theory[col])), float(np.max(theory[col]))]}
    return out


def plot(theory: dict, sim: dict, path, title="", extra: dict | None = None):
    """One panel per observable: theory lines, simulation means with standard-error bars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = [c for c in theory if c != "time" and c.startswith(PLOT_PREFIXES) and c in sim]
    n = len(cols)
    ncol = min(3, n)
    nrow = int(np.ceil(n / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.0 * nrow), squeeze=False)
    for ax, c in zip(axes.flat, cols):
        ax.plot(theory["time"], theory[c], "-", color="C0", label="theory")
        for name, tab in (extra or {}).items():
            if c in tab:
                ax.plot(tab["time"], tab[c], "--", label=name)
        ax.errorbar(sim["time"], sim[c], yerr=sim.get(c + "_sem"), fmt="o", ms=3, color="C3", label="SGD")
        ax.set_title(c, fontsize=9)
        ax.set_xlabel("time nα/d", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare(spec, dim: int, seeds: int = 4, time: float = 1.0, points: int = 21, out=None, truncation=None,
            init="free", noise: bool = True, method: str = "moments", size: int = 1000, workers=None,
            progress=True) -> dict:
    """Run theory and simulation on one time grid; write the CSVs, figure and summary to ``out``."""
    from . import simulate as _simulate
    from .derive import derive
    from .integrate import integrate
    from .spec import load_spec

    spec = load_spec(spec)
    sim = _simulate(spec, dim=dim, seeds=seeds, time=time, points=points, workers=workers, progress=progress)
    sim_table = sim.table
    extra = {}
    if method == "spectral":
        from .spectral import solve_spectral
        th = solve_spectral(spec, time=time, points=max(points, 51), size=size)
        theory_table, info = th.table, {"method": "spectral", "size": size}
    else:
        system = derive(spec, truncation)
        eps = spec.epsilon(dim) if noise else 0.0
        res = integrate(system, time=time, points=max(points, 101), init=init, dim=dim, epsilon=eps)
        theory_table, info = res.table, {"method": "moments", **res.summary()}
        if noise and eps > 0 and getattr(system, "supports_noise", False):
            extra["theory ε→0"] = integrate(system, time=time, points=max(points, 101), init=init, dim=dim,
                                            epsilon=0.0, check_truncation=False).table
    until = info.get("truncation_valid_until") or info.get("diverged_at")
    summary = {"spec": spec.name, "dim": dim, "seeds": seeds, "time": time, "theory": info,
               "columns": deviations(theory_table, sim_table),
               "columns_within_validity": deviations(theory_table, sim_table, until) if until else None}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(theory_table, out / "theory.csv")
        write_csv(sim_table, out / "simulation.csv")
        plot(theory_table, sim_table, out / "comparison.png",
             title=f"{spec.name}: d={dim}, {seeds} seeds, ε={spec.epsilon(dim):g}", extra=extra)
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    summary["theory_table"], summary["simulation_table"] = theory_table, sim_table
    return summary
