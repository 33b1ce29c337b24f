"""Command line: ``symattn potential|derive|theory|simulate|compare`` (INTERFACE.md).

Errors in the user's input (spec, options) print one line and exit with status 2;
detected numerical failures (divergence, NaN) print one line and exit with status 3.
"""
from __future__ import annotations

import argparse
import json
import sys

from .errors import NumericalFailure
from .spec import SpecError, load_spec


def _at(pairs):
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise SpecError(f"--at {item}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise SpecError(f"--at {item}: {v!r} is not a number") from None
    return out


def cmd_potential(args):
    from .derive.potential import Potential
    from .initial import initial_order_parameters

    spec = load_spec(args.spec)
    P = Potential(spec, tol=args.tol)
    at = _at(args.at)
    unknown = sorted(set(at) - set(P.names))
    if unknown:
        raise SpecError(f"--at {unknown[0]}: unknown order parameter; known: {', '.join(P.names)}")
    values = {**initial_order_parameters(spec), **at}
    values = {n: values[n] for n in P.names}
    order, err = P.calibrate(values)
    val = P.value(values)
    grad = P.gradient_named(values)
    if args.json:
        out = {"value": val, "gradient": grad, "at": values}
        if P.quad_terms:
            out["quadrature"] = {"nodes_per_dim": order, "error_estimate": err}
        print(json.dumps(out, indent=2))
        return
    kind = "closed form" if P.is_closed_form else f"closed form + {len(P.quad_terms)} quadrature terms"
    print(f"Φ ({kind}) = {P.latex() if args.latex else P.closed_form}")
    if P.quad_terms:
        print(f"quadrature: {order} nodes per dimension, error estimate {err:.2e}")
    print("at " + ", ".join(f"{k}={v:g}" for k, v in values.items()))
    print(f"Φ = {val:.12g}")
    for k, v in grad.items():
        print(f"Γ[{k}] = {v:.12g}")


def _positive(name, value):
    if value is None:
        return None
    if value <= 0:
        raise SpecError(f"{name}: must be > 0, got {value}")
    return value


def cmd_derive(args):
    from .codegen.load import default_path, write_module
    from .derive import derive

    spec = load_spec(args.spec)
    M = _positive("--truncation", args.truncation) or spec.truncation
    if M < 2:
        raise SpecError("--truncation: must be >= 2")
    system = derive(spec, M)
    path = write_module(system.source(), args.out or default_path(spec, system.truncation))
    print(f"wrote {path}: {system.size} moments, {len(system.terms)} terms")


def _theory(spec, args):
    from .derive import derive
    from .integrate import integrate

    M = args.truncation or spec.truncation
    if M < 2:
        raise SpecError("--truncation: must be >= 2")
    if args.init == "sample" and args.dim is None:
        raise SpecError("--init sample: needs --dim D (the dimension of the sampled matrices)")
    eps = 0.0 if args.noise == "off" else spec.epsilon(args.dim)
    system = derive(spec, M)
    return integrate(system, time=args.time, points=args.points, init=args.init, dim=args.dim,
                     seed=args.seed, epsilon=eps)


def cmd_theory(args):
    import warnings

    from .integrate import write_csv

    spec = load_spec(args.spec)
    _positive("--time", args.time)
    _positive("--points", args.points)
    if args.fast:
        from .derive.untied import fast_phase
        if not any(ix.parameterization == "untied" for ix in spec.indices):
            raise SpecError("--fast: the fast phase exists only for untied indices (THEORY §6)")
        result = fast_phase(spec, time=args.time, points=args.points, init=args.init, dim=args.dim, seed=args.seed)
        print("fast-phase fixed point: " + ", ".join(f"m_{k}* = {v:.6g}" for k, v in result.m_star.items()),
              file=sys.stderr)
    elif args.method == "spectral":
        from .spectral import run_spectral_from_args
        result = run_spectral_from_args(spec, args)
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = _theory(spec, args)
        for w in caught:
            print(f"symattn: warning: {w.message}", file=sys.stderr)
    if args.out:
        write_csv(result.table, args.out)
        print(f"wrote {args.out}")
    else:
        import io
        buf = io.StringIO()
        cols = list(result.table)
        buf.write(",".join(cols) + "\n")
        for i in range(len(result.table["time"])):
            buf.write(",".join(f"{float(result.table[c][i]):.10g}" for c in cols) + "\n")
        sys.stdout.write(buf.getvalue())


def _dims(text):
    """--dims D1,D2[,D3...] -> sorted distinct positive ints (SpecError otherwise)."""
    try:
        dims = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"--dims {text}: expected comma-separated whole numbers, e.g. 100,200") from None
    if any(d <= 0 for d in dims):
        raise SpecError(f"--dims {text}: dimensions must be > 0")
    if len(set(dims)) < 2:
        raise SpecError(f"--dims {text}: needs two or more distinct dimensions, e.g. 100,200")
    return sorted(set(dims))


def cmd_compare(args):
    import warnings

    from .compare import compare, compare_dims

    spec = load_spec(args.spec)
    if (args.dim is None) == (args.dims is None):
        raise SpecError("compare: give exactly one of --dim D or --dims D1,D2[,D3]")
    dims = _dims(args.dims) if args.dims is not None else None
    _positive("--dim", args.dim)
    _positive("--seeds", args.seeds)
    _positive("--time", args.time)
    if dims is not None and args.init == "sample":
        raise SpecError("--init sample: needs a single --dim (the --dims theory starts from the d → ∞ state)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if dims is None:
            summary = compare(spec, dim=args.dim, seeds=args.seeds, time=args.time, points=args.points,
                              out=args.out, truncation=args.truncation, init=args.init,
                              noise=args.noise != "off", method=args.method, size=args.size)
        else:
            summary = compare_dims(spec, dims, seeds=args.seeds, time=args.time, points=args.points,
                                   out=args.out, truncation=args.truncation, noise=args.noise != "off",
                                   method=args.method, size=args.size)
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


def _theory_options(q, defaults_points=51):
    q.add_argument("--time", type=float, default=1.0)
    q.add_argument("--points", type=int, default=defaults_points)
    q.add_argument("--truncation", type=int)
    q.add_argument("--init", choices=["free", "sample"], default="free")
    q.add_argument("--noise", choices=["on", "off"], default="on",
                   help="SGD-noise terms of ratio ε = αd/B (off: the paper's ε → 0 limit)")
    q.add_argument("--method", choices=["moments", "spectral"], default="moments",
                   help="moments: truncated hierarchy; spectral: matrix-level flow at size N")


def build_parser():
    p = argparse.ArgumentParser(prog="symattn", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("potential", help="population loss Φ and its gradient")
    q.add_argument("spec")
    q.add_argument("--at", nargs="*", metavar="NAME=VALUE")
    q.add_argument("--json", action="store_true")
    q.add_argument("--tol", type=float, default=1e-8, help="quadrature tolerance")
    q.add_argument("--latex", action="store_true", help="print Φ as LaTeX")
    q.set_defaults(func=cmd_potential)

    q = sub.add_parser("derive", help="derive the limit ODE system and write its generated module")
    q.add_argument("spec")
    q.add_argument("--truncation", type=int)
    q.add_argument("--out")
    q.set_defaults(func=cmd_derive)

    q = sub.add_parser("theory", help="integrate the limit equations")
    q.add_argument("spec")
    _theory_options(q)
    q.add_argument("--dim", type=int)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out")
    q.add_argument("--fast", action="store_true",
                   help="untied: the fast phase of the means on the fast axis nα (column time_fast); "
                        "with --dim D also on nα/d")
    from .spectral import add_spectral_arguments
    add_spectral_arguments(q)
    q.set_defaults(func=cmd_theory)

    q = sub.add_parser("compare", help="theory and simulation side by side")
    q.add_argument("spec")
    q.add_argument("--dim", type=int, help="one dimension d (exclusive with --dims)")
    q.add_argument("--dims", metavar="D1,D2[,D3]",
                   help="several d: simulate at each and extrapolate linearly in 1/d (exclusive with --dim)")
    q.add_argument("--seeds", type=int, default=4)
    _theory_options(q, defaults_points=21)
    q.add_argument("--size", type=int, default=1000, help="spectral: matrix size N")
    q.add_argument("--out", default="compare_out")
    q.set_defaults(func=cmd_compare)

    try:
        from .simulate.cli import add_simulate_command
        add_simulate_command(sub)
    except ImportError:
        pass
    return p


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:      # argparse already printed one usage line; status 2
        return exc.code
    try:
        args.func(args)
    except SpecError as exc:
        print(f"symattn: error: {exc}", file=sys.stderr)
        return 2
    except NumericalFailure as exc:
        print(f"symattn: numerical failure: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
