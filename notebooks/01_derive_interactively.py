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
# # 01 — From a model specification to the limit equations
#
# This is the tutorial a new user follows: a spec (a plain dict in the TOML format of `docs/interface.md`)
# → the population loss Φ over trace order parameters (docs/theory.md §2) → its gradient Γ → the *direct*
# system (closed, docs/theory.md §4) → the *tied* moment hierarchy (docs/theory.md §5) → the generated NumPy/Numba
# code → integration, next to online SGD at finite d.

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
from symattn.notebook import EXAMPLES as EX
from symattn.notebook import QUICK, Notebook, report

# %matplotlib inline
nb = Notebook("01_derive_interactively")
savefig = nb.savefig

# %% [markdown]
# ## 1. A spec
# A tied student `S = WWᵀ` (κ = 1, σ = 0.5) learns a frozen tied teacher (κ* = 0.5, σ* = 1), one token,
# activation `h2(z) = (z² − 1)/√2`, ½-MSE. `noise_ratio` is ε = αd/B: at dimension d the SGD step is α = εB/d.

# %%
spec = {
    "name": "tutorial_tied_h2",
    "model": {"tokens": 1, "activation": "h2"},
    "indices": [
        {"name": "student", "role": "student", "parameterization": "tied", "width": 1.0, "init_scale": 0.5},
        {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5, "init_scale": 1.0},
    ],
    "training": {"batch_size": 64, "noise_ratio": 0.01, "weight_decay": 0.0},
    "theory": {"truncation": 4},
}
S = symattn.load_spec(spec)
print(S.name, "| K =", S.K, "| indices:", S.names, "| L =", S.tokens)
print("SGD step at d = 100:", S.step_size(100), " ε at d = 100:", S.epsilon(100))

# %% [markdown]
# ## 2. The potential Φ and its gradient Γ
# For symmetric S (tied, direct) Φ depends only on `q_kl = Tr(S_k S_l)/d` (the pre-activations are centred).
# For polynomial activations Φ is an exact polynomial (Wick); `latex()` shows it.

# %%
from IPython.display import Math, display

P = symattn.potential(spec)
display(Math(r"\Phi = " + P.latex()))
print("order parameters:", P.names)
# free-probability values at initialisation (docs/theory.md §3): Tr S/d = σ²κ, Tr S²/d = σ⁴κ(1+κ), q_12 = t_1 t_2
t_s, t_t = 0.5**2 * 1.0, 1.0 * 0.5
theta0 = {"q_student_student": 0.5**4 * 2.0, "q_student_teacher": t_s * t_t, "q_teacher_teacher": 0.5 * 1.5}
print("Φ(θ0) =", P.value(theta0))
G = P.gradients(theta0)
print("Γ(θ0) (off-diagonal entries halved, docs/theory.md §2):\n", G.gamma)
# check against finite differences of the closed form: ∂Φ/∂q_12 = 2 Γ_12
h = 1e-6
th = dict(theta0); th["q_student_teacher"] += h
fd = (P.value(th) - P.value(theta0)) / h
print(f"∂Φ/∂q_12 by finite difference {fd:.6f}  vs  2Γ_12 = {2 * G.gamma[0, 1]:.6f}")

# %% [markdown]
# Non-polynomial activations (softmax over L = 2 tokens) are Gaussian integrals evaluated by
# adaptive quadrature, with gradients from Price's theorem:

# %%
Psm = symattn.potential(EX / "tied_softmax_L2.toml")
display(Math(r"\Phi_{\rm softmax} = " + Psm.latex()))
th_sm = {"q_student_student": 2.0, "q_student_teacher": 0.5, "q_teacher_teacher": 0.75}
print("Φ =", Psm.value(th_sm), " quadrature order", Psm.order, " est. error", Psm.error)
print("Γ =\n", Psm.gradients(th_sm).gamma)


# %% [markdown]
# ## 3. Direct S: a closed system
# With the student a direct matrix S (GOE start) the flow closes on `t_k`, `q_kl` (docs/theory.md §4). A derived
# system is data (sparse terms read by two backends), and it is also mathematics: `system.equations()` gives every
# right-hand side as a SymPy expression in the moments μ and the coefficients Γ (the gradient of Φ, off-diagonal
# entries halved), γ (weight decay) and ε·ν (the O(αd/B) SGD noise, docs/theory.md §7), on package time τ = nα/d;
# `system.latex()` typesets them.

# %%
direct_spec = dict(spec, name="tutorial_direct_h2",
                   indices=[{"name": "student", "role": "student", "parameterization": "direct", "init_scale": 0.5},
                            spec["indices"][1]])
sys_direct = derive(direct_spec, truncation=2)
print(sys_direct)
display(Math(sys_direct.latex()))

# %% [markdown]
# Reading: `dμ_s/dτ = −2(Γ_ss μ_s + Γ_st μ_t) − γμ_s` and `dμ_st/dτ = −2(Γ_ss μ_st + Γ_st μ_tt) − γμ_st` — docs/theory.md
# §4 with Ω = Ψ. With `closed=True` every coefficient is replaced by its closed form in the moments (for this
# polynomial Φ, Γ = ∂Φ/∂q), so the system is a polynomial ODE; for a closed system `column_equations()` writes it in
# the CSV's order parameters, and `jacobian()` linearises it:

# %%
import sympy as sp

ceq = sys_direct.column_equations()
for c in ("tr_student", "q_student_teacher"):
    display(Math(r"\frac{d\,%s}{d\tau} = %s" % (sp.latex(sp.Symbol(c)), sp.latex(ceq[c]))))
J = sys_direct.jacobian(closed=True)
print("Jacobian of the closed system:", J.shape)

# %% [markdown]
# The direct student has no first-order signal here (docs/theory.md §4: for h2, Γ_st = −4q_st vanishes at q_st = 0),
# and `symattn.recovery` says so from the spec alone, with the paper's condition as a SymPy expression in the init
# parameters and what the flow does instead:

# %%
rec = symattn.recovery(direct_spec)["student"]
print("signal:", rec.signal, "| condition:", rec.condition, "| growth rate of the overlap λ =", rec.instability)
print(rec.verdict)

# %% [markdown]
# ## 4. Tied S = WWᵀ: the moment hierarchy
# Words of indices, `μ_(k1..kw) = Tr(S_k1⋯S_kw)/d`; the flow of a word involves words one letter longer,
# so it never closes; the truncation of degree M drops every longer word (docs/theory.md §5).

# %%
sys_tied = derive(spec, truncation=4)
print(sys_tied)
names = sys_tied._sympy.latex_names
eqs = sys_tied.equations()
for name in list(eqs)[:3]:
    display(Math(r"\frac{d%s}{d\tau} = %s" % (sp.latex(sys_tied.symbols()[name], symbol_names=names),
                                               sp.latex(eqs[name], symbol_names=names))))

# %% [markdown]
# E.g. `dμ_s/dτ = −8Γ_ss μ_ss − 8Γ_st μ_st + …` is `dμ/dt = −Σ_l Γ_kl(μ(l,k) + μ(k,l))` of docs/theory.md §5 times 4
# (package time nα/d), and the ε·ν products of two moments are the pair contractions of §7. The tied student has
# first-order signal (the paper's Cor. 3): its overlap leaves 0 at the rate −8Γ_st t_s p_tt = 0.5 here
# (Γ_st = −4t_s t_t = −0.5, t_s = 0.25, p_tt = 0.5):

# %%
rec = symattn.recovery(spec)["student"]
print("signal:", rec.signal, "| Γ_st(θ(0)) =", rec.condition, "=", rec.value, "| dp_st/dτ at τ = 0:", rec.velocity)
nb.states("dp_st/dτ at τ = 0 (tied, the recovery analysis)", rec.velocity, "0.5", 1e-12)

# %% [markdown]
# The same flow at matrix level — what the default (all-time) theory integrates — is `symattn.matrix_flow`:

# %%
display(Math(symattn.matrix_flow(spec).latex()))

# %% [markdown]
# ## 5. The generated code
# `symattn.codegen.systems.source(system)` is a self-contained module (`symattn derive SPEC` writes it to `generated/`,
# ending, for a loss with Gaussian quadratures, with the line that sets the quadrature orders of the spec's state);
# its docstring carries the equations it evaluates:

# %%
from symattn.codegen.systems import source

src = source(sys_tied)
lines = src.splitlines()
print("\n".join(lines[:16]))
print("   ...")
start = next(i for i, l in enumerate(lines) if l.startswith("def rhs") or "def _rhs" in l)
print("\n".join(lines[start:start + 30]))
print(f"... ({len(lines)} lines in total)")

# %% [markdown]
# ## 6. Integrate and compare with SGD
# The zero truncation is valid only in a finite window (docs/theory.md §5); `integrate` compares M with M − 2 and
# reports `valid_until`. We integrate M = 4 and M = 6 with the spec's ε (SGD-noise terms on) and simulate
# online SGD at finite d.

# %%
D = 40 if QUICK else 150
SEEDS = 2 if QUICK else 4
T = 0.04 if QUICK else 0.06
sys6 = derive(spec, truncation=6)


def sampled_theory(system, **kw):
    """Average over seeds of the theory started from each seed's own initial matrices (init='sample')."""
    runs = [integrate(system, time=T, points=61, init="sample", dim=D, seed=s, **kw) for s in range(SEEDS)]
    n = min(len(r.table["time"]) for r in runs)
    tab = {c: np.mean([r.table[c][:n] for r in runs], axis=0) for c in runs[0].table}
    return tab, runs[0]


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    th4 = integrate(sys_tied, time=T, points=61, dim=D)            # free-probability start, ε of the spec at d = D
    th6 = integrate(sys6, time=T, points=61, dim=D)
    th6s, info6s = sampled_theory(sys6)
    th0s, _ = sampled_theory(sys6, epsilon=0.0, check_truncation=False)
# beyond the window: the all-time spectral solver of the same d → ∞ flow (ε = 0, free start)
from symattn import theory

thsp = theory(spec, "spectral", time=T, points=31, size=100 if QUICK else 400, rotations=1, error_estimate=False,
              noise=False)
print("free start, M=4: valid_until", th4.valid_until, "diverged_at", th4.diverged_at)
print("free start, M=6: valid_until", th6.valid_until, "diverged_at", th6.diverged_at)
print("sampled start (seed 0), M=6: valid_until", info6s.valid_until)
t0 = time.time()
sim = symattn.simulate(spec, dim=D, seeds=SEEDS, time=T, points=16, progress=False, test_samples=0)
print(f"SGD: d = {D}, {SEEDS} seeds, α = {sim.alpha:.4g}, {sim.info['steps_total']} steps/seed, {time.time() - t0:.1f} s")
cols = ["tr_student", "q_student_student", "p_student_teacher", "loss"]
until = th6.valid_until or th6.diverged_at
print(f"deviations, M = 6 with ε-terms, free start (d → ∞ initial law), up to {until or T}:")
_ = report(th6.table, sim.table, cols, until)
print(f"deviations, M = 6 with ε-terms, started from each seed's sampled moments, up to {until or T}:")
dev = report(th6s, sim.table, cols, until)
print("same, ε = 0 (paper limit):")
_ = report(th0s, sim.table, cols, until)
print(f"spectral solver (ε = 0, free start), whole run to {T}:")
_ = report(thsp.table, sim.table, cols)

# %%
fig, axes = plt.subplots(1, 4, figsize=(15, 3.2))
for ax, c in zip(axes, cols):
    ax.plot(th4.table["time"], th4.table[c], "C1--", label="M = 4")
    ax.plot(th6.table["time"], th6.table[c], "C0-", label="M = 6 (ε terms), free start")
    ax.plot(th6s["time"], th6s[c], "C4-", label="M = 6 (ε terms), sampled start")
    ax.plot(th0s["time"], th0s[c], "C2:", label="M = 6, ε = 0, sampled start")
    ax.plot(thsp.table["time"], thsp.table[c], "k--", lw=1, label="spectral solver, ε = 0")
    ax.errorbar(sim.table["time"], sim.table[c], yerr=sim.table[c + "_sem"], fmt="o", ms=3, color="C3", label=f"SGD d={D}")
    if th6.valid_until:
        ax.axvline(th6.valid_until, color="grey", lw=0.8)
    ax.set_title(c); ax.set_xlabel("time nα/d")
axes[0].legend(fontsize=7)
fig.tight_layout(); savefig(fig); plt.show()

# %%
nb.footer()
