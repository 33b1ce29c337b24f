"""A mutation check of the core mathematics: realistic one-line bugs, applied one at a time, each against the
default test suite (``python -m pytest -q -x -n 2``: a mutant is *killed* when a test fails). Not part of CI
(each surviving mutant costs a whole suite run); run it after a change to the tests or the engine:

    python benchmarks/mutation_check.py [--only N ...] [--tests FILE ...]

``--tests``: run each mutant against these test files first (a failure there is a failure of the default suite,
which contains them) and only the survivors against the whole default suite — the same verdicts, in a fraction of
the time.

Prints one line per mutant (killed / SURVIVED, seconds) and the kill ratio; restores every file. A mutant whose
text no longer matches the source is reported as stale, not run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P = "symattn/"

MUTANTS = [
    # (file, original text, mutated text, what the bug is)
    (P + "kinds/tied.py", "acc -= (2.0 if dense else 1.0) * ctx.wd * Mk.value",
     "acc -= (1.0 if dense else 1.0) * ctx.wd * Mk.value", "dense tied weight decay halved (matrix level)"),
    (P + "kinds/untied.py", "return (-beta * Vp - 2.0 * XV - ctx.wd * U, -beta * Up - 2.0 * XtU - ctx.wd * V)",
     "return (-beta * Vp - 2.0 * XV - 2 * ctx.wd * U, -beta * Up - 2.0 * XtU - 2 * ctx.wd * V)",
     "untied weight decay doubled (matrix level)"),
    (P + "simulation/sgd.py", "* np.sqrt(self.noise) if self.noise > 0 else None",
     "* self.noise if self.noise > 0 else None", "label noise drawn with standard deviation Δ instead of √Δ"),
    (P + "derivation/noise.py", "c = C[j][i2] * C[j2][i]          # tr(e^k C e^l C)", "c = 1.25 * C[j][i2] * C[j2][i]",
     "ν off by 25 %"),
    (P + "derivation/potential.py", "w.append((1.0 if k == l else 0.5) * (0.5 if so == sq else 1.0))",
     "w.append((1.0 if k == l else 1.0) * (0.5 if so == sq else 1.0))", "Γ's off-diagonal entries not halved"),
    (P + "kinds/tied.py", "items += [(G, metric + r + (S,), -4.0 * w), (G, (S,) + r + metric, -4.0 * w)]",
     "items += [(G, metric + r + (S,), -2.0 * w), (G, (S,) + r + metric, -4.0 * w)]", "tied letter flow rate"),
    (P + "kinds/direct.py", "items = [(cidx[f\"Gamma_{k}_{l}\"], metric + r + metric, -2.0 * w)",
     "items = [(cidx[f\"Gamma_{k}_{l}\"], metric + r + metric, -4.0 * w)", "direct letter flow rate"),
    (P + "codegen/systems.py", 'f"    coef[{j}] = -psi / (mu[{a}] + mu[{b}])"', 'f"    coef[{j}] = psi / (mu[{a}] + mu[{b}])"',
     "generated untied mean force sign"),
    (P + "derivation/state.py", "coef[j] = -psi / (y[a] + y[b])", "coef[j] = psi / (y[a] + y[b])", "reference untied mean force sign"),
    (P + "kinds/general.py", "fS += [(o, L(l, \"S\"), -2.0), (p, L(l, \"T\"), -2.0)]",
     "fS += [(o, L(l, \"S\"), -2.0), (p, L(l, \"S\"), -2.0)]", "general flow: GΨ term without the transpose"),
    (P + "kinds/tied.py", "return [(4.0, \"dd\", ((letter[0], \"S\"),), metric + metric)]",
     "return [(2.0, \"dd\", ((letter[0], \"S\"),), metric + metric)]", "tied Itô drift halved"),
    (P + "kinds/tied.py", "return [(metric, \"d\", (S,), -2.0), ((S,), \"d\", metric, -2.0)]",
     "return [(metric, \"d\", (S,), -1.0), ((S,), \"d\", metric, -2.0)]", "tied fluctuation form"),
    (P + "kinds/direct.py", "return [(metric, \"d\", metric, -1.0)]", "return [(metric, \"d\", metric, -2.0)]",
     "direct fluctuation form doubled"),
    (P + "kinds/tied.py", "return mat.Factor(M.value - 2.0 * (left @ M.value))",
     "return mat.Factor(M.value - 1.0 * (left @ M.value))", "tied matrix-level noise map halved"),
    (P + "symbolic/gaussian.py", "return C[i][a] * C[j][b] * self.op.omega(k, l) + C[i][b] * C[j][a] * self.op.psi(k, l)",
     "return C[i][a] * C[j][b] * self.op.omega(k, l)", "Gaussian covariance without its Ψ term"),
    (P + "kinds/tied.py", "return {\"W\": rng.standard_normal((dim, factor_width(ix, dim))) * (ix.sigma / np.sqrt(dim))}",
     "return {\"W\": rng.standard_normal((dim, factor_width(ix, dim))) * (ix.sigma / dim ** 0.4)}",
     "tied SGD initialisation scale"),
    (P + "kinds/tied.py", "        return 2 * c / sq", "        return c / sq", "tied SGD trace-term rate halved"),
    (P + "kinds/tied.py", "Z[..., sl] = (ek + transpose(ek)) @ P[..., sl]", "Z[..., sl] = ek @ P[..., sl]",
     "tied SGD backward pass not symmetrised"),
    (P + "integration.py", "        return s * mod.rhs(t, y, q)", "        return mod.rhs(t, y, q)",
     "hierarchy ignores the schedule's factor"),
    (P + "derivation/state.py", "return {k: y[system.index(m + ((k, \"A\"),))] + y[system.index(m + ((k, \"B\"),))] for k in system.mean_trainable}",
     "return {k: y[system.index(m + ((k, \"A\"),))] for k in system.mean_trainable}", "untied fast rate D = t^A only"),
    (P + "derivation/noise.py", "add(row, col(Ra + X1 + Lb), col(Rb + X2 + La), nu_name(spec, k, l, ta + tb), ca * cb)",
     "add(row, col(Ra + X1 + Lb), col(Rb + X2 + La), nu_name(spec, k, l, ta + tb), ca)", "pair contraction coefficient"),
    (P + "kinds/base.py", "return {name: root[:, None] * state[name] for name in self.factors}",
     "return {name: state[name] for name in self.factors}", "factors not whitened by Σ"),
    (P + "derivation/untied.py", "parts += [(\"GO\", l, index(m + (Ml, B)), index((A, Ml) + m)),",
     "parts += [(\"GO\", l, index(m + (Ml, B)), index((A, Ml) + m)), (\"GO\", l, index(m + (Ml, B)), index((A, Ml) + m)),",
     "untied mean force ψ counts a term twice"),
    (P + "kinds/untied.py", "fM = [(b, right(A), -1.0), (b, left(B), -1.0), (g, (M,), -2.0)]",
     "fM = [(b, right(A), -1.0), (b, left(B), -1.0), (g, (M,), -1.0)]", "untied letter-flow weight decay"),
    (P + "symbolic/loss.py", "BETA = sp.Symbol(\"beta\", positive=True)", "BETA = 2 * sp.Symbol(\"beta\", positive=True)",
     "softmax inverse temperature doubled in the theory"),
    (P + "kinds/dense.py", "            S -= a * gs\n", "            S -= 2 * a * gs\n", "direct SGD step doubled"),
]


def _restore_on_signal(f, src):
    """SIGTERM/SIGINT while a mutant is applied: restore the file first (a killed run must not leave a bug)."""
    import signal

    def handler(signum, frame):
        f.write_text(src)
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, handler)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", type=int, nargs="*", help="mutant numbers (1-based) to run")
    ap.add_argument("--tests", nargs="*", default=[], help="test files to try first (module docstring)")
    args = ap.parse_args()
    chosen = [(i, m) for i, m in enumerate(MUTANTS, 1) if not args.only or i in args.only]
    killed = survived = stale = 0
    for i, (path, old, new, what) in chosen:
        f = ROOT / path
        src = f.read_text()
        if src.count(old) != 1:
            print(f"{i:2d} stale ({what}): its text is not (once) in {path}", flush=True)
            stale += 1
            continue
        _restore_on_signal(f, src)
        f.write_text(src.replace(old, new))
        t0 = time.time()
        try:
            for subset in ([args.tests] if args.tests else []) + [[]]:
                run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-n", "2", "-p", "no:cacheprovider",
                                      *subset], cwd=ROOT, capture_output=True, text=True)
                if run.returncode != 0:
                    break
        finally:
            f.write_text(src)
        ok = run.returncode != 0
        killed += ok
        survived += not ok
        first = next((ln for ln in run.stdout.splitlines() if ln.startswith("FAILED")), "")
        print(f"{i:2d} {'killed  ' if ok else 'SURVIVED'} {time.time() - t0:6.0f} s  {what}  {first[:110]}", flush=True)
    n = killed + survived
    print(f"kill ratio: {killed}/{n}" + (f" ({stale} stale)" if stale else ""))


if __name__ == "__main__":
    main()
