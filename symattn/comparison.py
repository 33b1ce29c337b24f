"""Theory next to simulation (``symattn compare``): CSVs, a figure and summary.json (docs/interface.md)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from .files import atomic_write, check_output_dir, make_output_dir
from .integration import write_csv

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


def _until(table: dict, t_max: float | None):
    """Mask of the rows of a theory table at times ≤ t_max (all rows when t_max is None)."""
    t = np.asarray(table["time"], dtype=float)
    return np.ones(len(t), bool) if t_max is None else t <= t_max + 1e-12


def plot(theory: dict, sim: dict, path, title="", extra: dict | None = None, sims: dict | None = None,
         valid_until: float | None = None, frozen=None, label: str = "theory"):
    """One panel per observable: theory lines, simulation means with standard-error bars.

    Theory curves are drawn in colour up to ``valid_until`` (the truncation's window of validity; a
    dotted line marks it) and greyed beyond; the y-range is that of the simulations and the valid
    theory only, so a curve that leaves its valid range never flattens the others. ``extra``: further theory tables
    (dashed); ``sims``: further tables with ``_sem`` columns (e.g. other d, the 1/d extrapolation).
    Object-oriented matplotlib: no pyplot, the global backend is left alone; written atomically."""
    from matplotlib.figure import Figure

    from .files import atomic_target

    def frozen_only(c):
        parts = c.split("_")[1:]
        return bool(parts) and all(p in (frozen or ()) for p in parts)

    cols = [c for c in theory if c != "time" and c.startswith(PLOT_PREFIXES) and c in sim and not frozen_only(c)]
    n = max(len(cols), 1)
    ncol = min(3, n)
    nrow = int(np.ceil(n / ncol))
    fig = Figure(figsize=(4.2 * ncol, 3.0 * nrow + 0.6))
    axes = fig.subplots(nrow, ncol, squeeze=False)
    sim_tables = [(sims or {}).get("__label__", "SGD"), sim], *[
        (k, v) for k, v in (sims or {}).items() if k != "__label__"]
    for ax, c in zip(axes.flat, cols):
        lo, hi = [], []
        keep = _until(theory, valid_until)
        tt, ty = np.asarray(theory["time"]), np.asarray(theory[c])
        ax.plot(tt[keep], ty[keep], "-", color="C0", label=label)
        if not keep.all():         # beyond its validity: greyed, and outside the y-range computation
            first = max(int(np.argmin(keep)) - 1, 0)
            ax.plot(tt[first:], ty[first:], "-", color="0.75", lw=0.8, label="theory beyond its validity")
        lo.append(np.nanmin(np.asarray(theory[c])[keep]))
        hi.append(np.nanmax(np.asarray(theory[c])[keep]))
        for m, (name, tab) in enumerate((extra or {}).items()):
            if c in tab:
                k2 = _until(tab, valid_until)
                ax.plot(np.asarray(tab["time"])[k2], np.asarray(tab[c])[k2], "--", color=f"C{m + 1}", label=name)
        for m, (name, tab) in enumerate(sim_tables):
            if c not in tab:
                continue
            y, e = np.asarray(tab[c]), np.asarray(tab.get(c + "_sem", np.zeros(len(tab[c]))))
            ax.errorbar(tab["time"], y, yerr=e, fmt="os^vD"[m % 5], ms=3, color="C3" if m == 0 else f"C{3 + m}",
                        alpha=1.0 if m == 0 else 0.8, label=name)
            lo.append(np.nanmin(y - e))
            hi.append(np.nanmax(y + e))
        a, b = float(np.min(lo)), float(np.max(hi))
        pad = 0.08 * (b - a) if b > a else 0.05 * max(abs(a), 1e-3)
        if np.isfinite(a) and np.isfinite(b):
            ax.set_ylim(a - pad, b + pad)
        if valid_until is not None:
            ax.axvline(valid_until, ls=":", color="gray", label="end of the truncation's validity")
        ax.set_title(c, fontsize=9)
        ax.set_ylabel(c, fontsize=8)
        ax.set_xlabel("time nα/d", fontsize=8)
    for ax in list(axes.flat)[len(cols):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.6 / (3.0 * nrow + 0.6) + 0.02, 1, 1))
    path = Path(path)
    with atomic_target(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def theory_label(info: dict) -> str:
    """Legend of the theory curve: which method drew it, at which ε."""
    eps = info.get("epsilon") or 0.0
    if info.get("method") == "spectral":
        what = f"matrix level, N = {info['size']}"
        if info.get("rotations", 1) > 1:
            what += f", mean of {info['rotations']} realisations"
        if info.get("extrapolated"):
            what = f"matrix level, N → ∞ from N = {info['size']}, {info['size_half']}"
    else:
        what = f"moments, M = {info.get('truncation')}"
    return f"theory ({what}, {'ε → 0' if not eps else f'ε = {eps:g}'})"


def paired_verdicts(columns: dict, per_seed: list, sim, until=None, level: float = 0.999) -> None:
    """Add to each column of ``columns`` the statistics of the paired differences δ_s = SGD_s − theory_s (each seed
    against the theory from its own initial matrices, so the spread of the initial states cancels): the largest
    |mean δ| over time (``max_abs_paired_dev``), the standard error of the mean there (``paired_sem``), their
    largest ratio (``max_paired_dev_over_sem``), and a verdict (``agreement``): "within sampling error" when
    |mean δ| ≤ t·SE at every time, t the two-sided ``level`` quantile of Student's t with seeds − 1 degrees of
    freedom (``paired_t``: 636.6 for 2 seeds, 12.9 for 4, 5.4 for 8 — a standard error from few seeds is itself
    uncertain); else "finite-d gap": beyond the seeds' sampling error, as the O(1/d) gap of SGD
    at finite d from the d → ∞ theory is (``symattn compare --dims D,2D`` extrapolates it to d → ∞ and says whether
    that limit agrees)."""
    from scipy.stats import t as student_t
    z = float(student_t.ppf(0.5 + level / 2, len(per_seed) - 1))
    t = np.asarray(sim.table["time"])
    keep = t <= (until if until is not None else np.inf) + 1e-12
    for c, v in columns.items():
        if c not in sim.per_seed or c == "loss" and "loss" not in per_seed[0]:
            continue
        D = np.array([sim.per_seed[c][s][keep] - np.interp(t[keep], th["time"], th[c])
                      for s, th in enumerate(per_seed)])
        m, se = D.mean(0), D.std(0, ddof=1) / np.sqrt(len(D))
        ratio = np.abs(m) / np.maximum(se, 1e-300)
        j = int(np.argmax(np.abs(m)))
        v["max_abs_paired_dev"] = float(np.abs(m[j]))
        v["paired_sem"] = float(se[j])
        v["max_paired_dev_over_sem"] = float(ratio.max()) if np.all(se > 0) else None
        v["paired_t"] = z
        v["agreement"] = ("within sampling error" if np.all(np.abs(m) <= z * se + 1e-12)
                          else "finite-d gap (beyond the seeds' sampling error; compare --dims extrapolates it)")


def _seed_mean(results) -> dict:
    """Column-wise mean of theory tables on one time grid (cut to the shortest)."""
    n = min(len(r.table["time"]) for r in results)
    return {c: np.mean([r.table[c][:n] for r in results], axis=0) for c in results[0].table}


def theory_plans(spec, time, points, truncation, init, dim, noise, method, size, seeds=1) -> list:
    """The theory runs of ``compare`` (``symattn.methods``: made, and so checked, before the simulation): the
    method ``auto`` resolves to at the spec's ε (its d-free value when dim is None), on more output times than the
    simulation's (≥ 51 for the matrix level, ≥ 101 for the hierarchy: the figure's curves). ``init="sample"``: one run
    from each of the ``seeds`` simulation seeds' own initial matrices, at the matrix level with 4 antithetic noise
    paths each (their noise spread then enters the paired difference at half that of one path)."""
    from .methods import plan, resolve

    base = {"time": time, "dim": dim, "noise": None if noise else False}
    if resolve(spec, method, truncation) == "spectral":
        if init == "sample":
            return [plan(spec, "spectral", points=max(points, 51), init="sample", seed=s, realisations=4, **base)
                    for s in range(seeds)]
        return [plan(spec, "spectral", points=max(points, 51), size=size, **base)]
    starts = range(seeds) if init == "sample" else [0]
    return [plan(spec, "moments", points=max(points, 101), truncation=truncation,
                 init=None if init == "free" else init, seed=s, **base) for s in starts]


def theory_for(plans) -> tuple:
    """(theory table, info, extra curves) of ``compare`` from its ``theory_plans``: their mean (over the seeds'
    starts for ``init="sample"``, with their tables as ``extra["per_seed"]``); for the hierarchy with SGD noise
    also the curve without it (``extra["theory ε→0"]``)."""
    runs = [p.run() for p in plans]
    first, o = runs[0], plans[0].options
    sample = o["init"] == "sample"
    extra = {"per_seed": [r.table for r in runs]} if sample else {}
    if first.method == "spectral":
        info = {"method": "spectral", "size": o["size"], "epsilon": first.info.get("epsilon", 0.0), "init": o["init"]}
        info.update({"sampled_starts": len(runs)} if sample else {"extrapolated": False, "rotations": o["rotations"]})
        return _seed_mean(runs), info, extra
    eps = runs[0].result.epsilon
    if eps > 0:
        quiet = [dataclasses.replace(p, options={**p.options, "noise": False, "check_truncation": False})
                 for p in plans]
        extra["theory ε→0"] = _seed_mean([p.run() for p in quiet])
    info = {"method": "moments", **first.info}
    if sample:
        info["sampled_starts"] = len(runs)
        bad = [r for r in runs if r.diverged_at is not None]
        if bad:
            info["diverged_at"] = min(r.diverged_at for r in bad)
        until = [r.valid_until for r in runs if r.valid_until is not None]
        info["truncation_valid_until"] = min(until) if until else None
    return _seed_mean(runs), info, extra


def compare(spec, dim: int, seeds: int = 4, time: float = 1.0, points: int = 21, out=None, truncation=None,
            init="sample", noise: bool = True, method: str = "auto", size: int | None = None, workers=None,
            progress=True) -> dict:
    """Run theory and simulation on one time grid; write the CSVs, figure and summary to ``out``."""
    from .simulation.run import simulate as _simulate
    from .spec import load_spec

    spec = load_spec(spec)
    if out is not None:
        check_output_dir(out, "out")
    plans = theory_plans(spec, time, points, truncation, init, dim, noise, method, size, seeds)
    sim = _simulate(spec, dim=dim, seeds=seeds, time=time, points=points, workers=workers, progress=progress)
    sim_table = sim.table
    theory_table, info, extra = theory_for(plans)
    per_seed = extra.pop("per_seed", None)
    until = info.get("truncation_valid_until") or info.get("diverged_at")
    columns = deviations(theory_table, sim_table)
    if per_seed is not None and seeds >= 2:
        paired_verdicts(columns, per_seed, sim, until)
    # docs/interface.md: per column {max_abs_dev, theory_range}; also grouped under "columns"
    summary = {**columns, "spec": spec.name, "dim": dim, "seeds": seeds, "time": time, "theory": info,
               "columns": columns,
               "columns_within_validity": deviations(theory_table, sim_table, until) if until else None}
    if out is not None:
        out = make_output_dir(out)
        write_csv(theory_table, out / "theory.csv")
        write_csv(sim_table, out / "simulation.csv")
        plot(theory_table, sim_table, out / "comparison.png",
             title=f"{spec.name}: SGD at d = {dim}, {seeds} seeds, ε = {spec.epsilon(dim):g}", extra=extra,
             valid_until=info.get("truncation_valid_until"), frozen=[spec.names[k] for k in spec.teachers],
             label=theory_label(info))
        atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    summary["theory_table"], summary["simulation_table"] = theory_table, sim_table
    return summary


# ---------------------------------------------------------------------------- finite size (issue 8)
def _on_grid(table: dict, grid: np.ndarray, col: str) -> np.ndarray:
    return np.interp(grid, np.asarray(table["time"], dtype=float), np.asarray(table[col], dtype=float))


def extrapolate(tables_by_dim: dict) -> dict:
    """d → ∞ estimate of every measured observable by a fit linear in 1/d at each time point.

    ``tables_by_dim``: {d: simulation table} (columns and ``<col>_sem`` as in docs/interface.md), at
    least two distinct d. Tables are interpolated onto the time grid of the largest d (simulated
    grids differ only by the snapping of times to whole steps). At every time the fit
    y_d = a + b/d is weighted by 1/sem_d² (equal weights where a sem is 0, e.g. one seed);
    the returned table holds ``time``, the intercept a as ``<col>`` and its standard error,
    propagated from the sems, as ``<col>_sem`` (so ``deviations`` can use it like a simulation).
    Also ``<col>_slope`` (the coefficient b of 1/d), for diagnostics.
    """
    dims = sorted(int(d) for d in tables_by_dim)
    if len(set(dims)) < 2:
        raise ValueError("extrapolate: needs tables at two or more distinct dimensions")
    tabs = {int(d): t for d, t in tables_by_dim.items()}
    grid = np.asarray(tabs[dims[-1]]["time"], dtype=float)
    cols = [c for c in tabs[dims[-1]] if c != "time" and not c.endswith("_sem")
            and all(c in t for t in tabs.values())]
    x = 1.0 / np.array(dims, dtype=float)
    X = np.column_stack([np.ones_like(x), x])
    out = {"time": grid.copy()}
    for c in cols:
        Y = np.array([_on_grid(tabs[d], grid, c) for d in dims])                     # (n_dims, T)
        S = np.array([_on_grid(tabs[d], grid, c + "_sem") if c + "_sem" in tabs[d]
                      else np.zeros_like(grid) for d in dims])
        a, se, b = np.empty(len(grid)), np.empty(len(grid)), np.empty(len(grid))
        for j in range(len(grid)):
            s = S[:, j]
            w = 1.0 / s**2 if np.all(s > 0) and np.all(np.isfinite(s)) else np.ones(len(dims))
            A = X.T @ (w[:, None] * X)
            coef_map = np.linalg.solve(A, X.T * w)                                    # (2, n_dims)
            a[j], b[j] = coef_map @ Y[:, j]
            se[j] = np.sqrt(np.sum((coef_map[0] * s) ** 2))
        out[c], out[c + "_sem"], out[c + "_slope"] = a, se, b
    return out


def compare_dims(spec, dims, seeds: int = 4, time: float = 1.0, points: int = 21, out=None, truncation=None,
                 noise: bool = True, method: str = "auto", size: int | None = None, workers=None,
                 progress=True) -> dict:
    """Theory (d → ∞, free initial state) against SGD at every d in ``dims`` and against the 1/d
    extrapolation of the simulations (``extrapolate``). Writes ``simulation_d<D>.csv`` per d,
    ``extrapolated.csv``, ``theory.csv``, ``comparison.png`` and ``summary.json`` to ``out``;
    summary["extrapolated"] holds, per column, the deviation of the theory from the extrapolation
    (max over time of ``|theory − extrapolation|`` and of that in units of the extrapolation's error).
    """
    from .errors import SpecError, UsageError
    from .simulation.run import simulate as _simulate
    from .spec import load_spec

    spec = load_spec(spec)
    dims = sorted({int(d) for d in dims})
    if len(dims) < 2:
        raise UsageError("dims: needs two or more distinct dimensions, e.g. dims=[100, 200]")
    if spec.noise_ratio is None:
        raise SpecError(f"{spec.source}: training.learning_rate: --dims extrapolates at fixed ε = αd/B; "
                        f"give training.noise_ratio instead")
    if out is not None:
        check_output_dir(out, "out")
    plans = theory_plans(spec, time, points, truncation, "free", None, noise, method, size)
    sims = {d: _simulate(spec, dim=d, seeds=seeds, time=time, points=points, workers=workers,
                         progress=progress).table for d in dims}
    ext = extrapolate(sims)
    theory_table, info, extra = theory_for(plans)
    until = info.get("truncation_valid_until") or info.get("diverged_at")

    def both(sim):
        return {"all": deviations(theory_table, sim),
                "within_validity": deviations(theory_table, sim, until) if until else None}

    summary = {"spec": spec.name, "dims": dims, "seeds": seeds, "time": time, "epsilon": spec.epsilon(),
               "theory": info,
               "columns_by_dim": {str(d): both(sims[d]) for d in dims},
               "extrapolated": both({c: v for c, v in ext.items() if not c.endswith("_slope")})}
    for v in summary["extrapolated"]["all"].values():       # the 1/d → 0 limit of SGD against the d → ∞ theory
        z = v.get("max_dev_over_sem")
        v["agreement"] = ("no SEM to judge by" if z is None else
                          "the deviation at finite d is the O(1/d) finite-size gap: the 1/d → 0 extrapolation of SGD "
                          "agrees with the theory within 4 of its standard errors" if z <= 4 else
                          "beyond the O(1/d) finite-size gap: the extrapolation differs from the theory by more than "
                          "4 standard errors")
    if extra:
        summary["extrapolated_vs_noise_free_theory"] = deviations(
            extra["theory ε→0"], {c: v for c, v in ext.items() if not c.endswith("_slope")}, until)
    if out is not None:
        out = make_output_dir(out)
        write_csv(theory_table, out / "theory.csv")
        for d in dims:
            write_csv(sims[d], out / f"simulation_d{d}.csv")
        write_csv(ext, out / "extrapolated.csv")
        shown = {c: v for c, v in ext.items() if not c.endswith("_slope")}
        plot(theory_table, shown, out / "comparison.png",
             title=f"{spec.name}: d = {', '.join(map(str, dims))} and 1/d → 0, {seeds} seeds, ε={spec.epsilon():g}",
             extra=extra, sims={"__label__": "SGD, 1/d → 0", **{f"SGD d={d}": sims[d] for d in dims}},
             valid_until=info.get("truncation_valid_until"), frozen=[spec.names[k] for k in spec.teachers],
             label=theory_label(info))
        atomic_write(out / "summary.json", json.dumps(summary, indent=2))
    summary["theory_table"], summary["extrapolated_table"] = theory_table, ext
    summary["simulation_tables"] = sims
    return summary
