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
# # 07 — A two-head tied student learning a two-head teacher
#
# Softmax attention over L = 2 tokens (β = 1), readout `y = F(G_s1) + F(G_s2)` against `F(G_t1) + F(G_t2)`
# (½-MSE), four indices: students s1, s2 (tied, κ = 1, σ = 0.7), teachers t1, t2 (tied, κ* = 0.5, σ* = 1).
# Φ depends on the 10 overlaps q_kl (k ≤ l ∈ {s1, s2, t1, t2}) through 20 low-dimensional quadrature terms.
#
# **Theory with its O(ε) noise terms.** The hierarchy is built with the ordinary `derive(spec, M)`, including
# the SGD-noise coefficients ν_kl (Gaussian expectations with up to 16 jointly integrated variables; their
# high-dimensional quadrature terms use a capped Gauss–Hermite rule, so building ν takes seconds and a few
# hundred MB). It is integrated at the spec's ε = α·d/B = 0.005 (the SGD runs use the same ε), and, for
# comparison, at ε = 0 (the paper's ε → 0 limit) from the same system. Both heads start from the same law, so the
# free-probability limit never breaks the s1 ↔ s2 symmetry; the theory is therefore integrated from the
# *sampled* initial moments of each SGD seed (`init="sample"`), which carry the finite-d asymmetry. The
# all-time spectral solver is run at ε = 0 only (its stochastic O(ε) flow costs ≈ 80 s here for an effect far
# below its O(1/N) finite-size error).

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
from symattn.notebook import QUICK, Notebook, reading, report

# %matplotlib inline
nb = Notebook("07_multihead")
savefig = nb.savefig

# %%
D = 30 if QUICK else 100
SEEDS = [0] if QUICK else [0, 1]
T = 0.06 if QUICK else 0.2
EPS = 0.005
Ms = [3] if QUICK else [3, 4]   # M = 2 drops the length-3 words every overlap drift needs
ix = lambda n, r, k, s: {"name": n, "role": r, "parameterization": "tied", "width": k, "init_scale": s}
spec = {"name": "two_head_softmax_L2", "model": {"tokens": 2, "activation": "softmax", "beta": 1.0, "readout": "sum"},
        "indices": [ix("s1", "student", 1.0, 0.7), ix("s2", "student", 1.0, 0.7),
                    ix("t1", "teacher", 0.5, 1.0), ix("t2", "teacher", 0.5, 1.0)],
        "training": {"batch_size": 256, "noise_ratio": EPS, "weight_decay": 0.0}, "theory": {"truncation": 4}}
t0 = time.time()
P = symattn.potential(spec)
print(f"Φ: {len(P.quad_terms)} quadrature terms over {P.names}  [{time.time() - t0:.1f} s]")
nb.states("quadrature terms of Φ", len(P.quad_terms), "20", 0)
systems = {}
for M in Ms:
    t0 = time.time()
    systems[M] = derive(spec, M)          # the normal route: Φ, Γ and the noise coefficients ν
    print(f"M = {M}: {systems[M].size} moments, {len(systems[M].terms)} terms, {len(systems[M].nu)} ν coefficients,"
          f" supports_noise = {systems[M].supports_noise}  [{time.time() - t0:.1f} s]")

# %%
theory, theory0, sims = {}, {}, {}     # theory: at the spec's ε (O(ε) noise terms); theory0: at ε = 0
for s in SEEDS:
    for M in Ms:
        t0 = time.time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # (quick mode, as the tests run it: ε = 0 — the ν quadrature of 16 joint variables is not compiled)
            theory[M, s] = integrate(systems[M], time=T, points=41, init="sample", dim=D, seed=s,
                                     check_truncation=False, epsilon=0.0 if QUICK else None)
            t1 = time.time()
            theory0[M, s] = integrate(systems[M], time=T, points=41, init="sample", dim=D, seed=s, epsilon=0.0,
                                      check_truncation=False)
        print(f"seed {s}, M = {M}: theory ε = {theory[M, s].epsilon} {t1 - t0:.1f} s, diverged_at = "
              f"{theory[M, s].diverged_at}; ε = 0 {time.time() - t1:.1f} s, diverged_at = {theory0[M, s].diverged_at}")
    t0 = time.time()
    sims[s] = symattn.simulate(spec, dim=D, seeds=1, seed0=s, time=T, points=11, progress=False, test_samples=0)
    print(f"seed {s}: SGD d = {D}, {sims[s].info['steps_total']} steps, α = {sims[s].alpha:.4g}: {time.time() - t0:.1f} s")

t0 = time.time()
spec_sp = symattn.theory(spec, "spectral", time=T, points=21, size=100 if QUICK else 300, rotations=1, error_estimate=False,
                 noise=False)
print(f"spectral solver (ε = 0, free start, N = {spec_sp.options['size']}): {time.time() - t0:.1f} s")
cols = ["q_s1_s1", "q_s1_s2", "p_s1_t1", "p_s1_t2", "p_s2_t1", "p_s2_t2", "loss"]
dv, windows = {}, {}
for s in SEEDS:
    print(f"--- seed {s}: spectral solver (ε = 0) vs SGD (ε = {EPS}), whole run:")
    dv[s, "spectral"] = report(spec_sp.table, sims[s].table, cols)
for s in SEEDS:
    until = None
    if len(Ms) > 1:                       # validity window: first time M and M − 1 differ by > 1e-2·(1 + |value|)
        a, b = theory[Ms[-1], s].table, theory[Ms[-2], s].table
        n = min(len(a["time"]), len(b["time"]))
        gap = np.max([np.abs(a[c][:n] - b[c][:n]) / (1 + np.abs(a[c][:n])) for c in cols if c != "loss"], axis=0)
        bad = np.nonzero(gap > 1e-2)[0]
        until = float(a["time"][bad[0]]) if bad.size else None
        print(f"seed {s}: truncations M = {Ms[-2]} and {Ms[-1]} agree within 1e-2 until τ = {until}")
    windows[s] = until
    for M in Ms:
        for lab, th in ((f"ε = {EPS}", theory), ("ε = 0", theory0)):
            print(f"--- seed {s}, M = {M} ({lab}) vs SGD (ε = {EPS}), whole run:")
            dv[s, M, lab, "all"] = report(th[M, s].table, sims[s].table, cols)
            if until is not None:
                print(f"--- seed {s}, M = {M} ({lab}), up to τ = {until}:")
                dv[s, M, lab, "win"] = report(th[M, s].table, sims[s].table, cols, until)

# %%
fig, axes = plt.subplots(len(SEEDS), 4, figsize=(16, 3.4 * len(SEEDS)), squeeze=False)
panels = [("q_s1_s1", "q_s2_s2", "q_s1_s2"), ("p_s1_t1", "p_s1_t2"), ("p_s2_t1", "p_s2_t2"), ("loss",)]
for i, s in enumerate(SEEDS):
    for ax, group in zip(axes[i], panels):
        for j, c in enumerate(group):
            for M in Ms:
                ax.plot(theory[M, s].table["time"], theory[M, s].table[c], "-" if M == Ms[-1] else ":", color=f"C{j}",
                        label=f"{c} M={M}" if True else None)
            ax.plot(theory0[Ms[-1], s].table["time"], theory0[Ms[-1], s].table[c], "-.", color=f"C{j}", lw=0.8,
                    alpha=0.6, label=f"{c} M={Ms[-1]}, ε=0" if j == 0 else None)
            ax.plot(sims[s].table["time"], sims[s].table[c], "o", color=f"C{j}", ms=3)
            ax.plot(spec_sp.table["time"], spec_sp.table[c], "--", color=f"C{j}", lw=1, alpha=0.7,
                    label=f"{c} spectral" if c in ("q_s1_s1", "p_s1_t1", "p_s2_t1", "loss") else None)
        ax.set_title(f"seed {s}: " + ", ".join(group), fontsize=9); ax.set_xlabel("time nα/d")
        ax.legend(fontsize=6)
fig.suptitle(f"two-head softmax L = 2: hierarchy (solid M={Ms[-1]} / dotted M={Ms[0]} at ε = {EPS}; dash-dot M={Ms[-1]} at ε = 0; "
             f"sampled start), spectral (dashed, ε = 0), SGD (dots, d = {D}, ε = {EPS})")
fig.tight_layout(); savefig(fig); plt.show()

# %%
def mx(dev):
    return max(dev[c]["max_abs_dev"] for c in cols)


lab_e, lab_0 = f"ε = {EPS}", "ε = 0"
ps = [sims[s].table[c][-1] for s in SEEDS for c in ("p_s1_t1", "p_s1_t2", "p_s2_t1", "p_s2_t2")]
text = f"**Reading (this run: d = {D}, seeds {', '.join(map(str, SEEDS))}, M = {', '.join(map(str, Ms))}).** "
if len(Ms) > 1 and all(windows[s] for s in SEEDS):
    win_lo, win_hi = min(windows.values()), max(windows.values())
    m_hi, m_lo = Ms[-1], Ms[-2]
    text += (f"Inside the window where the M = {m_lo} and M = {m_hi} truncations agree (τ ≤ {win_lo:.3g}–{win_hi:.3g}) the "
             f"M = {m_hi} hierarchy at the spec's ε = {EPS}, started from each seed's own matrices, matches SGD to "
             f"{max(mx(dv[s, m_hi, lab_e, 'win']) for s in SEEDS):.1e} in every overlap and in Φ; M = {m_lo} to "
             f"{max(mx(dv[s, m_lo, lab_e, 'win']) for s in SEEDS):.1e}. The O(ε) noise terms change the largest "
             f"deviation inside the window from {max(mx(dv[s, m_hi, lab_0, 'win']) for s in SEEDS):.1e} (ε = 0) to "
             f"{max(mx(dv[s, m_hi, lab_e, 'win']) for s in SEEDS):.1e}. ")
text += (f"Over the whole run the truncations drift away from SGD (largest deviation "
         f"{max(mx(dv[s, M, lab_e, 'all']) for s in SEEDS for M in Ms):.3f}), while the all-time spectral solver "
         f"(ε = 0, free start; it ignores the O(d^{{-1/2}}) initial asymmetry between the heads) stays within "
         f"{max(mx(dv[s, 'spectral']) for s in SEEDS):.3f}. On this horizon both heads learn both teachers about equally "
         f"(p_(s_i t_j) = {min(ps):.3f}–{max(ps):.3f} at τ = {T}); the specialisation of heads to teachers is a "
         f"longer-time phenomenon not reached here.")
reading(text)

# %%
nb.footer()
