"""Phase diagrams in one call: a quantity of the limit theory over a grid of spec values (docs/interface.md, "phase").

``phase(spec, vary=["sigma=0.3:1.2:32", "epsilon=0.001:0.05:32:log"], measure="escape_time", time=2.0)`` runs the
theory (``symattn.theory``, the same method and defaults as the ``theory`` command) at every point of the grid and
measures, from its table:

* ``escape_time[=θ]`` — the first τ where the normalised student–teacher overlap p_st/√(p_ss p_tt) (the
  ``overlap_`` column of a non-symmetric pair) reaches θ (default 0.3, the package's choice, docs/results): NaN where
  it does not by the horizon; its error the overlap's ``_err`` over the overlap's slope at the crossing;
* ``loss_at=τ``, ``p_at=τ`` (p_st of the first student and its teacher), ``<column>_at=τ`` — the column at τ,
  its error the column's ``_err``. Such a point runs the theory to τ only, with outputs at 0 and τ (``points`` is not
  used): the flow's steps follow the flow, not the output grid, and every output costs an observation of each
  realisation and a knot check — measured on tied softmax L = 2 at τ = 0.25, 35–45 % of a point's cost at 51
  outputs (docs/results/phase_diagrams.md). The value is the same estimator on another draw of its noise paths.

Axes: ``KEY=start:stop:n`` (``:log`` for log spacing, or ``KEY=v1,v2,…``), KEY a dotted spec key as for ``--set``
or one of the aliases ``sigma``/``kappa`` (the first student's init_scale/width), ``epsilon`` (training.noise_ratio),
``beta`` (model.beta), ``gamma`` (training.weight_decay).

The points run in a pool of forked processes (one BLAS thread each: the flow limits itself, ``symattn.threads``),
after the first point in this process (it warms the derivation and the compiled modules the pool inherits).
Where the recovery analysis (``derivation.recovery``, the paper's Cor. 3, 4, 7) has a condition in the varied init
parameters, its zero set — where first-order signal vanishes — is drawn on the heat map; where the condition does not
depend on them the figure says whether it holds on the whole grid. With ``check`` > 0 that many grid points are also
simulated (SGD at ``check_dim``, ``check_seeds`` seeds) and measured the same way.
"""
from __future__ import annotations

import itertools
import math
import os
import time as _time
from dataclasses import dataclass, field

import numpy as np

from .errors import NumericalFailure, SpecError, UsageError

ALIASES = {"epsilon": "training.noise_ratio", "beta": "model.beta", "gamma": "training.weight_decay"}
INDEX_ALIASES = {"sigma": "init_scale", "kappa": "width"}        # of the first student
MAX_PER_AXIS = 256
MAX_POINTS = 65_536
ESCAPE = 0.3                 # the default threshold of the normalised overlap


# ---------------------------------------------------------------------------- axes
@dataclass(frozen=True)
class Axis:
    """One varied spec key and its values."""

    key: str
    values: tuple
    log: bool = False
    alias: str | None = None

    @property
    def label(self) -> str:
        return self.alias or self.key


def parse_axis(text: str, spec) -> Axis:
    """``KEY=start:stop:n[:log]`` or ``KEY=v1,v2,…`` (module docstring), or UsageError naming it."""
    say = f"--vary {text}"
    if "=" not in text:
        raise UsageError(f"{say}: expected KEY=start:stop:n[:log] or KEY=v1,v2,...")
    key, rhs = (s.strip() for s in text.split("=", 1))
    alias = key if key in ALIASES or key in INDEX_ALIASES else None
    if key in ALIASES:
        key = ALIASES[key]
    elif key in INDEX_ALIASES:
        if not spec.students:
            raise UsageError(f"{say}: {key} is the first student's {INDEX_ALIASES[key]}, and the spec has no student")
        key = f"indices.{spec.names[spec.students[0]]}.{INDEX_ALIASES[key]}"
    try:
        if ":" in rhs:
            parts = rhs.split(":")
            if len(parts) not in (3, 4) or (len(parts) == 4 and parts[3] != "log"):
                raise ValueError
            a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
            log = len(parts) == 4
            if not (math.isfinite(a) and math.isfinite(b)) or n < 2 or (log and not (a > 0 and b > 0)):
                raise ValueError
            values = np.geomspace(a, b, n) if log else np.linspace(a, b, n)
        else:
            values, log = np.array([float(v) for v in rhs.split(",")]), False
            if not np.all(np.isfinite(values)) or len(values) < 1:
                raise ValueError
    except ValueError:
        raise UsageError(f"{say}: expected KEY=start:stop:n[:log] (finite numbers, n >= 2, log with positive ends) "
                         f"or KEY=v1,v2,...") from None
    if len(values) > MAX_PER_AXIS:
        raise UsageError(f"{say}: {len(values)} values, at most {MAX_PER_AXIS} per axis")
    return Axis(key, tuple(float(v) for v in values), log, alias)


# ---------------------------------------------------------------------------- measures
@dataclass(frozen=True)
class Measure:
    """What is read off each point's theory table (module docstring)."""

    kind: str                        # "escape" or "at"
    column: str | None = None
    at: float | None = None
    threshold: float = ESCAPE
    text: str = ""

    @property
    def label(self) -> str:
        if self.kind == "escape":
            return f"escape time τ (overlap ≥ {self.threshold:g})"
        return f"{self.column} at τ = {self.at:g}"


def _pair(spec) -> tuple:
    """(first student, its teacher: the first frozen index with an init scale, else the first frozen)."""
    if not spec.students or not spec.teachers:
        raise UsageError("--measure: needs a student and a teacher in the spec")
    shaped = [j for j in spec.teachers if spec.indices[j].kind.uses_init_scale]
    return spec.students[0], (shaped or list(spec.teachers))[0]


def parse_measure(text: str, spec, horizon: float) -> Measure:
    """``escape_time[=θ]``, ``loss_at=τ``, ``p_at=τ``, ``<column>_at=τ`` (module docstring), or UsageError."""
    say = f"--measure {text}"
    name, _, arg = text.partition("=")
    name = name.strip()
    try:
        value = float(arg) if arg else None
    except ValueError:
        raise UsageError(f"{say}: {arg!r} is not a number") from None
    if name == "escape_time":
        th = ESCAPE if value is None else value
        if not 0 < th < 1:
            raise UsageError(f"{say}: the overlap threshold must be in (0, 1)")
        _pair(spec)
        return Measure("escape", threshold=th, text=text)
    if name.endswith("_at"):
        if value is None or not (0 <= value <= horizon):
            raise UsageError(f"{say}: needs a time in [0, --time = {horizon:g}]")
        col = name[:-3]
        if col == "p":
            s, t = _pair(spec)
            a, b = sorted((s, t))
            col = f"p_{spec.names[a]}_{spec.names[b]}"
        return Measure("at", column=col, at=value, text=text)
    raise UsageError(f"{say}: expected escape_time[=θ], loss_at=τ, p_at=τ or <column>_at=τ")


def _overlap(table: dict, spec) -> tuple:
    """(normalised student–teacher overlap over time, its error) from a theory or simulation table."""
    s, t = _pair(spec)
    a, b = sorted((s, t))
    na, nb = spec.names[a], spec.names[b]
    if f"overlap_{na}_{nb}" in table:
        m = np.asarray(table[f"overlap_{na}_{nb}"], float)
        return m, np.asarray(table.get(f"overlap_{na}_{nb}_err", np.zeros_like(m)), float)
    p = np.asarray(table[f"p_{na}_{nb}"], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.sqrt(np.abs(np.asarray(table[f"p_{na}_{na}"], float) * np.asarray(table[f"p_{nb}_{nb}"], float)))
        m = np.where(den > 0, p / np.where(den > 0, den, 1.0), 0.0)
        err = np.asarray(table.get(f"p_{na}_{nb}_err", np.zeros_like(p)), float) / np.where(den > 0, den, np.inf)
    return m, err


def evaluate(measure: Measure, table: dict, spec) -> tuple:
    """(value, error) of ``measure`` on a table (column → array over ``time``)."""
    t = np.asarray(table["time"], float)
    if measure.kind == "at":
        if measure.column not in table:
            raise UsageError(f"--measure {measure.text}: no column {measure.column!r}; columns: "
                             f"{', '.join(c for c in table if not c.endswith(('_err', '_sem')))}")
        v = float(np.interp(measure.at, t, np.asarray(table[measure.column], float)))
        e = table.get(measure.column + "_err")
        return v, float(np.interp(measure.at, t, np.asarray(e, float))) if e is not None else 0.0
    m, err = _overlap(table, spec)
    hit = np.nonzero(np.abs(m) >= measure.threshold)[0]
    if not hit.size:
        return math.nan, math.nan
    j = int(hit[0])
    if j == 0:
        return float(t[0]), 0.0
    m0, m1 = abs(m[j - 1]), abs(m[j])
    frac = (measure.threshold - m0) / (m1 - m0) if m1 != m0 else 1.0
    slope = (m1 - m0) / (t[j] - t[j - 1])
    return float(t[j - 1] + frac * (t[j] - t[j - 1])), float(max(err[j - 1], err[j]) / slope) if slope > 0 else math.nan


# ---------------------------------------------------------------------------- the points
def _settings(axes, values) -> dict:
    return {ax.key: v for ax, v in zip(axes, values)}


def _run_point(job) -> tuple:
    """One grid point: (value, error, seconds, failure or None). Pure: a worker process runs it."""
    from .methods import theory
    from .spec import load_spec
    raw, settings, method, options, measure = job
    t0 = _time.perf_counter()
    try:
        spec = load_spec(raw, settings=settings)
        table = theory(spec, method, **options)
        v, e = evaluate(measure, table.table, spec)
        return v, e, _time.perf_counter() - t0, None
    except NumericalFailure as exc:
        return math.nan, math.nan, _time.perf_counter() - t0, f"diverged at τ = {exc.time:.4g}" if exc.time is not None \
            else str(exc)


# ---------------------------------------------------------------------------- the recovery boundary
def _boundary(spec, axes) -> dict:
    """The recovery analysis on the grid (module docstring): {"text", and "function" of the axes' values where its
    condition depends on them}."""
    import sympy as sp

    from .derivation.recovery import recovery
    from .symbolic.names import index_symbols
    try:
        rec = next(iter(recovery(spec).values()))
    except Exception as exc:                       # no teacher, a model the analysis does not cover: say so
        return {"text": f"no recovery analysis ({str(exc).splitlines()[0][:80]})"}
    cond = rec.condition
    if isinstance(cond, tuple):
        return {"text": f"recovery ({rec.mechanism}): a condition of {len(cond)} parts, not drawn"}
    syms = index_symbols(spec)
    prefix = {"init_scale": "sigma_", "width": "kappa_", "scale": "c_"}
    by_name = {str(s): s for s in cond.free_symbols}
    axis_syms = []
    for ax in axes:
        parts = ax.key.split(".")
        sym = None
        if parts[0] == "indices" and parts[2] in prefix:
            k = spec.names.index(parts[1])
            sym = by_name.get(prefix[parts[2]] + syms[k])
        axis_syms.append(sym)
    rest = {s: v for s, v in rec.parameters.items() if s not in axis_syms}
    if not any(axis_syms):
        held = "holds" if rec.signal else "fails"
        return {"text": f"recovery ({rec.mechanism}): first-order signal {held} at every grid point (its condition "
                        f"does not depend on the varied keys)"}
    from sympy.core.function import AppliedUndef
    expr = cond.subs(rest)
    numeric = bool(expr.atoms(AppliedUndef))       # Γ of a non-polynomial Φ: a numeric function of θ at the spec's
    model = [ax.label for ax, s in zip(axes, axis_syms) if s is None and ax.key.startswith("model.")]   # model keys
    if numeric and model:
        return {"text": f"recovery ({rec.mechanism}): its condition ({sp.sstr(expr)[:50]} = 0) is Φ's quadrature at "
                        f"the spec's {', '.join(model)}, which the grid varies: not drawn"}
    args = [s if s is not None else sp.Dummy() for s in axis_syms]
    f = sp.lambdify(args, expr, modules="numpy")
    if numeric:                                    # implemented functions take one point at a time
        f = np.vectorize(f, otypes=[float])
    return {"text": f"recovery ({rec.mechanism}): first-order signal vanishes on the dashed line "
                    f"({sp.sstr(expr)[:60]} = 0)", "function": f}


# ---------------------------------------------------------------------------- the result
@dataclass
class PhaseDiagram:
    """The measured quantity over the grid: ``value`` and ``err`` of shape (n₁[, n₂]), ``failed`` (a message where
    a point's run failed), the ``axes``, the ``measure``, ``info`` (method, options, costs), ``checks`` (SGD at some
    points) and ``boundary`` (the recovery analysis on the grid)."""

    spec_name: str
    axes: list
    measure: Measure
    value: np.ndarray
    err: np.ndarray
    failed: np.ndarray
    info: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    boundary: dict = field(default_factory=dict)

    def rows(self) -> list:
        out = []
        for idx in itertools.product(*(range(len(a.values)) for a in self.axes)):
            row = {a.label: a.values[i] for a, i in zip(self.axes, idx)}
            row.update(value=float(self.value[idx]), err=float(self.err[idx]), failed=self.failed[idx] or "")
            out.append(row)
        return out

    def to_csv(self, path):
        """One row per grid point: the axes' values, ``value``, ``err``, ``failed`` (written atomically)."""
        import csv
        import io

        from .files import atomic_write
        buf = io.StringIO()
        rows = self.rows()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
        return atomic_write(path, buf.getvalue())

    def to_xarray(self):
        """An ``xarray.Dataset`` (the ``netcdf`` extra): ``value`` and ``err`` on the axes' coordinates."""
        from .methods.table import _optional
        xr = _optional("xarray", "to_xarray")
        dims = [a.label.replace(".", "_") for a in self.axes]
        coords = {d: np.array(a.values) for d, a in zip(dims, self.axes)}
        return xr.Dataset({"value": (dims, self.value), "err": (dims, self.err)}, coords=coords,
                          attrs={"measure": self.measure.label, "spec": self.spec_name,
                                 **{k: str(v) for k, v in self.info.items() if k in ("method", "options", "time")}})

    def to_netcdf(self, path):
        """The dataset as netCDF, written atomically (the ``netcdf`` extra)."""
        from .files import atomic_target
        ds = self.to_xarray()
        with atomic_target(path) as tmp:
            ds.to_netcdf(tmp)
        return path

    def plot(self, path):
        """A heat map of the measure and one of its ``err`` (a line plot for one axis), the recovery boundary and the
        SGD checks on it; written atomically."""
        from matplotlib import colors
        from matplotlib.figure import Figure

        from .files import atomic_target
        fig = Figure(figsize=(11, 4.6))
        axs = fig.subplots(1, 2)
        if len(self.axes) == 1:
            x = np.array(self.axes[0].values)
            axs[0].errorbar(x, self.value, yerr=self.err, fmt="o-", ms=3)
            axs[1].plot(x, self.err, "o-", ms=3)
            for ax in axs:
                ax.set_xlabel(self.axes[0].label)
                if self.axes[0].log:
                    ax.set_xscale("log")
            for c in self.checks:
                axs[0].errorbar([c["at"][self.axes[0].label]], [c["sgd"]], yerr=[2 * c["sgd_sem"]], fmt="s", color="k")
        else:
            x, y = np.array(self.axes[0].values), np.array(self.axes[1].values)
            ex, ey = _edges(x, self.axes[0].log), _edges(y, self.axes[1].log)
            for ax, data, title in ((axs[0], self.value, self.measure.label), (axs[1], self.err, "its error (_err)")):
                masked = np.ma.masked_invalid(data.T)
                finite = data[np.isfinite(data)]
                norm = colors.LogNorm() if data is self.err and finite.size and finite.min() > 0 else None
                im = ax.pcolormesh(ex, ey, masked, shading="flat", cmap=_cmap(), norm=norm)
                fig.colorbar(im, ax=ax, label=title)
                ax.set_xlabel(self.axes[0].label)
                ax.set_ylabel(self.axes[1].label)
                if self.axes[0].log:
                    ax.set_xscale("log")
                if self.axes[1].log:
                    ax.set_yscale("log")
            f = self.boundary.get("function")
            if f is not None:
                X, Y = np.meshgrid(np.geomspace(ex[0], ex[-1], 200) if self.axes[0].log else np.linspace(ex[0], ex[-1], 200),
                                   np.geomspace(ey[0], ey[-1], 200) if self.axes[1].log else np.linspace(ey[0], ey[-1], 200))
                with np.errstate(all="ignore"):
                    Z = np.broadcast_to(np.asarray(f(X, Y), float), X.shape)
                if np.nanmin(Z) < 0 < np.nanmax(Z):
                    axs[0].contour(X, Y, Z, levels=[0.0], colors="w", linestyles="--")
            for c in self.checks:
                px, py = c["at"][self.axes[0].label], c["at"][self.axes[1].label]
                axs[0].plot([px], [py], "kx" if c.get("failed") else "ks", ms=6, mfc="none")
                said = "SGD diverged" if c.get("failed") else f"SGD {c['sgd']:.3g}±{2 * c['sgd_sem']:.2g}"
                axs[0].annotate(f"{said}\nth. {c['theory']:.3g}", (px, py),
                                fontsize=7, color="k", xytext=(4, 4), textcoords="offset points",
                                bbox={"boxstyle": "round", "fc": "w", "alpha": 0.7, "lw": 0})
            failed = np.vectorize(bool)(self.failed)
            if failed.any():                           # pink: the theory's own run failed there (e.g. diverged)
                for ax in axs:
                    ax.pcolormesh(ex, ey, np.ma.masked_where(~failed.T, np.ones(failed.T.shape)), shading="flat",
                                  cmap=colors.ListedColormap(["#f2b8b5"]))
            said = [f"pink: the theory failed at {int(failed.sum())} points (CSV column failed)"] if failed.any() \
                else []
            if np.any(~np.isfinite(self.value) & ~failed):
                said.append("grey: no escape by the horizon" if self.measure.kind == "escape" else "grey: no value")
            if said:
                axs[0].text(0.01, 0.01, "; ".join(said), transform=axs[0].transAxes, fontsize=7,
                            bbox={"fc": "w", "alpha": 0.7, "lw": 0})
        cost = self.info.get("seconds_per_point")
        fig.suptitle(f"{self.spec_name}: {self.measure.label}; {self.info.get('method')} theory, "
                     f"{self.value.size} points" + (f", {cost:.2g} s per point" if cost else "")
                     + "\n" + self.boundary.get("text", ""), fontsize=9)
        fig.tight_layout()
        with atomic_target(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        return path


def _edges(v, log: bool) -> np.ndarray:
    """Cell edges around grid values (midpoints, geometric on a log axis; the ends mirrored)."""
    w = np.log(v) if log else np.asarray(v, float)
    if len(w) == 1:
        e = np.array([w[0] - 0.5, w[0] + 0.5])
    else:
        mid = 0.5 * (w[1:] + w[:-1])
        e = np.concatenate([[2 * w[0] - mid[0]], mid, [2 * w[-1] - mid[-1]]])
    return np.exp(e) if log else e


def _cmap():
    import matplotlib
    cmap = matplotlib.colormaps["viridis"].copy()
    cmap.set_bad("0.85")
    return cmap


# ---------------------------------------------------------------------------- the entry point
def phase(spec, vary, measure: str = "escape_time", time: float = 1.0, points: int = 51, method: str = "auto",
          workers: int | None = None, check: int = 0, check_dim: int = 200, check_seeds: int = 2, progress=False,
          cli: bool = False, **options) -> PhaseDiagram:
    """The measure over the grid of ``vary`` (one or two axes, module docstring) by ``symattn.theory(spec_at_point,
    method, time=time, points=points, **options)``; ``check`` grid points also by SGD (module docstring). ``cli``:
    errors name the command-line flags."""
    from .methods import plan
    from .spec import load_spec
    spec = load_spec(spec)
    vary = [vary] if isinstance(vary, str) else list(vary)
    if not 1 <= len(vary) <= 2:
        raise UsageError("--vary: one or two axes")
    axes = [a if isinstance(a, Axis) else parse_axis(a, spec) for a in vary]
    if len({a.key for a in axes}) < len(axes):
        raise UsageError("--vary: the same key twice")
    n = math.prod(len(a.values) for a in axes)
    if n > MAX_POINTS:
        raise UsageError(f"--vary: {n} grid points, at most {MAX_POINTS}")
    m = parse_measure(measure, spec, time) if isinstance(measure, str) else measure
    grid = list(itertools.product(*(a.values for a in axes)))
    try:
        first = load_spec(spec.raw, settings=_settings(axes, grid[0]))
        load_spec(spec.raw, settings=_settings(axes, grid[-1]))
    except SpecError as exc:
        raise UsageError(f"--vary: {exc}") from None
    opts = {"time": time, "points": points, **{k: v for k, v in options.items() if v is not None}}
    if m.kind == "at" and m.at > 0:
        opts.update(time=m.at, points=2)           # a value at τ needs the flow to τ only (module docstring)
    run = plan(first, method, cli=cli, **opts)    # the method and its options, checked once, before any work
    jobs = [(spec.raw, _settings(axes, g), run.method.name, opts, m) for g in grid]
    t0 = _time.perf_counter()
    results = [_run_point(jobs[0])]
    bar = _progress(progress, len(jobs))
    bar(1)
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs) - 1)) if len(jobs) > 1 else 1
    if len(jobs) > 1:
        from .workers import forked_map
        results += (forked_map(_run_point, jobs[1:], workers, lambda k: bar(k + 1)) if workers > 1
                    else [_run_point(j) for j in jobs[1:]])
    wall = _time.perf_counter() - t0
    shape = tuple(len(a.values) for a in axes)
    value = np.array([r[0] for r in results], float).reshape(shape)
    err = np.array([r[1] for r in results], float).reshape(shape)
    failed = np.array([r[3] for r in results], dtype=object).reshape(shape)
    info = {"method": run.method.name, "options": {k: v for k, v in run.options.items()}, "time": time,
            "points": len(jobs), "workers": workers, "wall_seconds": wall,
            "seconds_per_point": wall / len(jobs), "cpu_seconds_per_point": float(np.mean([r[2] for r in results]))}
    pd = PhaseDiagram(spec.name, axes, m, value, err, failed, info, boundary=_boundary(spec, axes))
    if check:
        pd.checks = _checks(spec, axes, m, pd, check, check_dim, check_seeds, time, points)
    return pd


def _progress(on: bool, total: int):
    from .progress import Progress
    return Progress(total, "phase", enabled=on, unit="point").update


def _check_points(shape, k: int) -> list:
    """k grid points spread over the grid: the quarter points of each axis, then the centre and corners."""
    quarters = [tuple(int(round(f * (n - 1))) for f, n in zip(fs, shape))
                for fs in itertools.product(*([(0.25, 0.75)] * len(shape)))]
    extra = [tuple(n // 2 for n in shape)] + [tuple(c * (n - 1) for c, n in zip(cs, shape))
                                             for cs in itertools.product(*([(0, 1)] * len(shape)))]
    out = []
    for p in quarters + extra:
        if p not in out:
            out.append(p)
    return out[:k]


def _checks(spec, axes, m, pd, k, dim, seeds, time, points) -> list:
    """SGD at ``k`` grid points (``dim``, ``seeds``): the measure per seed, its mean and standard error, against the
    theory's value and error there; ``within``: |SGD − theory| ≤ 2√(SEM² + err²) (sampling alone: a miss beyond it
    can be the O(1/d) finite-size gap). Where SGD fails at a point (it diverges: the limit theory has no finite-d
    instability), the check records ``failed`` (the message, with the time) and no value, and the others still run."""
    from .simulation.run import simulate
    from .spec import load_spec
    out = []
    for idx in _check_points(pd.value.shape, k):
        values = tuple(a.values[i] for a, i in zip(axes, idx))
        sp_ = load_spec(spec.raw, settings=_settings(axes, values))
        th, e = float(pd.value[idx]), float(pd.err[idx])
        check = {"at": {a.label: v for a, v in zip(axes, values)}, "sgd": math.nan, "sgd_sem": math.nan,
                 "per_seed": [], "theory": th, "theory_err": e, "dim": dim, "seeds": seeds, "within": False}
        t0 = _time.perf_counter()
        try:
            sim = simulate(sp_, dim=dim, seeds=seeds, time=time, points=min(points, 101), progress=False,
                           test_samples=0)
        except NumericalFailure as exc:
            out.append({**check, "sgd_seconds": _time.perf_counter() - t0, "failed": str(exc)})
            continue
        per = np.array([evaluate(m, {c: v[s] for c, v in sim.per_seed.items()}, sp_)[0] for s in range(seeds)], float)
        finite = int(np.sum(np.isfinite(per)))
        mean = float(np.nanmean(per)) if finite else math.nan
        sem = float(np.nanstd(per, ddof=1) / math.sqrt(finite)) if finite > 1 else math.nan
        spread = math.hypot(sem if math.isfinite(sem) else 0.0, e if math.isfinite(e) else 0.0)
        out.append({**check, "sgd": mean, "sgd_sem": sem, "per_seed": per.tolist(),
                    "sgd_seconds": _time.perf_counter() - t0, "within": bool(abs(mean - th) <= 2 * spread)})
    return out
