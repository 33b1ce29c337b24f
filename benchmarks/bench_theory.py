"""Benchmark of the theory side (issue 4): derivation cost, generated-RHS speed, theory vs simulate.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_theory.py [--quick]

1. derivation time and number of moments vs truncation M, for K = 2 (tied student + teacher)
   and K = 3 (tied student + two tied teachers, readout sum), L = 1, h2;
2. right-hand-side evaluation cost of the generated Numba module against a SymPy-lambdified
   RHS built here from the same sparse terms and the closed-form Φ (tied h2, polynomial Φ);
3. wall time of ``theory`` (derive + integrate, M and M−2 for the truncation check) against
   ``simulate`` at d = 200 for the same horizon.
Prints markdown tables.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tomllib
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# a fresh module cache and derivation store: the derivation timings must not be loads of stored systems
os.environ["SYMATTN_CACHE"] = tempfile.mkdtemp(prefix="bench_theory_")

import numpy as np
import sympy as sp

from symattn import load_spec, simulate
from symattn.codegen.systems import compiled, source
from symattn.derivation import derive
from symattn.derivation import state as R
from symattn.integration import integrate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def tied_h2(sigma=0.5, sigma_t=0.5, teachers=1, eps=0.005, B=64):
    raw = tomllib.loads((EXAMPLES / "tied_h2_L1.toml").read_text())
    raw["indices"][0]["init_scale"] = sigma
    raw["indices"][1]["init_scale"] = sigma_t
    if teachers == 2:
        t2 = dict(raw["indices"][1], name="teacher2", width=0.25)
        raw["indices"].append(t2)
        raw["name"] = "tied_h2_L1_two_teachers"
    raw["training"]["noise_ratio"], raw["training"]["batch_size"] = eps, B
    return load_spec(raw)


def timed(f, *a, **kw):
    t0 = time.perf_counter()
    out = f(*a, **kw)
    return out, time.perf_counter() - t0


def bench_derivation(Ms):
    rows = []
    for K, spec in ((2, tied_h2()), (3, tied_h2(teachers=2))):
        derive(spec, 2)                               # warm the potential / imports
        for M in Ms:
            if K == 3 and M > 8:
                continue                              # 867 moments at M = 8; M = 10 is minutes
            system, dt = timed(derive, spec, M)
            src, dt_src = timed(source, system)
            rows.append((K, M, system.size - 1, len(system.terms), dt, dt_src, len(src)))
    print("\n### Derivation vs truncation M (L = 1, h2; K = 2: student+teacher, K = 3: student+2 teachers)\n")
    print("| K | M | moments | sparse terms | derive [s] | emit source [s] | source [kB] |")
    print("|---|---|---|---|---|---|---|")
    for K, M, n, nt, dt, ds, ls in rows:
        print(f"| {K} | {M} | {n} | {nt} | {dt:.3f} | {ds:.3f} | {ls / 1024:.0f} |")
    return rows


def sympy_rhs(system, epsilon):
    """A SymPy-lambdified RHS from the system's sparse terms and closed-form Φ, ν (no quadrature)."""
    P = system.potential
    assert not P.quad_terms, "sympy baseline needs a polynomial Φ"
    n = system.size
    mu = sp.symbols(f"mu0:{n}")
    sub = {s: mu[i] for s, i in zip(P.symbols, system.theta_words)}
    grad = [sp.expand(g.subs(sub)) for g in P.closed_gradient()]
    K = system.spec.K
    # Γ is linear in ∂Φ/∂θ: map unit vectors through the package's split_gradient
    gamma = [[sp.Integer(0)] * K for _ in range(K)]
    for i, g in enumerate(grad):
        e = np.zeros(len(grad))
        e[i] = 1.0
        G = P.split_gradient(e).gamma
        for k in range(K):
            for l in range(K):
                if G[k, l] != 0:
                    gamma[k][l] += sp.nsimplify(G[k, l]) * g
    coef = [sp.Integer(1), sp.Float(system.spec.weight_decay)]
    coef += [gamma[k][l] for k in range(K) for l in range(K)]
    for name in system.coef_names[2 + K * K:]:
        if name in system.nu:                         # ν keyed by coefficient name
            E = system.nu[name]
        else:                                         # older layout: keyed by (k, l)
            E = system.nu[tuple(int(x) for x in name.split("_")[1:])]
        assert not E.quad_terms
        coef.append(epsilon * E.closed_form.subs({s: mu[i] for s, i in zip(E.symbols, system.theta_words)}))
    rows = [sp.Integer(0)] * n
    for t in system.terms:
        rows[t["row"]] += float(t["val"]) * coef[t["key"]] * mu[t["c1"]] * mu[t["c2"]]
    f = sp.lambdify([mu], rows, modules="numpy")
    return lambda t, y: np.asarray(f(y), dtype=float)


def bench_rhs(Ms, repeat=2000):
    rows = []
    spec = tied_h2()
    for M in Ms:
        system = derive(spec, M)
        mod = compiled(system)
        y = R.initial(system, "free")
        params = R.params(system, spec.epsilon(), y)
        f_sym, t_build = timed(sympy_rhs, system, spec.epsilon())
        a, b = np.asarray(mod.rhs(0.0, y, params)), f_sym(0.0, y)
        err = float(np.max(np.abs(a - b)) / (1 + np.max(np.abs(a))))
        def best(f, args, n, batches=5):
            f(*args)
            out = []
            for _ in range(batches):
                t0 = time.perf_counter()
                for _ in range(n):
                    f(*args)
                out.append((time.perf_counter() - t0) / n)
            return min(out)                            # best of batches: robust on a shared machine
        t_nb = best(mod.rhs, (0.0, y, params), repeat)
        t_sp = best(f_sym, (0.0, y), max(repeat // 20, 20))
        rows.append((M, system.size - 1, t_nb, t_sp, t_sp / t_nb, err, t_build))
    print("\n### RHS evaluation: generated Numba vs SymPy lambdify (tied h2, K = 2, ε = 0.005)\n")
    print("| M | moments | Numba [µs] | lambdify [µs] | speed-up | max rel. diff | lambdify build [s] |")
    print("|---|---|---|---|---|---|---|")
    for M, n, a, b, r, e, tb in rows:
        print(f"| {M} | {n} | {a * 1e6:.2f} | {b * 1e6:.1f} | {r:.0f}× | {e:.1e} | {tb:.2f} |")
    return rows


def bench_theory_vs_simulate(M=8, T=0.05, d=200, seeds=1):
    spec = tied_h2()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        def theory():
            return integrate(derive(spec, M), time=T, points=101, dim=d)
        res, t_th = timed(theory)
    sim, t_sim = timed(simulate, spec, dim=d, seeds=seeds, time=T, points=11, progress=False, workers=1)
    steps = int(sim.steps[-1])
    print(f"\n### theory vs simulate (tied h2, σ = σ* = 0.5, ε = 0.005, B = 64, horizon {T})\n")
    print("| run | wall [s] | ratio simulate/theory |")
    print("|---|---|---|")
    print(f"| theory M={M} (+ M={M - 2} check), warm cache | {t_th:.2f} | |")
    print(f"| simulate d={d}, {seeds} seed, {steps} SGD steps | {t_sim:.2f} | {t_sim / t_th:.0f}× |")
    return t_th, t_sim


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller M range")
    a = ap.parse_args(argv)
    Ms = [2, 4, 6, 8] if a.quick else [2, 4, 6, 8, 10]
    bench_derivation(Ms)
    bench_rhs([4, 6] if a.quick else [4, 6, 8])
    bench_theory_vs_simulate()


if __name__ == "__main__":
    main(sys.argv[1:])
