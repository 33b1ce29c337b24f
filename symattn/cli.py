"""Command line: ``symattn potential|derive|theory|simulate|compare`` (docs/interface.md).

Every failure is one line on stderr, never a traceback (``--debug`` shows it): bad input — the
spec, an option, an unwritable output, a size beyond this machine — exits 2; a detected
numerical failure (divergence, NaN) exits 3; an interrupt (Ctrl-C, SIGTERM) exits 130 / 143
and says whether anything was written. Outputs are checked before the work starts and written
atomically, so an interrupted run leaves either no file or a complete one.
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys

from .errors import NumericalFailure, SymattnError, UsageError
from .files import WRITTEN
from .limits import MIN_TOL, limit_of

EXIT_INPUT, EXIT_NUMERICAL, EXIT_INTERNAL = 2, 3, 1
_WRITTEN = WRITTEN                  # files written by this command (files.atomic_write; the interrupt message)

# ---------------------------------------------------------------------------- option checks (limits: symattn.limits)
def _finite_positive(name, value):
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} {value}: must be a finite number > 0")
    if value is not None and limit_of(name) is not None and value > limit_of(name):
        raise UsageError(f"{name} {value:g}: at most {limit_of(name):g} (docs/interface.md, Limits)")
    if name == "--tol" and value is not None and value < MIN_TOL:
        raise UsageError(f"--tol {value:g}: at least {MIN_TOL:g} (double-precision round-off)")
    return value


def _whole(name, value, low):
    if value is not None and value < low:
        raise UsageError(f"{name} {value}: must be a whole number >= {low}")
    if value is not None and limit_of(name) is not None and value > limit_of(name):
        raise UsageError(f"{name} {value}: at most {limit_of(name):g} (docs/interface.md, Limits)")
    return value


def _truncation(args, spec):
    from .spec import MAX_TRUNCATION
    if args.truncation is None:
        return spec.truncation
    if not 2 <= args.truncation <= MAX_TRUNCATION:
        raise UsageError(f"--truncation {args.truncation}: must be a whole number in [2, {MAX_TRUNCATION}]")
    return args.truncation


def _at(pairs):
    """--at NAME=VALUE, repeatable and space-separated; a name twice with different values is refused."""
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise UsageError(f"--at {item}: expected NAME=VALUE")
        k, v = (s.strip() for s in item.split("=", 1))
        try:
            x = float(v)
        except ValueError:
            raise UsageError(f"--at {item}: {v!r} is not a number") from None
        if not math.isfinite(x):
            raise UsageError(f"--at {item}: must be a finite number")
        if k in out and out[k] != x:
            raise UsageError(f"--at {k}: given twice with different values ({out[k]:g} and {x:g})")
        out[k] = x
    return out


def _load(args, dynamics: bool = False):
    """The command's spec; ``dynamics``: refused (exit 2) at once where SGD's dynamics are not defined
    (a loss that jumps along a trainable pre-activation, ``Loss.require_pathwise_gradient``)."""
    from .spec import load_spec
    spec = load_spec(args.spec, settings=args.set)
    if dynamics and spec.expression_loss:       # a named activation's MSE loss never jumps (tests/test_spec.py)
        from .symbolic.loss import build_loss
        build_loss(spec).require_pathwise_gradient()
    return spec


def _residual(args) -> bool:
    """Whether the command's spec is a residual network (``[student]``/``[teacher]``): then the command
    runs it through ``symattn.architecture.commands``."""
    from .spec import is_residual
    if not is_residual(args.spec):
        return False
    if args.set:
        raise UsageError("--set: not available for residual specs; edit the file")
    return True


def _write_table(table, out, digits=10, header=""):
    """CSV to --out (atomic) or stdout, one number format (``digits`` significant digits; None: exact)."""
    from .integration import csv_text
    text = header + csv_text(table, digits)
    if out:
        from .files import atomic_write
        atomic_write(out, text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)


# ---------------------------------------------------------------------------- commands
def cmd_potential(args):
    from .derivation.potential import Potential
    from .initial import initial_order_parameters

    if _residual(args):
        return _residual_potential(args)
    spec = _load(args)
    _finite_positive("--tol", args.tol)
    at = _at(args.at)
    P = Potential(spec, tol=args.tol)
    unknown = sorted(set(at) - set(P.names))
    if unknown:
        raise UsageError(f"--at {unknown[0]}: unknown order parameter; known: {', '.join(P.names)}")
    if args.dim is not None:
        _whole("--dim", args.dim, 2)
        _whole("--seed", args.seed, 0)
        if at:
            raise UsageError("--at: not with --dim (the exact finite-d loss depends on more than the order "
                             "parameters; it is evaluated at simulate's initial matrices of --seed)")
        return _finite_d_potential(spec, args, P)
    values = {**initial_order_parameters(spec), **at}
    values = {n: values[n] for n in P.names}
    why = P.infeasible(values)
    if why:
        raise UsageError(f"--at {', '.join(f'{k}={v:g}' for k, v in at.items())}: {why}")
    order, err = P.calibrate(values)
    val = P.value(values)
    grad = P.gradient_named(values)
    bad = [k for k, v in [("value", val), *grad.items()] if not math.isfinite(v)]
    if bad:
        raise NumericalFailure(f"Φ or its gradient is not finite at these order parameters ({bad[0]})")
    if args.json:
        out = {"value": val, "gradient": grad, "at": values}
        if P.quad_terms:
            out["quadrature"] = {"nodes_per_dim": list(order), "error_estimate": err}   # one entry per term
        print(json.dumps(out, indent=2, allow_nan=False))
        return
    _print_phi(P, args.latex)
    if P.quad_terms:
        print(f"quadrature: {', '.join(map(str, order))} nodes per dimension (one per term), "
              f"error estimate {err:.2e}")
    print("at " + ", ".join(f"{k}={v:g}" for k, v in values.items()))
    print(f"Φ = {val:.12g}")
    for k, v in grad.items():
        print(f"Γ[{k}] = {v:.12g}")


def _print_phi(P, latex: bool):
    """Φ as what it is: its closed form, or the closed part plus each Gaussian expectation E_{G∼N(m(θ), C(θ))}[f]
    of a non-polynomial term (``Potential.expression``), one per line; ``latex``: in readable LaTeX symbols."""
    import sympy as sp
    names = P.latex_names()

    def show(e):
        return sp.latex(e, symbol_names=names) if latex else sp.sstr(e)
    if P.is_closed_form:
        print(f"Φ = {show(P.closed_form)}")
        return
    terms = sp.Add.make_args(P.expression() - P.closed_form)
    head = f"{show(P.closed_form)} + " if P.closed_form != 0 else ""
    print(f"Φ = {head}the sum of {len(terms)} Gaussian expectation(s) over the pre-activations G, integrated by "
          f"quadrature (docs/theory.md §2):")
    for t in terms:
        print(f"    {show(t)}")


def _finite_d_potential(spec, args, P):
    """``potential --dim D``: Φ_d exactly (derivation.finite_d) and, at simulate's initial matrices of --seed,
    its value against the limit Φ (``P``) at the same order parameters."""
    import sympy as sp

    from .derivation.finite_d import FiniteDPotential, dense_matrices
    from .initial import draw_initial
    from .measure import order_parameters
    F = FiniteDPotential.stored(spec)
    states = draw_initial(spec, args.dim, args.seed)
    mats = dense_matrices(spec, states)
    exact = F.value(mats)
    row = order_parameters(spec, states, args.dim)
    limit = P.value({n: row[n] for n in P.names})
    if args.json:
        print(json.dumps({"dim": args.dim, "seed": args.seed, "expression": str(F.expression()),
                          "value": exact, "limit_value": limit, "at": {n: row[n] for n in P.names},
                          "traces": {F.word_name(w): v for w, v in F.traces(mats).items()}}, indent=2,
                         allow_nan=False))
        return
    expr = F.expression()
    print(f"Φ_d (exact at finite d, {len(F.words)} normalised traces tr(w) = Tr(w)/d) = "
          f"{sp.latex(expr) if args.latex else expr}")
    print(f"at simulate's initial matrices, d = {args.dim}, seed {args.seed}: Φ_d = {exact:.12g}; "
          f"the limit Φ at the same order parameters = {limit:.12g} (difference {exact - limit:.3g})")


def _residual_potential(args):
    from .architecture import commands
    out = commands.potential(args.spec, _at(args.at))
    bad = [k for k, v in [("value", out["value"]), *out["gradient"].items()] if not math.isfinite(v)]
    if bad:
        raise NumericalFailure(f"Φ or its gradient is not finite at these order parameters ({bad[0]})")
    if args.json:
        print(json.dumps(out, indent=2, allow_nan=False))
        return
    print(f"Φ (residual network: Gaussian limit of {len(out['at'])} order parameters, quasi-Monte Carlo)")
    print("at " + ", ".join(f"{k}={v:.6g}" for k, v in out["at"].items()))
    print(f"Φ = {out['value']:.12g} ± {out['standard_error']:.2g}")
    for k, v in out["gradient"].items():
        print(f"∂Φ/∂{k} = {v:.12g}")


def cmd_derive(args):
    import time

    from .codegen.load import default_path, write_module
    from .codegen.systems import compiled, module_file
    from .derivation import derive, require_moments
    from .files import check_output_file
    spec = _load(args, dynamics=True)
    M = _truncation(args, spec)
    require_moments(spec, M)
    if args.equations:
        if args.out is not None:
            raise UsageError("--out: not with --equations (the equations go to stdout; redirect them to a file)")
        t0 = time.perf_counter()
        system = derive(spec, M)
        sys.stdout.write(_equations_text(system, args.equations, args.closed))
        from .progress import note
        note(f"{system.spec.name}, M = {system.truncation}: {system.size} moments, {len(system.terms)} terms "
             f"({time.perf_counter() - t0:.2f} s)")
        return
    out = check_output_file(default_path(spec, M) if args.out is None else args.out, "--out")
    t0 = time.perf_counter()
    system = derive(spec, M)
    t1 = time.perf_counter()
    stored = " (read from the store of derived systems)" if getattr(system, "_source", None) is not None else ""
    path = write_module(module_file(system), out)
    t2 = time.perf_counter()
    compiled(system)
    t3 = time.perf_counter()
    print(f"wrote {path}: {system.size} moments, {len(system.terms)} terms; derived in {t1 - t0:.2f} s{stored}, "
          f"printed in {t2 - t1:.2f} s, compiled in {t3 - t2:.2f} s")


def _equations_text(system, form: str, closed: bool) -> str:
    """``derive --equations``: the system as plain text, a LaTeX document or JSON (docs/interface.md)."""
    eq = system._sympy
    if form == "text":
        head = (f"# {system.spec.name}: {system.description}, M = {system.truncation}, {system.size} moments; "
                f"package time tau = n*alpha/d{'; coefficients in closed form' if closed else ''}\n")
        return head + "\n".join(eq.text(closed)) + "\n"
    if form == "json":
        import sympy as sp
        return json.dumps({"spec": system.spec.name, "truncation": system.truncation, "closed": bool(closed),
                           "time": "package time tau = n*alpha/d",
                           "equations": {n: sp.sstr(e) for n, e in system.equations(closed).items()},
                           "symbols": {n: str(s) for n, s in system.symbols().items()}}, indent=1,
                          ensure_ascii=False) + "\n"
    return eq.latex_document(closed)


def _theory_method(args, residual: bool) -> str:
    """The method the theory command's flags ask for; two that ask for different methods are refused."""
    asked = [(f, m) for f, m, on in (("--exact-finite-d", "finite_d", args.exact_finite_d), ("--fast", "fast_phase", args.fast),
                                    (f"--method {args.method}", args.method, args.method != "auto")) if on]
    if residual:
        if asked and asked[0][1] != "spectral":
            raise UsageError(f"{asked[0][0]}: not with a residual network (it has the matrix-level theory only, at "
                             f"--size N, docs/theory.md §10)")
        return "residual"
    if len(asked) > 1:
        raise UsageError(f"{asked[1][0]}: not with {asked[0][0]}")
    return asked[0][1] if asked else "auto"


def _theory_given(args) -> dict:
    """The theory options the command line sets (``symattn.methods``): only those given, so that a method refuses
    an option it does not take by name."""
    return {"time": args.time, "points": args.points, "seed": args.seed, "dim": args.dim,
            "truncation": args.truncation, "init": None if args.init == "free" else args.init,
            "noise": False if args.noise == "off" else None, "log_time": args.log_time or None,
            "size": args.size, "rotations": args.rotations, "realisations": args.realisations,
            "quick": args.quick or None, "error_estimate": False if args.no_error_estimate else None,
            "spectra": True if (args.spectra or args.spectra_plot) else None}


def cmd_theory(args):
    import warnings

    from .methods import plan
    from .progress import note
    residual = _residual(args)
    spec = args.spec if residual else _load(args, dynamics=True)
    if args.out is not None:
        from .files import check_output_file
        check_output_file(args.out, "--out")
    for opt in ("spectra", "spectra_plot"):
        if getattr(args, opt):
            from .files import check_output_file
            check_output_file(getattr(args, opt), "--" + opt.replace("_", "-"))
    run = plan(spec, _theory_method(args, residual), cli=True, **_theory_given(args))
    name = run.method.name
    if name in ("residual", "finite_d") and args.noise == "on" and (residual or spec.epsilon(args.dim) > 0):
        note("residual network: the matrix-level flow has no SGD-noise terms (the ε → 0 limit, docs/theory.md §10)"
             if residual else "--exact-finite-d: the expected-gradient flow (SGD's mean step at this d, without its "
                              "O(ε) fluctuations)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run.run()
    for w in caught:
        print(f"symattn: warning: {w.message}", file=sys.stderr)
    if name == "fast_phase":
        print("fast-phase fixed point: " + ", ".join(f"m_{k}* = {v:.6g}" for k, v in result.info["m_star"].items()),
              file=sys.stderr)
    if args.spectra:
        result.result.spectra_to_csv(args.spectra, full=args.spectra_full)
    if args.spectra_plot:
        from .spectral import plot_spectra
        plot_spectra(result.result, path=args.spectra_plot)
    _write_table(result.table, args.out)


def cmd_simulate(args):
    from .simulation.run import simulate

    if args.dim is None:
        raise UsageError("--dim: required (the embedding dimension d, a whole number >= 1)")
    if _residual(args):
        from .architecture import commands
        _whole("--dim", args.dim, 2)
        _whole("--seeds", args.seeds, 1)
        _whole("--seed0", args.seed0, 0)
        _finite_positive("--time", args.time)
        _whole("--points", args.points, 2)
        _write_table(commands.simulate(args.spec, args.dim, args.seeds, args.time, args.points, seed0=args.seed0,
                                       backend=args.backend if args.backend != "numpy" else "torch",
                                       device=args.device, dtype=args.dtype), args.out, digits=None)
        return
    spec = _load(args, dynamics=True)
    _whole("--dim", args.dim, 1)
    _whole("--seeds", args.seeds, 1)
    _whole("--seed0", args.seed0, 0)
    _whole("--workers", args.workers, 1)
    _finite_positive("--time", args.time)
    _whole("--points", args.points, 2)
    if args.out is not None:
        from .files import check_output_file
        check_output_file(args.out, "--out")
    elif args.partial:
        raise UsageError("--partial: needs --out FILE (the partial table is written there)")
    partial = {} if args.partial else None
    try:
        res = simulate(spec, dim=args.dim, seeds=args.seeds, time=args.time, points=args.points,
                       seed0=args.seed0, workers=args.workers, progress=not args.quiet, partial=partial,
                       backend=args.backend, device=args.device, dtype=args.dtype, log_time=args.log_time)
    except KeyboardInterrupt:
        if partial and partial.get("table"):
            from .files import PENDING_SIGNALS
            PENDING_SIGNALS.clear()              # this interrupt is being handled: the partial table is wanted
            t = partial["table"]["time"]
            _write_table(partial["table"], args.out, digits=None,
                         header=f"# partial: interrupted; {len(t)} of {args.points} time points, up to time {t[-1]:.6g}\n")
            _WRITTEN[-1] = f"{args.out} (partial, marked as such in its first line)"
        raise
    _write_table(res.table, args.out, digits=None)


def _dims(text):
    """--dims D1,D2[,D3...] -> sorted distinct positive ints."""
    try:
        dims = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--dims {text}: expected comma-separated whole numbers, e.g. 100,200") from None
    if any(d <= 0 for d in dims):
        raise UsageError(f"--dims {text}: dimensions must be > 0")
    if len(set(dims)) < 2:
        raise UsageError(f"--dims {text}: needs two or more distinct dimensions, e.g. 100,200")
    return sorted(set(dims))


def cmd_compare(args):
    import warnings

    from .comparison import compare, compare_dims
    from .files import check_output_dir

    if _residual(args):
        if args.dim is None or args.dims is not None:
            raise UsageError("compare: a residual network takes --dim D (the theory from each seed's matrices)")
        return cmd_residual(args)
    spec = _load(args, dynamics=True)
    if (args.dim is None) == (args.dims is None):
        raise UsageError("compare: give exactly one of --dim D or --dims D1,D2[,D3]")
    dims = _dims(args.dims) if args.dims is not None else None
    _whole("--dim", args.dim, 1)
    _whole("--seeds", args.seeds, 1)
    _finite_positive("--time", args.time)
    _whole("--points", args.points, 2)
    if args.size is not None:
        _whole("--size", args.size, 4)
        if (args.init or ("free" if args.dims else "sample")) == "sample":
            raise UsageError("--size: not used with --init sample (the matrices are simulate's, N = --dim); "
                             "add --init free")
    if args.truncation is not None:
        _truncation(args, spec)
    check_output_dir(args.out, "--out")
    if dims is not None and args.init == "sample":
        raise UsageError("--init sample: needs a single --dim (the --dims theory starts from the d → ∞ state)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if dims is None:
            summary = compare(spec, dim=args.dim, seeds=args.seeds, time=args.time, points=args.points,
                              out=args.out, truncation=args.truncation, init=args.init or "sample",
                              noise=args.noise != "off", method=args.method, size=args.size,
                              progress=not args.quiet)
        else:
            summary = compare_dims(spec, dims, seeds=args.seeds, time=args.time, points=args.points,
                                   out=args.out, truncation=args.truncation, noise=args.noise != "off",
                                   method=args.method, size=args.size, progress=not args.quiet)
    for w in caught:
        print(f"symattn: warning: {w.message}", file=sys.stderr)
    if dims is None:
        rows = [(c, v["max_abs_dev"], v["theory_range"]) for c, v in summary["columns"].items()]
        print(f"{'column':28s} {'max |dev|':>10s}   theory range")
        for c, dev, rng in rows:
            print(f"{c:28s} {dev:10.4g}   [{rng[0]:.4g}, {rng[1]:.4g}]")
        print(f"wrote {args.out}/theory.csv, simulation.csv, comparison.png, summary.json")
        return
    ext = summary["extrapolated"]["all"]
    print(f"{'column':28s} " + " ".join(f"{'|dev| d=' + str(d):>12s}" for d in dims)
          + f" {'|dev| 1/d→0':>12s} {'/ its error':>11s}")
    for c, v in ext.items():
        per = [summary["columns_by_dim"][str(d)]["all"][c]["max_abs_dev"] for d in dims]
        z = v["max_dev_over_sem"]
        print(f"{c:28s} " + " ".join(f"{x:12.4g}" for x in per) + f" {v['max_abs_dev']:12.4g} "
              + (f"{z:11.3g}" if z is not None else f"{'-':>11s}"))
    files = ", ".join(f"simulation_d{d}.csv" for d in dims)
    print(f"wrote {args.out}/theory.csv, {files}, extrapolated.csv, comparison.png, summary.json")


def cmd_sweep(args):
    from .files import check_output_dir
    from .sweeps import sweep
    if args.set:
        raise UsageError("--set: put the settings of a sweep in its grid file ([grid] lists)")
    _whole("--jobs", args.jobs, 1)
    check_output_dir(args.out, "--out")
    res = sweep(args.grid, args.out, executor=args.executor, jobs=args.jobs, progress=not args.quiet)
    print(f"sweep: {res['tasks']} tasks, {res['ran']} run, {res['skipped']} already done; results in {res['out']}")


def cmd_collect(args):
    from .files import check_output_file
    from .sweeps import collect
    check_output_file(args.out, "--out")
    table = collect(args.folder, args.out, per_seed=args.per_seed)
    print(f"wrote {args.out} ({len(next(iter(table.values())))} rows)")


def cmd_residual(args):
    from .architecture.compare import compare_residual
    from .files import make_output_dir
    if args.set:
        raise UsageError("--set: not available for residual specs; edit the file")
    if args.dim is None or args.dim < 2:
        raise UsageError(f"--dim {args.dim}: a dimension d >= 2 is required")
    out = make_output_dir(args.out, "--out")
    res = compare_residual(args.spec, args.dim, seeds=args.seeds, time=args.time, points=args.points)
    _write_table(res["theory"], str(out / "theory.csv"))
    _write_table(res["simulation"], str(out / "simulation.csv"))
    worst = max(res["max_abs_dev"], key=res["max_abs_dev"].get)
    print(f"max |SGD − theory| over {len(res['max_abs_dev'])} columns and seeds {res['seeds']}: "
          f"{res['max_abs_dev'][worst]:.4g} ({worst})")


def cmd_recovery(args):
    from .derivation.recovery import recovery
    spec = _load(args, dynamics=True)
    result = recovery(spec)
    if args.json:
        print(json.dumps({k: v.to_json() for k, v in result.items()}, indent=1, ensure_ascii=False, allow_nan=False))
        return
    import sympy as sp
    for name, r in result.items():
        cond = r.condition if isinstance(r.condition, tuple) else (r.condition,)
        print(f"{name} against {r.teacher} — {r.mechanism}")
        print(f"  condition (≠ 0 for first-order signal): {' ; '.join(sp.sstr(c) for c in cond)}")
        print(f"  at {', '.join(f'{k} = {v:g}' for k, v in r.parameters.items())}: "
              f"{', '.join(f'{v:.6g}' for v in (r.value if isinstance(r.value, tuple) else (r.value,)))}")
        print(f"  d{r.overlap}/dτ at τ = 0 (d → ∞, ε → 0): {r.velocity:.6g}")
        if r.instability is not None:
            print(f"  growth rate of the overlap at the uninformative state: λ = {r.instability:.6g}")
        print(f"  signal: {'yes' if r.signal else 'no'} — {r.verdict}")


def cmd_phase(args):
    from .files import check_output_dir, make_output_dir
    from .phase_diagram import phase
    spec = _load(args, dynamics=True)
    _finite_positive("--time", args.time)
    _whole("--points", args.points, 2)
    _whole("--workers", args.workers, 1)
    _whole("--check", args.check, 0)
    _whole("--check-dim", args.check_dim, 2)
    _whole("--check-seeds", args.check_seeds, 2)
    check_output_dir(args.out, "--out")
    opts = {"size": args.size, "rotations": args.rotations, "realisations": args.realisations,
            "quick": args.quick or None, "noise": False if args.noise == "off" else None, "dim": args.dim,
            "truncation": args.truncation}
    pd = phase(spec, args.vary, args.measure, time=args.time, points=args.points, method=args.method,
               workers=args.workers, check=args.check, check_dim=args.check_dim, check_seeds=args.check_seeds,
               progress=not args.quiet, cli=True, **opts)
    out = make_output_dir(args.out, "--out")
    pd.to_csv(out / "phase.csv")
    written = ["phase.csv"]
    try:
        pd.to_netcdf(out / "phase.nc")
        written.append("phase.nc")
    except UsageError:
        from .progress import note
        note("phase.nc not written: netCDF needs the netcdf extra (pip install 'symattn[netcdf]')")
    pd.plot(out / "phase.png")
    from .files import atomic_write
    summary = {"spec": pd.spec_name, "measure": pd.measure.label, "axes": {a.label: list(a.values) for a in pd.axes},
               "info": pd.info, "boundary": pd.boundary.get("text"), "checks": pd.checks}
    atomic_write(out / "summary.json", json.dumps(summary, indent=1, ensure_ascii=False, default=str))
    print(f"{pd.value.size} points, {pd.info['seconds_per_point']:.3g} s per point ({pd.info['workers']} processes); "
          f"{pd.boundary.get('text', '')}")
    for c in pd.checks:
        sgd = f"failed ({c['failed']})" if c.get("failed") else f"{c['sgd']:.4g} ± {c['sgd_sem']:.2g}"
        print(f"SGD check at {c['at']}: {sgd} (d = {c['dim']}, {c['seeds']} seeds, "
              f"{c['sgd_seconds']:.0f} s) against theory {c['theory']:.4g} ± {c['theory_err']:.2g}")
    print(f"wrote {args.out}/{', '.join(written + ['phase.png', 'summary.json'])}")


def cmd_examples(args):
    from .examples import example_description, example_names
    for name in example_names():
        print(f"{name:28s} {example_description(name)}")


# ---------------------------------------------------------------------------- parser
class _Formatter(argparse.HelpFormatter):
    """Help text with a default shown where there is one to show (not None or off) and the text does not
    already state it."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default == argparse.SUPPRESS or "default" in text
                or action.option_strings == [] or isinstance(default, list)):
            return text
        return f"{text} (default: {default})"


def _common():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--quiet", action="store_true", help="no progress or notes on stderr")
    p.add_argument("--debug", action="store_true", help="show the Python traceback of a failure")
    p.add_argument("--set", action="append", default=None, metavar="KEY=VALUE",
                   help="override a spec key by dotted path (training.noise_ratio=0.005, "
                        "indices.student.init_scale=0.6); repeatable, validated like the spec")
    return p


def _spec_arg(q):
    q.add_argument("spec", help="model specification: a TOML file, or the name of a shipped example "
                                "(symattn examples lists them)")


def _theory_options(q, defaults_points=51, log_time=True, init="free"):
    q.add_argument("--time", type=float, default=1.0, help="final package time nα/d")
    q.add_argument("--points", type=int, default=defaults_points, help="output times on [0, T] (>= 2)")
    if log_time:
        q.add_argument("--log-time", action="store_true",
                       help="0 and points − 1 log-spaced times from T/1000 to T (dynamics spanning decades)")
    q.add_argument("--truncation", type=int, default=None, help="word length M (default: the spec's theory.truncation)")
    q.add_argument("--init", choices=["free", "sample"], default=init,
                   help="initial state: free-probability limit, or simulate's own matrices at --dim (compare: "
                        "each seed's, the theory averaged over the seeds; the default of compare)")
    q.add_argument("--noise", choices=["on", "off"], default="on",
                   help="SGD-noise terms of ratio ε = αd/B (off: the paper's ε → 0 limit)")
    q.add_argument("--method", choices=["auto", "moments", "spectral"], default="auto",
                   help="auto: the closed hierarchy where it is exact (direct, general students), else the "
                        "matrix-level limit (N = 128, mean of 4 realisations, errors from them and N/2); moments: "
                        "the truncated hierarchy; "
                        "spectral: the matrix-level flow")


def add_spectral_arguments(parser):
    """Options of ``symattn theory SPEC --method spectral`` (--time, --points, --seed, --out and
    --method are the theory command's own): --size, --rotations, --realisations, --quick, --spectra,
    --spectra-full, --spectra-plot, --no-error-estimate."""
    parser.add_argument("--size", type=int, default=None,
                        help="spectral: the matrix size N (default 128; with the N/2 run for <col>_err)")
    parser.add_argument("--rotations", type=int, default=None,
                        help="spectral: independent realisations of the initial laws averaged (seeds seed … "
                             "seed + R − 1; their standard error enters <col>_err; default 4, 1 with --init sample)")
    parser.add_argument("--realisations", type=int, default=None,
                        help="spectral with SGD noise (ε > 0): noise paths per realisation (default 1; an even "
                             "number is run as antithetic pairs)")
    parser.add_argument("--quick", action="store_true",
                        help="spectral: interactive use, N = 96 (with the N/2 run; about a fifth cheaper, up to ≈ 3× "
                             "the default's error, still bounded by <col>_err)")
    parser.add_argument("--spectra", default=None, metavar="FILE",
                        help="spectral: write eigenvalue quantiles per time to FILE (CSV)")
    parser.add_argument("--spectra-full", action="store_true", help="spectral: all N eigenvalues in --spectra")
    parser.add_argument("--spectra-plot", default=None, metavar="PNG", help="spectral: eigenvalue-density plot")
    parser.add_argument("--no-error-estimate", action="store_true",
                        help="spectral: skip the N/2 run that fills the <col>_err columns")
    return parser


def build_parser():
    from .version import __version__

    common = _common()
    p = argparse.ArgumentParser(
        prog="symattn", formatter_class=_Formatter,
        description="Exact high-dimensional learning dynamics of attention-indexed models: derive the population "
                    "loss and the limit equations of online SGD from a model spec, integrate them, and check them "
                    "against SGD at finite dimension. Every command takes a spec (a TOML file or a shipped "
                    "example's name: symattn examples); symattn COMMAND --help for its options.")
    p.add_argument("--version", action="version", version=f"symattn {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND",
                           title="commands (symattn COMMAND --help for each)")

    def command(name, help_):
        return sub.add_parser(name, help=help_, description=help_, parents=[common], formatter_class=_Formatter)

    q = command("potential", "population loss Φ and its gradient")
    _spec_arg(q)
    q.add_argument("--at", action="extend", nargs="+", metavar="NAME=VALUE", default=None,
                   help="order parameters to evaluate at (repeatable); the others at their initial values")
    q.add_argument("--json", action="store_true", help="print value and gradient as JSON")
    q.add_argument("--tol", type=float, default=1e-8, help="quadrature tolerance")
    q.add_argument("--latex", action="store_true", help="print Φ as LaTeX")
    q.add_argument("--dim", type=int, default=None, metavar="D",
                   help="also the exact population loss at d = D (a loss polynomial in G): its expression in "
                        "normalised traces with explicit 1/d, and its value at simulate's initial matrices")
    q.add_argument("--seed", type=int, default=0, help="with --dim: the seed of those matrices")
    q.set_defaults(func=cmd_potential)

    q = command("derive", "derive the limit ODE system and write its generated module, or print its equations")
    _spec_arg(q)
    q.add_argument("--truncation", type=int, default=None, help="word length M (default: the spec's)")
    q.add_argument("--out", default=None, help="module file (default generated/<name>_M<M>.py)")
    q.add_argument("--equations", choices=["text", "latex", "json"], default=None,
                   help="print the equations dμ_w/dτ to stdout instead of writing the module: plain text, a LaTeX "
                        "document, or JSON {equations, symbols, closed}")
    q.add_argument("--closed", action="store_true",
                   help="with --equations: the coefficients (Γ, ν, β̄) in closed form in the moments")
    q.set_defaults(func=cmd_derive)

    q = command("theory", "integrate the limit equations")
    _spec_arg(q)
    q.add_argument("--exact-finite-d", action="store_true",
                   help="with --dim D: the exact expected-gradient flow at d = D (a loss polynomial in G) on "
                        "simulate's initial matrices of --seed, instead of the d → ∞ limit")
    _theory_options(q)
    q.add_argument("--dim", type=int, default=None, help="d for --init sample or a learning_rate spec")
    q.add_argument("--seed", type=int, default=0, help="seed of the sampled matrices (--init sample)")
    q.add_argument("--out", default=None, help="CSV file (default: stdout)")
    q.add_argument("--fast", action="store_true",
                   help="untied: the fast phase of the means on the fast axis nα (column time_fast); "
                        "with --dim D also on nα/d")
    add_spectral_arguments(q)
    q.set_defaults(func=cmd_theory)

    q = command("simulate", "online SGD at finite d, averaged over seeds")
    _spec_arg(q)
    q.add_argument("--dim", type=int, default=None, metavar="D", help="embedding dimension d (required)")
    q.add_argument("--seeds", type=int, default=1, metavar="S", help="number of seeds")
    q.add_argument("--seed0", type=int, default=0, metavar="S0", help="first seed")
    q.add_argument("--time", type=float, default=1.0, metavar="T", help="final package time nα/d")
    q.add_argument("--points", type=int, default=21, metavar="N", help="measurement times on [0, T] (>= 2)")
    q.add_argument("--log-time", action="store_true",
                   help="0 and N − 1 log-spaced times from max(one step, T/1000) to T")
    q.add_argument("--out", default=None, metavar="CSV", help="output file (default: stdout)")
    q.add_argument("--workers", type=int, default=None, metavar="W", help="parallel processes (default min(S, cores))")
    q.add_argument("--backend", choices=["numpy", "torch", "jax"], default="numpy",
                   help="array library of the SGD step (torch: all seeds in one batched kernel, CPU or GPU)")
    q.add_argument("--device", default="cpu", help="cpu, or cuda[:N] with --backend torch")
    q.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                   help="precision of the SGD step (traces are accumulated in float64)")
    q.add_argument("--partial", action="store_true",
                   help="on an interrupt, write the time points every seed finished to --out, marked partial")
    q.set_defaults(func=cmd_simulate)

    q = command("compare", "theory and simulation side by side")
    _spec_arg(q)
    q.add_argument("--dim", type=int, default=None, help="one dimension d (exclusive with --dims)")
    q.add_argument("--dims", metavar="D1,D2[,D3]", default=None,
                   help="several d: simulate at each and extrapolate linearly in 1/d (exclusive with --dim)")
    q.add_argument("--seeds", type=int, default=4, help="seeds per dimension")
    _theory_options(q, defaults_points=21, log_time=False, init=None)
    q.add_argument("--size", type=int, default=None,
                   help="spectral: the matrix size N (default 128, the mean of 4 realisations; --init sample: d)")
    q.add_argument("--out", default="compare_out", help="output folder")
    q.set_defaults(func=cmd_compare)

    q = command("sweep", "run a grid of simulations or theories (local process pool or a SLURM job array)")
    q.add_argument("grid", help="grid file (TOML): spec, command, time, points, [grid], [executor]")
    q.add_argument("--out", required=True, help="output folder (one CSV + JSON per task; rerunning skips done tasks)")
    q.add_argument("--executor", choices=["local", "slurm"], default=None,
                   help="local process pool or submitit job array (default: the grid's executor.name, else local)")
    q.add_argument("--jobs", type=int, default=None, help="parallel tasks (local: processes; slurm: array parallelism)")
    q.set_defaults(func=cmd_sweep)

    q = command("collect", "merge a sweep's tasks into one table: mean and SEM over seeds per grid point")
    q.add_argument("folder", help="the sweep's output folder")
    q.add_argument("--out", required=True, help="table file: .csv, or .nc (netCDF, needs xarray)")
    q.add_argument("--per-seed", action="store_true", help="one row per task and time instead of seed means")
    q.set_defaults(func=cmd_collect)

    q = command("residual", "residual attention with value matrices: matrix-level theory against SGD on the recursion")
    _spec_arg(q)
    q.add_argument("--dim", type=int, default=None, metavar="D", help="embedding dimension d (required)")
    q.add_argument("--seeds", type=int, default=2, metavar="S", help="number of seeds")
    q.add_argument("--time", type=float, default=0.2, metavar="T", help="final package time nα/d")
    q.add_argument("--points", type=int, default=11, metavar="N", help="measurement times on [0, T] (>= 2)")
    q.add_argument("--out", default="residual_out", help="output folder (theory.csv, simulation.csv)")
    q.set_defaults(func=cmd_residual)

    q = command("recovery", "the paper's weak-recovery analysis: first-order signal, its condition and the initial "
                            "velocity of the overlap, per trainable index")
    _spec_arg(q)
    q.add_argument("--json", action="store_true", help="print the analysis as JSON, keyed by the trainable index")
    q.set_defaults(func=cmd_recovery)

    q = command("phase", "a phase diagram: a measure of the limit theory over a grid of one or two spec values, with "
                         "the recovery analysis's boundary and SGD checks")
    _spec_arg(q)
    q.add_argument("--vary", action="append", required=True, metavar="KEY=A:B:N[:log]",
                   help="an axis (once or twice): a dotted spec key as for --set, or sigma/kappa (the first "
                        "student's init_scale/width), epsilon, beta, gamma; A:B:N equally spaced (:log geometric) or "
                        "v1,v2,...")
    q.add_argument("--measure", default="escape_time", metavar="M",
                   help="escape_time[=θ] (first τ with normalised overlap ≥ θ, default 0.3), loss_at=τ, p_at=τ or "
                        "COLUMN_at=τ")
    q.add_argument("--time", type=float, default=1.0, help="horizon of every point's theory")
    q.add_argument("--points", type=int, default=51, help="output times of every point's theory")
    q.add_argument("--method", choices=["auto", "moments", "spectral"], default="auto", help="as for theory")
    q.add_argument("--truncation", type=int, default=None, help="as for theory (--method moments)")
    for flag, hlp in (("--size", "as for theory"), ("--rotations", "as for theory"), ("--realisations", "as for theory"),
                      ("--dim", "as for theory")):
        q.add_argument(flag, type=int, default=None, help=hlp)
    q.add_argument("--quick", action="store_true", help="as for theory: N = 96")
    q.add_argument("--noise", choices=["on", "off"], default="on", help="as for theory")
    q.add_argument("--workers", type=int, default=None, help="processes (default: the cores)")
    q.add_argument("--check", type=int, default=0, metavar="K", help="also simulate K grid points (SGD)")
    q.add_argument("--check-dim", type=int, default=200, metavar="D", help="d of the SGD checks")
    q.add_argument("--check-seeds", type=int, default=2, metavar="S", help="seeds of the SGD checks")
    q.add_argument("--out", default="phase_out", help="output folder: phase.csv, phase.nc (netcdf extra), phase.png, "
                                                      "summary.json")
    q.set_defaults(func=cmd_phase)

    q = command("examples", "list the example specs shipped with the package")
    q.set_defaults(func=cmd_examples)
    return p


# ---------------------------------------------------------------------------- entry point
class _Terminated(KeyboardInterrupt):
    """SIGTERM (a cluster's preemption) handled like Ctrl-C."""


def _on_sigterm(signum, frame):
    from .files import PENDING_SIGNALS
    PENDING_SIGNALS.append(_Terminated)
    raise _Terminated()


def _on_sigint(signum, frame):
    """Ctrl-C: recorded (``files.PENDING_SIGNALS``), then raised as usual."""
    from .files import PENDING_SIGNALS
    PENDING_SIGNALS.append(KeyboardInterrupt)
    raise KeyboardInterrupt()


def _fail(msg, code):
    print(f"symattn: {msg}", file=sys.stderr, flush=True)
    return code


def _one_line(exc) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:      # argparse printed its usage and one error line; status 2
        return exc.code
    import warnings

    from .progress import configure
    configure(quiet=args.quiet)
    _WRITTEN.clear()
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warning
    from .files import INPUTS, PENDING_SIGNALS, raise_pending_signal
    PENDING_SIGNALS.clear()
    INPUTS.clear()
    main_thread = _main_thread()
    old_term = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    old_int = signal.signal(signal.SIGINT, _on_sigint) if main_thread else None
    old_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable
    try:
        args.func(args)
        raise_pending_signal()           # an interrupt swallowed by a finaliser still ends the run as one
    except KeyboardInterrupt as exc:
        if args.debug:
            raise
        return _interrupted(exc)
    except Exception as exc:
        if PENDING_SIGNALS or _caused_by_interrupt(exc):     # e.g. SystemError: a C extension met the signal
            if args.debug:
                raise
            return _interrupted(PENDING_SIGNALS[0]() if PENDING_SIGNALS else KeyboardInterrupt())
        return _failure(exc, args)
    finally:
        warnings.showwarning = shown
        sys.unraisablehook = old_hook
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        if old_int is not None:
            signal.signal(signal.SIGINT, old_int)
    return 0


def _interrupted(exc) -> int:
    """Exit 130 (Ctrl-C) or 143 (SIGTERM) with one line saying what was written (``files.WRITTEN``)."""
    what = "written: " + ", ".join(map(str, _WRITTEN)) if _WRITTEN else "no output file was written"
    name = "terminated" if isinstance(exc, _Terminated) else "interrupted"
    return _fail(f"{name}; {what}", 143 if isinstance(exc, _Terminated) else 130)


def _caused_by_interrupt(exc) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _unraisable(info):
    """An interrupt raised inside a finaliser (``__del__``, e.g. of a Numba object) is already recorded by the
    signal handler (``files.PENDING_SIGNALS``): no traceback; anything else as Python would show it."""
    if isinstance(info.exc_value, KeyboardInterrupt):
        return
    sys.__unraisablehook__(info)


def _failure(exc, args) -> int:
    """The exit status and one line of a failure that is not an interrupt (module docstring)."""
    try:
        raise exc
    except NumericalFailure as exc:
        if args.debug:
            raise
        return _fail(f"numerical failure: {_one_line(exc)}", EXIT_NUMERICAL)
    except SymattnError as exc:
        if args.debug:
            raise
        return _fail(f"error: {_one_line(exc)}", EXIT_INPUT)
    except MemoryError:
        if args.debug:
            raise
        return _fail("error: not enough memory for this request; use a smaller size", EXIT_INPUT)
    except RecursionError:
        if args.debug:
            raise
        return _fail("error: the expression or system is too deeply nested to process", EXIT_INPUT)
    except BrokenPipeError:                                     # the reader stopped (| head): not an error
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if args.debug:
            raise
        where = f" {exc.filename}" if getattr(exc, "filename", None) else ""
        done = f" (written before it: {', '.join(map(str, _WRITTEN))})" if _WRITTEN else ""
        return _fail(f"error: cannot access{where}: {exc.strerror or _one_line(exc)}{done}", EXIT_INPUT)
    except Exception as exc:                                    # a bug: still one line
        if args.debug:
            raise
        return _fail(f"internal error ({type(exc).__name__}: {_one_line(exc)[:200]}); "
                     f"rerun with --debug for the traceback", EXIT_INTERNAL)


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """Warnings on the command line: one line each, without the source location."""
    print(f"symattn: warning: {' '.join(str(message).split())}", file=sys.stderr, flush=True)


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


if __name__ == "__main__":
    sys.exit(main())
