"""The weak-recovery analysis (``symattn.recovery``) of the paper's Fig. 2 and Fig. 3 models, as a Markdown table.

Fig. 2 (L = 1, teacher tied κ* = 0.5, σ* = (2/3)^{1/4}: unit pre-activation variance): the tied student at the
paper's reading (κ = 1, σ = 2^{−½}) and the direct student from App. E's non-symmetric i.i.d. start (``general``,
σ = 1), for h1, h2, h3. Fig. 3: untied student and teacher at the standard initialisation (κ = σ = 1), h1, h2, h3.
For each: the mechanism, whether there is first-order signal, the condition at the spec's values, the velocity of
the overlap at τ = 0, the growth rate λ of a closed system's overlap at the uninformative state, and the wall time
of the analysis (derivation included, a warm store of derived systems aside).

    python benchmarks/recovery_table.py
"""
from __future__ import annotations

import time

import symattn

TEACHER2 = {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5,
            "init_scale": (2 / 3) ** 0.25}


def fig2(kind, act):
    st = ({"name": "student", "role": "student", "parameterization": "tied", "width": 1.0, "init_scale": 2 ** -0.5}
          if kind == "tied" else {"name": "student", "role": "student", "parameterization": "general", "init_scale": 1.0})
    return {"name": f"fig2_{kind}_{act}", "model": {"tokens": 1, "activation": act}, "indices": [st, TEACHER2],
            "training": {"batch_size": 512, "noise_ratio": 0.0039}}


def fig3(act):
    ix = lambda n, r: {"name": n, "role": r, "parameterization": "untied", "width": 1.0}     # noqa: E731
    return {"name": f"fig3_untied_{act}", "model": {"tokens": 1, "activation": act},
            "indices": [ix("student", "student"), ix("teacher", "teacher")],
            "training": {"batch_size": 4096, "noise_ratio": 0.002}}


def main():
    rows = [("Fig. 2, tied", a, fig2("tied", a)) for a in ("linear", "h2", "h3")]
    rows += [("Fig. 2, direct (App. E start)", a, fig2("direct", a)) for a in ("linear", "h2", "h3")]
    rows += [("Fig. 3, untied", a, fig3(a)) for a in ("h1", "h2", "h3")]
    print("| model | activation | mechanism | first-order signal | condition at the spec | d(overlap)/dτ at τ = 0 "
          "| λ (closed systems) | s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, act, spec in rows:
        t0 = time.perf_counter()
        r = symattn.recovery(spec)["student"]
        wall = time.perf_counter() - t0
        val = r.value if isinstance(r.value, tuple) else (r.value,)
        lam = "—" if r.instability is None else f"{r.instability:.3g}"
        print(f"| {label} | {act} | {r.mechanism} | {'yes' if r.signal else 'no'} | "
              f"{', '.join(f'{v:.4g}' for v in val)} | {r.velocity:.4g} | {lam} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
