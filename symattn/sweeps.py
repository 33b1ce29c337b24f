"""Parameter sweeps: a grid file expanded into pure, idempotent tasks, run locally or as a SLURM job
array (submitit), and merged into one table (``symattn sweep`` / ``symattn collect``).

A grid file (TOML)::

    spec = "examples/tied_h3_L1_small.toml"     # relative to the grid file (or a shipped example)
    command = "simulate"                         # or "theory"
    time = 0.3
    points = 31
    [grid]                                        # dotted spec keys (as --set), plus dim and seed
    "indices.student.init_scale" = [0.5, 0.6]
    "training.noise_ratio" = [0.0005, 0.0025]
    dim = [80, 160]
    seed = [0, 1, 2, 3]
    [executor]                                    # optional; other keys pass to submitit
    name = "local"                                # local | slurm

Each task is one point of the product of the grid's lists: one spec (the settings applied and
validated), one d and one seed. Its output is ``<hash>.csv`` and ``<hash>.json`` (settings, d,
seed, command, time, points, the spec digest, the package version), named by a hash of all of
these, written atomically, the JSON last: a task whose JSON exists is complete and is skipped
when the sweep is run again (a preempted sweep resumes); a task killed midway leaves only hidden
temporary files, which ``collect`` never reads.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tomllib
from pathlib import Path

import numpy as np

from .errors import SpecError, UsageError
from .files import atomic_write
from .workers import forked_map

_GRID_KEYS = {"spec", "command", "time", "points", "grid", "executor", "log_time", "method", "exact_finite_d"}
_EXECUTOR_NAMES = ("local", "slurm")
MAX_TASKS = 100_000       # tasks of one grid refused beyond (docs/interface.md, "Limits")


def load_grid(path) -> dict:
    """Read and check a grid file; returns {spec, command, time, points, grid, executor, root}."""
    path = Path(path)
    from .files import read_input_or_refuse
    data = read_input_or_refuse(path, 1_000_000, "grid", str(path))
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: malformed TOML ({exc})") from None
    unknown = sorted(set(raw) - _GRID_KEYS)
    if unknown:
        raise SpecError(f"{path}: {unknown[0]}: unknown key; allowed: {', '.join(sorted(_GRID_KEYS))}")
    if not isinstance(raw.get("spec"), str):
        raise SpecError(f"{path}: spec: expected the path of a spec file (relative to the grid file)")
    command = raw.get("command", "simulate")
    if command not in ("simulate", "theory"):
        raise SpecError(f"{path}: command: expected simulate or theory, got {command!r}")
    method = raw.get("method", "auto")
    if method not in ("auto", "moments", "spectral"):
        raise SpecError(f"{path}: method: expected one of auto, moments, spectral, got {method!r}")
    exact = raw.get("exact_finite_d", False)
    if not isinstance(exact, bool):
        raise SpecError(f"{path}: exact_finite_d: expected true or false, got {exact!r}")
    if exact and (command != "theory" or "dim" not in raw.get("grid", {}) or method != "auto"):
        raise SpecError(f"{path}: exact_finite_d: for command = \"theory\" with a grid.dim list and no method "
                        f"(the exact flow at each d, as theory --dim D --exact-finite-d)")
    grid = raw.get("grid", {})
    if not isinstance(grid, dict) or not grid:
        raise SpecError(f"{path}: grid: expected a table of keys with lists of values")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise SpecError(f"{path}: grid.{k}: expected a non-empty list of values")
    if command == "simulate" and "dim" not in grid:
        raise SpecError(f"{path}: grid.dim: a simulate sweep needs a list of dimensions")
    ex = dict(raw.get("executor", {}))
    if ex.get("name", "local") not in _EXECUTOR_NAMES:
        raise SpecError(f"{path}: executor.name: expected local or slurm, got {ex.get('name')!r}")
    spec_path = path.parent / raw["spec"]
    spec = str(spec_path) if spec_path.exists() else raw["spec"]           # or a shipped example's name
    time_, points = raw.get("time", 1.0), raw.get("points", 21)
    if not isinstance(time_, (int, float)) or isinstance(time_, bool) or not 0 < time_ < float("inf"):
        raise SpecError(f"{path}: time: expected a finite number > 0")
    if not isinstance(points, int) or isinstance(points, bool) or points < 2:
        raise SpecError(f"{path}: points: expected a whole number >= 2")
    return {"spec": spec, "command": command, "time": float(time_), "points": points, "grid": grid,
            "executor": ex, "log_time": bool(raw.get("log_time", False)), "method": method,
            "exact_finite_d": exact, "root": str(path.parent)}


def expand(grid: dict) -> list:
    """The tasks of a grid: one dict per point of the product of its lists (spec checked)."""
    from .spec import load_spec
    from .version import __version__

    keys = list(grid["grid"])
    n = math.prod(len(grid["grid"][k]) for k in keys)
    if n > MAX_TASKS:
        raise SpecError(f"grid: {n} tasks (the product of its lists), at most {MAX_TASKS} (docs/interface.md, Limits); "
                        f"split the sweep")
    tasks, specs = [], {}
    for values in itertools.product(*(grid["grid"][k] for k in keys)):
        point = dict(zip(keys, values))
        dim, seed = point.pop("dim", None), point.pop("seed", 0)
        if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim < 1):
            raise SpecError(f"grid.dim: expected whole numbers >= 1, got {dim!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise SpecError(f"grid.seed: expected whole numbers >= 0, got {seed!r}")
        pkey = json.dumps(point, sort_keys=True, default=repr)
        if pkey not in specs:                      # one validation per grid point, not per seed
            specs[pkey] = load_spec(grid["spec"], settings=point)
        spec = specs[pkey]
        task = {"spec": grid["spec"], "settings": point, "dim": dim, "seed": seed, "command": grid["command"],
                "time": grid["time"], "points": grid["points"], "log_time": grid["log_time"],
                "method": grid.get("method", "auto"), "exact_finite_d": grid.get("exact_finite_d", False),
                "spec_digest": spec.digest, "version": __version__}
        key = json.dumps({k: task[k] for k in task if k != "spec"}, sort_keys=True, default=repr)
        task["id"] = hashlib.sha256(key.encode()).hexdigest()[:20]
        tasks.append(task)
    return tasks


def run_task(task: dict, out) -> str:
    """Run one task (pure: the same task gives the same files) unless its output exists; returns its id."""
    from .integration import csv_text
    from .spec import load_spec

    out = Path(out)
    done = out / f"{task['id']}.json"
    if done.exists():
        return task["id"]
    from .errors import NumericalFailure
    spec = load_spec(task["spec"], settings=task["settings"])
    try:
        if task["command"] == "simulate":
            from .simulation.run import simulate
            res = simulate(spec, dim=task["dim"], seeds=1, seed0=task["seed"], time=task["time"],
                           points=task["points"], workers=1, progress=False, log_time=task.get("log_time", False))
            table = res.table
        else:
            table = _theory_table(spec, task)
    except NumericalFailure as exc:            # an outcome of the scan (e.g. a stability map), not an error
        status = {"status": "diverged", "diverged_at": exc.time, "message": " ".join(str(exc).split())}
        atomic_write(done, json.dumps({**task, **status}, indent=1, sort_keys=True))
        return task["id"]
    atomic_write(out / f"{task['id']}.csv", csv_text(table, digits=None))
    atomic_write(done, json.dumps({**task, "status": "done"}, indent=1, sort_keys=True))   # last: complete
    return task["id"]


def _theory_table(spec, task: dict) -> dict:
    """A theory task: what ``theory`` runs (``symattn.methods``, the same defaults: the grid's ``method``, default
    auto) at the task's time, points, seed and d (the spec's ε at d; its d-free value without one); with
    ``exact_finite_d`` the exact expected-gradient flow at the task's d from its seed's matrices."""
    from .methods import theory
    method = "finite_d" if task.get("exact_finite_d") else task.get("method", "auto")
    return theory(spec, method, time=task["time"], points=task["points"], seed=task["seed"], dim=task.get("dim"),
                  log_time=task.get("log_time") or None).table


def _run_one(args):
    return run_task(*args)


def sweep(grid, out, executor: str | None = None, jobs: int | None = None, progress: bool = True) -> dict:
    """Run every task of a grid file (path) or loaded grid (dict) into folder ``out``.

    ``executor``: "local" (a process pool of ``jobs`` workers, default the cores) or "slurm" (one
    submitit job array; needs ``pip install 'symattn[cluster]'``; the grid's ``[executor]`` table
    passes options such as ``slurm_partition``, ``timeout_min``, ``mem_gb``, ``slurm_array_parallelism``,
    or ``cluster = "local"`` / ``"debug"`` to use submitit's local executors). Returns
    {"tasks": n, "ran": n, "skipped": n, "out": folder}."""
    from .files import make_output_dir
    from .progress import Progress

    grid = load_grid(grid) if not isinstance(grid, dict) else grid
    tasks = expand(grid)
    out = make_output_dir(out, "--out")
    todo = [t for t in tasks if not (out / f"{t['id']}.json").exists()]
    name = executor or grid["executor"].get("name", "local")
    if name not in _EXECUTOR_NAMES:
        raise UsageError(f"executor {name!r}: expected local or slurm")
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise UsageError(f"jobs {jobs!r}: expected a whole number >= 1")
    bar = Progress(len(todo), "sweep", progress, unit="task")
    if name == "local" and todo:
        n = min(jobs or os.cpu_count() or 1, len(todo))
        try:
            if n == 1:
                for i, t in enumerate(todo):
                    run_task(t, out)
                    bar.update(i + 1)
            else:
                forked_map(_run_one, [(t, out) for t in todo], n, bar.update)
        except KeyboardInterrupt:
            from .files import WRITTEN
            done = sum(1 for t in tasks if (out / f"{t['id']}.json").exists())
            WRITTEN.append(f"{done} of {len(tasks)} tasks complete in {out} (rerun the sweep to finish)")
            raise
    elif todo:
        try:
            import submitit
        except ImportError:
            raise UsageError("--executor slurm: submitit is not installed; install it with "
                             "pip install 'symattn[cluster]'") from None
        opts = {k: v for k, v in grid["executor"].items() if k not in ("name", "cluster")}
        ex = submitit.AutoExecutor(folder=out / ".submitit", cluster=grid["executor"].get("cluster"))
        if ex.cluster != "slurm" and grid["executor"].get("cluster") is None:
            raise UsageError(f"--executor slurm: no SLURM on this machine (submitit found {ex.cluster!r}); run with "
                             f"--executor local, or set executor.cluster = \"local\" in the grid for submitit's "
                             f"local executor")
        if jobs is not None:
            opts.setdefault("slurm_array_parallelism", jobs)
        if ex.cluster != "slurm":
            opts = {k: v for k, v in opts.items() if not k.startswith("slurm_")}
        ex.update_parameters(**opts)
        running = ex.map_array(run_task, todo, [out] * len(todo))
        for i, job in enumerate(running):
            job.result()
            bar.update(i + 1)
    bar.close()
    return {"tasks": len(tasks), "ran": len(todo), "skipped": len(tasks) - len(todo), "out": str(out)}


def collect(folder, out=None, per_seed: bool = False) -> dict:
    """Merge the completed tasks of a sweep folder into one table: per grid point (its settings
    and d as columns) and time, the mean and ``<col>_sem`` over the seeds that finished, ``seeds``
    (their number) and ``diverged`` (the number of seeds whose run diverged, a numerical failure
    recorded by the task; their first divergence time is ``diverged_at_min``); with ``per_seed``
    one row per finished task and time instead, with a ``seed`` column. ``out``: a ``.csv``
    file, or ``.nc`` (netCDF through xarray, ``pip install 'symattn[netcdf]'``)."""
    from .integration import read_csv

    folder = Path(folder)
    if not folder.is_dir():
        raise UsageError(f"collect {folder}: not a folder")
    tasks, failed = [], []
    for meta in sorted(p for p in folder.glob("*.json") if not p.name.startswith(".")):
        try:
            task = json.loads(meta.read_text())
            csv = folder / f"{task['id']}.csv"
            if task.get("status") == "diverged":
                failed.append(task)
            elif csv.exists():
                tasks.append((task, read_csv(csv)))
        except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise UsageError(f"collect {folder}: {meta.name} (or its table) is not a complete task record "
                             f"({type(exc).__name__}); remove it, or rerun the sweep, which redoes it") from None
    if not tasks and not failed:
        raise UsageError(f"collect {folder}: no completed task found")
    keys = sorted({k for t in [t for t, _ in tasks] + failed for k in t["settings"]})
    groups: dict = {}
    diverged: dict = {}
    def point_of(task):                   # a table value (a law, a schedule) as its JSON text
        return tuple(_scalar(task["settings"].get(k)) for k in keys) + (task["dim"],)

    for task, table in tasks:
        point = point_of(task)
        groups.setdefault(point, []).append((task["seed"], table))
    for task in failed:
        point = point_of(task)
        diverged.setdefault(point, []).append(task["diverged_at"])
        groups.setdefault(point, [])
    cols = [c for c in tasks[0][1] if c != "time" and not c.endswith("_sem")] if tasks else []
    rows = []
    for point, members in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        members.sort(key=lambda m: m[0])
        div = diverged.get(point, [])
        fail = {"diverged": len(div), "diverged_at_min": min((t for t in div if t is not None), default=None)}
        if not members:                                  # every seed of this point diverged
            if not per_seed:
                rows.append({**dict(zip(keys + ["dim"], point)), "seeds": 0, **fail, "time": None})
            continue
        if per_seed:
            for seed, table in members:
                for i, t in enumerate(table["time"]):
                    rows.append({**dict(zip(keys + ["dim"], point)), "seed": seed, "time": t,
                                 **{c: table[c][i] for c in cols}})
            continue
        n = min(len(m[1]["time"]) for m in members)
        for i in range(n):
            row = {**dict(zip(keys + ["dim"], point)), "seeds": len(members), **fail,
                   "time": members[0][1]["time"][i]}
            for c in cols:
                v = np.array([m[1][c][i] for m in members])
                row[c] = float(v.mean())
                row[c + "_sem"] = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0
            rows.append(row)
    if not rows:
        raise UsageError(f"collect {folder}: no finished task to tabulate (use per_seed=False to count divergences)")
    names = list(dict.fromkeys(c for r in rows for c in r))
    table = {c: [r.get(c) for r in rows] for c in names}
    if out is not None:
        _write_collected(table, Path(out))
    return table


def _write_collected(table: dict, out: Path) -> None:
    if out.suffix == ".nc":
        try:
            import xarray as xr
        except ImportError:
            raise UsageError(f"--out {out}: netCDF needs xarray; pip install 'symattn[netcdf]' "
                             f"(or write a .csv)") from None
        from .files import atomic_target
        ds = xr.Dataset({c: ("row", np.asarray(v)) for c, v in table.items()})
        with atomic_target(out) as tmp:
            ds.to_netcdf(tmp)
        return
    import csv
    import io
    cols = list(table)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")          # a JSON cell (a law, a schedule) is quoted
    w.writerow(cols)
    for i in range(len(table[cols[0]])):
        w.writerow([_cell(table[c][i]) for c in cols])
    atomic_write(out, buf.getvalue())


def _scalar(v):
    """A grid value as a hashable cell: tables and arrays as their JSON text."""
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def _cell(v) -> str:
    if v is None:                      # no value (no divergence time, no time row): NaN keeps columns numeric
        return "nan"
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return json.dumps(v) if not isinstance(v, str) else v
