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
    print(f"Φ ({kind}) = {P.closed_form}")
    if P.quad_terms:
        print(f"quadrature: {order} nodes per dimension, error estimate {err:.2e}")
    print("at " + ", ".join(f"{k}={v:g}" for k, v in values.items()))
    print(f"Φ = {val:.12g}")
    for k, v in grad.items():
        print(f"Γ[{k}] = {v:.12g}")


def build_parser():
    p = argparse.ArgumentParser(prog="symattn", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("potential", help="population loss Φ and its gradient")
    q.add_argument("spec")
    q.add_argument("--at", nargs="*", metavar="NAME=VALUE")
    q.add_argument("--json", action="store_true")
    q.add_argument("--tol", type=float, default=1e-8, help="quadrature tolerance")
    q.set_defaults(func=cmd_potential)
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
