"""The ``simulate`` command (INTERFACE.md): ``simulate SPEC --dim D [--seeds S] [--time T]
[--points N] [--out CSV] [--workers W]``. ``add_simulate_command(subparsers)`` registers it."""
from __future__ import annotations

import argparse
import sys

from ..spec import SpecError, load_spec


def cmd_simulate(args) -> None:
    """Handler: run, then write the CSV to --out (or stdout). SpecError / NumericalFailure propagate."""
    from .run import simulate

    if args.dim is None:
        raise SpecError("--dim: required (the embedding dimension d, a whole number >= 1)")
    spec = load_spec(args.spec)
    res = simulate(spec, dim=args.dim, seeds=args.seeds, time=args.time, points=args.points,
                   seed0=args.seed0, workers=args.workers, progress=not args.quiet)
    if args.out:
        try:
            res.to_csv(args.out)
        except OSError as exc:
            raise SpecError(f"--out {args.out}: cannot write ({exc.strerror or exc})") from None
        print(f"wrote {args.out} ({len(res.table['time'])} rows, {len(res.seeds)} seeds, d = {res.dim})",
              file=sys.stderr)
    else:
        cols = res.columns
        print(",".join(cols))
        for i in range(len(res.table["time"])):
            print(",".join(repr(float(res.table[c][i])) for c in cols))


def add_simulate_command(subparsers) -> argparse.ArgumentParser:
    """Register ``simulate`` on an argparse sub-parser collection; returns the sub-parser."""
    p = subparsers.add_parser("simulate", help="online SGD at finite d, averaged over seeds")
    p.add_argument("spec", help="model specification (TOML)")
    p.add_argument("--dim", type=int, default=None, metavar="D", help="embedding dimension d")
    p.add_argument("--seeds", type=int, default=1, metavar="S", help="number of seeds (default 1)")
    p.add_argument("--seed0", type=int, default=0, metavar="S0", help="first seed (default 0)")
    p.add_argument("--time", type=float, default=1.0, metavar="T", help="final package time nα/d (default 1)")
    p.add_argument("--points", type=int, default=21, metavar="N", help="measurement times on [0, T] (default 21)")
    p.add_argument("--out", default=None, metavar="CSV", help="output file (default: stdout)")
    p.add_argument("--workers", type=int, default=None, metavar="W",
                   help="parallel processes (default min(S, cores))")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_simulate)
    return p
