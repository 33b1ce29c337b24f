"""Theory speed (issue 13): the figures of its "done when" list, measured in one run.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_speed.py [--quick]

1. P1: warm in-process ``integrate`` of the README example (tied softmax L = 2, M = 6 with the M = 4
   truncation check, τ ≤ 0.25) against ``simulate`` at d = 200, one seed, the same horizon;
2. one call of the generated M = 6 right-hand side (compiled quadrature) against the pure-Python
   reference right-hand side of the same system (the route the generated module took before);
3. the cold-process CLI ``theory --method moments`` with a warm cache, then with another ``noise_ratio``
   (new modules in the cache: must be none) and with another β (none either: its quadrature orders
   are calibrated, nothing compiles), against ``python -c "import symattn"`` and against importing
   what ``theory`` needs (SciPy's integrators, SymPy, Numba);
4. untied h2 (``examples/untied_h2_L1.toml``), M = 4, τ ≤ 0.1: warm in-process ``integrate``.
Timings are the best of several repeats (the development machine is shared); ratios come from the
same run. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from symattn.derivation import state as R

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "examples" / "tied_softmax_L2.toml"
UNTIED = ROOT / "examples" / "untied_h2_L1.toml"


def best(f, repeat=5):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def cli(args, env):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "symattn", *args], check=True, env=env, capture_output=True)
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the simulation (no P1 ratio)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    from symattn import load_spec, simulate
    from symattn.codegen.systems import compiled
    from symattn.derivation import derive
    from symattn.integration import integrate

    rows = []
    system = derive(load_spec(README), 6)
    integrate(system, 0.25)                                       # compile / load once
    t_int = best(lambda: integrate(system, 0.25))
    rows.append(("warm `integrate`, README example, M = 6 + M = 4 check, τ ≤ 0.25", f"{t_int * 1e3:.0f} ms"))
    if not args.quick:
        t_sim = best(lambda: simulate(str(README), dim=200, seeds=1, time=0.25, points=51), repeat=1)
        rows.append(("`simulate`, d = 200, one seed, τ ≤ 0.25", f"{t_sim:.1f} s"))
        rows.append(("P1 ratio simulate / integrate (target ≥ 300)", f"{t_sim / t_int:.0f}×"))

    mod = compiled(system)
    mu = R.initial(system, "free")
    params = R.params(system, 0.01, mu)
    mod.rhs(0.0, mu, params)
    n = 200
    t_gen = best(lambda: [mod.rhs(0.0, mu, params) for _ in range(n)], repeat=30) / n   # µs: the shared machine's noise
    t_ref = best(lambda: [R.rhs(system, 0.0, mu, params) for _ in range(10)], repeat=3) / 10
    err = np.max(np.abs(mod.rhs(0.0, mu, params) - R.rhs(system, 0.0, mu, params)))
    rows.append(("generated RHS, tied softmax L = 2, M = 6 (target ≤ 50 µs)", f"{t_gen * 1e6:.0f} µs"))
    rows.append(("pure-Python reference RHS, same state", f"{t_ref * 1e6:.0f} µs ({t_ref / t_gen:.0f}×; max |Δ| {err:.1e})"))

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SYMATTN_CACHE": str(Path(tmp) / "cache")}
        spec2 = Path(tmp) / "other_eps.toml"
        spec2.write_text(re.sub(r"noise_ratio = [0-9.e-]+", "noise_ratio = 0.0371", README.read_text()))
        base = ["theory", "--method", "moments", "--time", "0.25", "--quiet"]
        cli([*base, str(README), "--out", str(Path(tmp) / "0.csv")], env)             # fills the cache
        t_warm = min(cli([*base, str(README), "--out", str(Path(tmp) / f"{i}.csv")], env) for i in range(3))
        before = sorted(p.name for p in (Path(tmp) / "cache").rglob("*.py"))
        t_eps = min(cli([*base, str(spec), "--out", str(Path(tmp) / "eps.csv")], env)
                    for spec in (spec2, spec_eps(tmp, 0.0222), spec_eps(tmp, 0.0555)))
        after = sorted(p.name for p in (Path(tmp) / "cache").rglob("*.py"))
        spec3 = Path(tmp) / "other_beta.toml"
        spec3.write_text(re.sub(r"beta = [0-9.e-]+", "beta = 1.7", README.read_text()))
        t_beta = cli([*base, str(spec3), "--out", str(Path(tmp) / "beta.csv")], env)
        after_beta = sorted(p.name for p in (Path(tmp) / "cache").rglob("*.py"))
        t_imp = min(cli_import(env) for _ in range(5))
        t_needs = min(cli_import(env, "import symattn, scipy.integrate, sympy, numba") for _ in range(5))
        rows.append(("`python -c 'import symattn'` (target ≤ 0.5 s)", f"{t_imp:.2f} s"))
        rows.append(("`python -c 'import symattn, scipy.integrate, sympy, numba'` (what `theory` imports)",
                     f"{t_needs:.2f} s"))
        rows.append(("cold-process CLI `theory --method moments`, warm cache (target ≤ 3 s)", f"{t_warm:.2f} s"))
        rows.append(("same with another noise_ratio (target ≤ import + 1 s; best of 3 values)",
                     f"{t_eps:.2f} s ({t_eps - t_needs:.2f} s beyond its imports), "
                     f"{len(after) - len(before)} new modules"))
        rows.append(("same with another β (1.7; its quadrature orders calibrated anew)",
                     f"{t_beta:.2f} s, {len(after_beta) - len(after)} new module or kernel files"))

    untied = derive(load_spec(UNTIED), 4)
    integrate(untied, 0.1)
    rows.append(("untied h2, M = 4, τ ≤ 0.1, warm `integrate` (target ≤ 2 s)",
                 f"{best(lambda: integrate(untied, 0.1), repeat=3):.2f} s"))

    print("| measurement | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


def cli_import(env, code="import symattn"):
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    return time.perf_counter() - t0


def spec_eps(tmp, eps):
    path = Path(tmp) / f"eps_{eps}.toml"
    path.write_text(re.sub(r"noise_ratio = [0-9.e-]+", f"noise_ratio = {eps}", README.read_text()))
    return path


if __name__ == "__main__":
    main()
