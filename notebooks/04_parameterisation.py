# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---


# %% [markdown]
# # 04 — Direct S vs tied S = WWᵀ from uninformative starts (paper Fig. 2), and the tied-h3 threshold
#
# L = 1, activations h1 (linear), h2, h3; teacher tied (κ* = 0.5, σ* = (2/3)^{1/4}, so that 2q₂₂ = Var G* = 1 — see
# notebook 02 for why h3 needs this). Students at σ = 1 — this notebook's choice: direct S from a GOE start (t₁ = 0,
# q₁₂ = 0), tied S = WWᵀ with κ = 1 (t₁ = 1, p₁₂ = 0). The paper's own reading (docs/theory.md §8) is different: the
# tied student at unit pre-activation variance, σ = 2^{−½} (the Remark after Cor. 3: q₁₁(0) = q₂₂), and the direct
# one from App. E's non-symmetric i.i.d. N(0, 1/d) start (Var G(0) = 1); `benchmarks/paper_fig2_d400.py` runs that
# reading at the paper's d = 400, where σ = 1 is the stability boundary of the tied h3 panel. B = 64 and ε = αd/B = 1e-4: from σ = 1
# tied-h3 SGD diverges in its first steps unless ε is below a d-dependent critical value (the stability map of the
# README: ≈ 1e-4 at d = 40, ≈ 2e-4 at d = 80), so this notebook runs at d = 80 with ε = 1e-4; the paper's own
# d = 400, ε = 0.0039 setting is `benchmarks/paper_fig2_d400.py`.
#
# Theory: the closed direct system (docs/theory.md §4, with its O(ε) terms) and, for tied, the moment hierarchy
# M = 6 inside its validity window plus the matrix-level limit (ε = 0) over the whole run. The learning signal is
# the unnormalised structural overlap `p₁₂ = q₁₂ − t₁t₂`; for direct S we plot the seed average of |p₁₂| (seeds
# escape toward +S* or −S*).
#
# The second part scans the tied student's init scale σ with the matrix-level limit: tied h3 has a threshold σ_c
# below which the student shrinks to zero (and the symmetry-breaking term t₁ with it) instead of escaping.

# %%
import os
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")    # shared 2-core machine: one BLAS thread
import matplotlib.pyplot as plt
import numpy as np

import symattn
from symattn.derivation import derive
from symattn.integration import integrate
from symattn.notebook import QUICK, Notebook, reading

# %matplotlib inline
nb = Notebook("04_parameterisation")

# %%
D = 30 if QUICK else 80
SEEDS = 2
T = 0.03 if QUICK else 0.3
PTS = 6 if QUICK else 16
SIGMA, EPS, B = 1.0, 1e-4, 64
teacher = {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5, "init_scale": (2 / 3) ** 0.25}


def make(act, kind, sigma=SIGMA):
    st = {"name": "student", "role": "student", "parameterization": kind, "init_scale": sigma}
    if kind == "tied":
        st["width"] = 1.0
    return {"name": f"fig2_{kind}_{act}", "model": {"tokens": 1, "activation": act}, "indices": [st, teacher],
            "training": {"batch_size": B, "noise_ratio": EPS}, "theory": {"truncation": 6 if kind == "tied" else 2}}


ACTS, KINDS = ["linear", "h2", "h3"], ["direct", "tied"]
theory, spectral, sims, diverged = {}, {}, {}, {}
from symattn.initial import initial_order_parameters

nb.states("Var G* = 2q₂₂ of the teacher", 2 * initial_order_parameters(make("h3", "tied"))["q_teacher_teacher"], "1",
          1e-12)
for act in ACTS:
    for kind in KINDS:
        s = make(act, kind)
        t0 = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theory[act, kind] = integrate(derive(s), time=T, points=101, dim=D)
        if kind == "tied":
            spectral[act] = symattn.theory(s, "spectral", time=T, points=61, size=150 if QUICK else 400, rotations=1,
                                   error_estimate=False, noise=False)
        t1 = time.time()
        diverged[act, kind] = []
        sims[act, kind] = []
        for seed in range(SEEDS):       # seed by seed: a diverging seed is recorded with its time, not dropped silently
            try:
                sims[act, kind].append(symattn.simulate(s, dim=D, seeds=1, seed0=seed, time=T, points=PTS,
                                                        progress=False, test_samples=0, potential=False))
            except symattn.NumericalFailure as exc:
                diverged[act, kind].append(exc.time)
        steps = sims[act, kind][0].info["steps_total"] if sims[act, kind] else 0
        print(f"{act:6s} {kind:6s}: theory [{t1 - t0:.1f} s]; SGD d={D}, {SEEDS} seeds, {steps} steps/seed, "
              f"diverging seeds: {len(diverged[act, kind])} {diverged[act, kind]} [{time.time() - t1:.1f} s]")

# %%
dev, final = {}, {}
print("max |theory − SGD| of p_student_teacher (direct: seed-mean |p12| vs the limit's |p12|):")
for act in ACTS:
    for kind in KINDS:
        runs, r = sims[act, kind], theory[act, kind]
        ts = runs[0].table["time"]
        p_sim = np.mean([np.abs(x.table["p_student_teacher"]) if kind == "direct" else x.table["p_student_teacher"]
                         for x in runs], axis=0)
        until = r.valid_until or r.diverged_at or T
        m = ts <= until + 1e-12
        p_th = np.interp(ts, r.table["time"], r.table["p_student_teacher"])
        p_th = np.abs(p_th) if kind == "direct" else p_th
        dev[act, kind, "hierarchy"] = (float(np.max(np.abs(p_th - p_sim)[m])), until)
        msg = f"{act:6s} {kind:6s}: hierarchy (τ ≤ {until:.3g}): {dev[act, kind, 'hierarchy'][0]:.4f}"
        if kind == "tied":
            sp = np.interp(ts, spectral[act].table["time"], spectral[act].table["p_student_teacher"])
            dev[act, kind, "spectral"] = float(np.max(np.abs(sp - p_sim)))
            msg += f"; matrix-level ε=0 (whole run): {dev[act, kind, 'spectral']:.4f}"
        final[act, kind] = (p_sim[-1], [float(x.table["p_student_teacher"][-1]) for x in runs])
        print(msg + f"; final SGD p12 = {p_sim[-1]:.3f}")

# %%
fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=False)
for ax, act in zip(axes, ACTS):
    for kind, col in [("direct", "C3"), ("tied", "C0")]:
        r = theory[act, kind]
        for x in sims[act, kind]:
            y = x.table["p_student_teacher"]
            ax.plot(x.table["time"], np.abs(y) if kind == "direct" else y, "o", color=col, ms=3, alpha=0.5)
        lim = r.valid_until or r.diverged_at or T          # the truncated hierarchy only inside its window
        keep = r.table["time"] <= lim + 1e-12
        y = r.table["p_student_teacher"][keep]
        ax.plot(r.table["time"][keep], np.abs(y) if kind == "direct" else y, "-", color=col, lw=2,
                label=f"{kind}: " + ("closed system" if kind == "direct" else "hierarchy M=6 (inside its window)"))
        if kind == "tied":
            ax.plot(spectral[act].table["time"], spectral[act].table["p_student_teacher"], "--", color="C0", lw=1,
                    label="tied: matrix-level limit (ε=0)")
    ax.set_title(f"{act}: p₁₂ = q₁₂ − t₁t₂ (direct: |p₁₂|)"); ax.set_xlabel("time τ = nα/d"); ax.set_ylabel("p₁₂")
axes[0].legend(fontsize=7)
fig.suptitle(f"direct (red) vs tied (blue) from σ = {SIGMA}, SGD d = {D}, ε = {EPS}, B = {B} (dots: seeds)")
fig.tight_layout(); nb.savefig(fig); plt.show()

# %% [markdown]
# ## The tied-h3 threshold in the student's init scale
#
# Matrix-level limit (ε = 0) at two sizes N. Below σ_c the student's scale q₁₁ collapses to 0 and p₁₂ never
# grows; above it p₁₂ escapes to ≈ 1/3. σ_c is located by bisection on "q₁₁(τ = T_C) > 0.1" (a collapsed
# student has q₁₁ ≈ 1e-3 by then, an escaped one ≈ 0.5), at each N.

# %%
SIZES = [60, 120] if QUICK else [200, 400]
SIG_SCAN = [0.5, 0.7, 1.0] if QUICK else [0.50, 0.52, 0.54, 0.56, 0.58, 0.60, 0.65, 0.70, 0.80, 1.0]
T_SCAN, T_C = 1.0, 3.0
scan = {}
t0 = time.time()
for n in SIZES:
    for sg in SIG_SCAN:
        scan[n, sg] = symattn.theory(make("h3", "tied", sg), "spectral", time=T_SCAN, points=21, size=n, rotations=1,
                             error_estimate=False, noise=False).table
print(f"scan: {len(SIG_SCAN)} σ × N = {SIZES} [{time.time() - t0:.1f} s]")
for sg in SIG_SCAN:
    print(f"σ = {sg:.2f}: p12(τ={T_SCAN:g}) = " + ", ".join(f"{scan[n, sg]['p_student_teacher'][-1]:.4f} (N={n})" for n in SIZES)
          + f"; q11 = {scan[SIZES[-1], sg]['q_student_student'][-1]:.4f}")


def escapes(sg, n):
    tab = symattn.theory(make("h3", "tied", sg), "spectral", time=T_C, points=7, size=n, rotations=1, error_estimate=False,
                 noise=False).table
    return tab["q_student_student"][-1] > 0.1


TOL = 0.02 if QUICK else 0.0025
bracket = {}
t0 = time.time()
for n in SIZES:
    lo, hi = 0.5, 0.7                      # lo collapses, hi escapes (checked, not assumed)
    assert not escapes(lo, n) and escapes(hi, n), "the bracket does not hold the threshold"
    while hi - lo > TOL:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if escapes(mid, n) else (mid, hi)
    bracket[n] = (lo, hi)
    print(f"N = {n}: σ_c ∈ ({lo:.4f}, {hi:.4f})")
print(f"bisection [{time.time() - t0:.1f} s]")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for n, mk in zip(SIZES, ["o-", "s--"]):
    axes[0].plot(SIG_SCAN, [scan[n, sg]["p_student_teacher"][-1] for sg in SIG_SCAN], mk, label=f"N = {n}")
    axes[1].plot(SIG_SCAN, [scan[n, sg]["q_student_student"][-1] for sg in SIG_SCAN], mk, label=f"N = {n}")
for ax, lab in zip(axes, ["p₁₂", "q₁₁"]):
    ax.axvspan(*bracket[SIZES[-1]], color="0.8", label=f"σ_c (N = {SIZES[-1]})")
    ax.set_xlabel("student init scale σ"); ax.set_ylabel(f"{lab}(τ = {T_SCAN:g})"); ax.legend(fontsize=8)
axes[0].set_title("tied h3: matrix-level limit, p₁₂ at τ = 1"); axes[1].set_title("student scale q₁₁ at τ = 1")
fig.tight_layout(); nb.savefig(fig); plt.show()

# %%
lo, hi = bracket[SIZES[-1]]
h3t = final["h3", "tied"]
reading(f"""**Reading (this run: d = {D}, {SEEDS} seeds, ε = {EPS}, B = {B}, σ = {SIGMA}).**

* linear: direct and tied both learn; max |Δp₁₂| theory vs SGD = {dev['linear', 'direct', 'hierarchy'][0]:.4f} (direct),
  {dev['linear', 'tied', 'spectral']:.4f} (tied, matrix-level limit over the whole run).
* h2: the direct limit flow stays at p₁₂ = 0 (the uninformative manifold is invariant, notebook 02); its SGD seeds
  reach |p₁₂| = {final['h2', 'direct'][0]:.3f} on average by τ = {T} through finite-d fluctuations, a finite-d
  effect absent from the limit (notebook 06 measures how it slows with d). The tied flow escapes: SGD p₁₂ =
  {final['h2', 'tied'][0]:.3f} at τ = {T}; max |Δp₁₂| of the matrix-level limit over the whole run: {dev['h2', 'tied', 'spectral']:.4f}.
* h3 (unit-variance teacher): direct is trapped in the limit (SGD |p₁₂| = {final['h3', 'direct'][0]:.3f} at τ = {T}). **Tied h3
  escapes from σ = 1**: SGD p₁₂(τ = {T}) = {h3t[0]:.3f} (seeds {', '.join(f'{v:.3f}' for v in h3t[1])}), diverging seeds:
  {len(diverged['h3', 'tied'])} of {SEEDS}; the matrix-level limit reaches p₁₂(τ = {T_SCAN:g}) = {scan[SIZES[-1], 1.0]['p_student_teacher'][-1]:.4f}
  (max |Δp₁₂| against SGD over the whole run: {dev['h3', 'tied', 'spectral']:.4f}; the SGD escape is earlier at small d).
* Threshold: the tied-h3 limit escapes only from σ > σ_c, σ_c ∈ ({lo:.4f}, {hi:.4f}) at N = {SIZES[-1]}
  (N = {SIZES[0]}: ({bracket[SIZES[0]][0]:.4f}, {bracket[SIZES[0]][1]:.4f})). Below it the student collapses
  (q₁₁(τ = 1) = {scan[SIZES[-1], SIG_SCAN[0]]['q_student_student'][-1]:.4f} at σ = {SIG_SCAN[0]}), which is why an earlier
  version of this notebook, run from σ = 0.5, saw no escape.""")

# %%
nb.footer()
