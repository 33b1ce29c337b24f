"""Closure diagnostics of the shipped examples: for M = 2, 3, … the number of moments and sparse terms of the
derived hierarchy, its derivation time (SymPy and the word algebra, a fresh store of derived systems), the time
to compile its generated module (a fresh Numba cache), and the cost of the equations as SymPy (``equations()``,
``equations(closed=True)``, ``latex()``) and of ``recovery``. Each (example, M) runs in its own process with its own
empty cache folder; M grows until one derivation takes more than ``--budget`` seconds (60 by default), the
system reaches MAX_MOMENTS, or M = --max. Writes docs/results/closure_and_equations.md.

    python benchmarks/closure_diagnostics.py [--budget 60] [--max 16] [--examples tied_h2_L1 ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ONE = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
name, M = sys.argv[1], int(sys.argv[2])
from symattn.derivation import derive
from symattn.codegen.systems import compiled, source
t0 = time.perf_counter(); s = derive(name, M); t1 = time.perf_counter()
src = source(s); t2 = time.perf_counter()
compiled(s); t3 = time.perf_counter()
s.equations(); t4 = time.perf_counter()
s.equations(closed=True); t5 = time.perf_counter()
s.latex(); t6 = time.perf_counter()
print(json.dumps({"moments": s.size, "terms": len(s.terms), "truncation": s.truncation, "derive": t1 - t0,
                  "print": t2 - t1, "compile": t3 - t2, "equations": t4 - t3, "closed": t5 - t4, "latex": t6 - t5}))
"""

REC = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from symattn.derivation.recovery import recovery
t0 = time.perf_counter(); r = recovery(sys.argv[1]); t1 = time.perf_counter()
print(json.dumps({"recovery": t1 - t0, "signal": {k: v.signal for k, v in r.items()}}))
"""


def run(code, *args, timeout):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, SYMATTN_CACHE=cache, NUMBA_CACHE_DIR=cache, OPENBLAS_NUM_THREADS="1")
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                               timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"timeout": timeout}
        out = p.stdout.strip().splitlines()
        if p.returncode != 0 or not out:
            return {"error": (p.stderr.strip().splitlines() or ["?"])[-1][:160]}
        res = json.loads(out[-1])
        res["process"] = time.perf_counter() - t0
        return res


def main():
    from symattn.examples import example_names
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=60.0)
    ap.add_argument("--max", type=int, default=16)
    ap.add_argument("--examples", nargs="+", default=[n for n in example_names() if not n.startswith("residual")])
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "closure_and_equations.md"))
    args = ap.parse_args()
    rows, recs = [], []
    for name in args.examples:
        rec = run(REC, name, timeout=600)
        recs.append((name, rec))
        print(name, "recovery", rec, flush=True)
        last = None
        for M in range(2, args.max + 1):
            res = run(ONE, name, M, timeout=10 * args.budget)
            print(name, M, res, flush=True)
            if "moments" not in res:
                rows.append((name, M, res))
                break
            if last is not None and res["moments"] == last:        # a closed system: M = 2 is all there is
                break
            rows.append((name, M, res))
            last = res["moments"]
            if res["derive"] > args.budget:
                break
    load = os.getloadavg()[0]
    lines = ["# Closure diagnostics and the cost of the equations", "",
             f"Produced by `benchmarks/closure_diagnostics.py` (each row a fresh process with an empty cache; 2-core "
             f"machine, one BLAS thread, load {load:.1f} at the end). M grows until a derivation takes more than "
             f"{args.budget:g} s; a closed system (direct, general) stops at M = 2. *derive*: the hierarchy (word "
             "algebra, Φ's Wick polynomial or quadrature calibration, the noise constants ν); *print*: the generated "
             "module's source; *compile*: its Numba compilation; *equations*: `System.equations()` (SymPy, coefficient "
             "symbols), *closed*: `equations(closed=True)`, *latex*: `System.latex()`.", "",
             "| example | M | moments | terms | derive s | print s | compile s | equations s | closed s | latex s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, M, r in rows:
        if "moments" in r:
            lines.append(f"| {name} | {r['truncation']} | {r['moments']} | {r['terms']} | {r['derive']:.2f} | "
                         f"{r['print']:.2f} | {r['compile']:.2f} | {r['equations']:.2f} | {r['closed']:.2f} | "
                         f"{r['latex']:.2f} |")
        else:
            lines.append(f"| {name} | {M} | — | — | {r} | | | | | |")
    lines += ["", "## `symattn.recovery` on the shipped examples", "",
              "| example | whole process s | recovery s | first-order signal |", "|---|---|---|---|"]
    for name, r in recs:
        if "recovery" in r:
            lines.append(f"| {name} | {r['process']:.1f} | {r['recovery']:.2f} | "
                         f"{', '.join(f'{k}: {v}' for k, v in r['signal'].items())} |")
        else:
            lines.append(f"| {name} | {r} | | |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
