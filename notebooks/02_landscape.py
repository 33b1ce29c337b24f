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
# # 02 — The landscape Φ(q) and the trap of direct S
#
# Φ and Γ = ∇Φ (docs/theory.md §2) over the order parameters for linear, h2, h3 (L = 1) and row-softmax (L = 2, β = 1),
# with a tied teacher (κ* = 0.5, σ* = 1: t₂ = 0.5, q₂₂ = 0.75) and the student's own overlap q₁₁ = 2
# (tied κ = σ = 1). The student–teacher cross-gradient Γ₁₂ decides weak recovery (docs/theory.md §4, §5):
#
# * **direct S** starts on the uninformative manifold `{t₁ = 0, q₁₂ = 0}`; the flow there is
#   `dt₁/dt ∝ Γ₁₂ t₂`, `dq₁₂/dt ∝ Γ₁₁ q₁₂ + Γ₁₂ q₂₂`, so if Γ₁₂(q₁₂ = 0) = 0 the manifold is invariant — stuck;
# * **tied S = WWᵀ** is PSD, so t₁ = σ²κ > 0 and its uninformative point is `p₁₂ = 0`, i.e. `q₁₂ = t₁t₂ ≠ 0`, where
#   Γ₁₂ generally does not vanish: `dp₁₂/dt|₀ = −2Γ₁₂ t₁ p₂₂` (paper time; ×4 in package time).

# %%
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")    # shared 2-core machine: one BLAS thread
import matplotlib.pyplot as plt
import numpy as np

import symattn
from symattn.derivation import derive
from symattn.derivation import state as R
from symattn.notebook import QUICK, Notebook, reading

# %matplotlib inline
nb = Notebook("02_landscape")
savefig = nb.savefig


# %%
def tied_spec(act, L=1, name=None):
    return {"name": name or f"land_{act}", "model": {"tokens": L, "activation": act},
            "indices": [{"name": "student", "role": "student", "parameterization": "tied", "width": 1.0, "init_scale": 1.0},
                        {"name": "teacher", "role": "teacher", "parameterization": "tied", "width": 0.5, "init_scale": 1.0}],
            "training": {"batch_size": 512, "noise_ratio": 0.01, "weight_decay": 0.0}, "theory": {"truncation": 4}}


ACTS = [("linear", 1), ("h2", 1), ("h3", 1), ("softmax", 2)]
pots = {}
for act, L in ACTS:
    t0 = time.time()
    pots[act] = symattn.potential(tied_spec(act, L))
    P = pots[act]
    print(f"{act:8s} L={L}: Φ = {P.latex() if P.is_closed_form else '(quadrature, %d terms)' % len(P.quad_terms)}"
          f"   [{time.time() - t0:.1f} s]")
q11, q22, t1, t2 = 2.0, 0.75, 1.0, 0.5


def point(q12, q11=q11):
    return {"q_student_student": q11, "q_student_teacher": q12, "q_teacher_teacher": q22}


# %%
n = 9 if QUICK else 41
qs = np.linspace(-1.0, 1.0, n)
fig, axes = plt.subplots(2, 4, figsize=(15, 6), sharex=True)
rows = []
for j, (act, L) in enumerate(ACTS):
    P = pots[act]
    P.calibrate(point(t1 * t2))
    phi = np.array([P.value(point(q)) for q in qs])
    g12 = np.array([P.gradients(point(q)).gamma[0, 1] for q in qs])
    axes[0, j].plot(qs, phi, "C0"); axes[0, j].set_title(f"{act} (L={L}): Φ(q₁₂)")
    axes[1, j].plot(qs, g12, "C1"); axes[1, j].axhline(0, color="k", lw=0.5)
    axes[1, j].set_title("Γ₁₂(q₁₂)"); axes[1, j].set_xlabel("q₁₂  (q₁₁ = 2, q₂₂ = 0.75)")
    for ax in axes[:, j]:
        ax.axvline(0.0, color="C3", ls="--", lw=0.8, label="direct start q₁₂=0")
        ax.axvline(t1 * t2, color="C2", ls=":", lw=1.0, label="tied start q₁₂=t₁t₂")
    g_direct = P.gradients(point(0.0)).gamma[0, 1]
    g_tied = P.gradients(point(t1 * t2)).gamma[0, 1]
    # the same at unit-variance pre-activations, Var G = 2q = 1 (student q11 = teacher q22 = 1/2)
    g_unit = P.gradients({"q_student_student": 0.5, "q_student_teacher": 0.0, "q_teacher_teacher": 0.5}).gamma[0, 1]
    g_unit_t = P.gradients({"q_student_student": 0.25, "q_student_teacher": 0.0, "q_teacher_teacher": 0.5}).gamma[0, 1]
    rows.append((act, g_direct, g_tied, g_unit, g_unit_t))
axes[0, 0].legend(fontsize=7)
fig.tight_layout(); savefig(fig); plt.show()
print(f"{'activation':10s} {'Γ12(q12=0) direct':>18s} {'Γ12(q12=t1t2) tied':>19s} {'Γ12(0), q11=q22=½':>18s} {'Γ12(0), q11=¼,q22=½':>20s}")
for act, gd, gt, gu, gut in rows:
    print(f"{act:10s} {gd:18.3e} {gt:19.3e} {gu:18.3e} {gut:20.3e}")

# %% [markdown]
# For the linear activation Φ = q₁₁ + q₂₂ − 2q₁₂ (½-MSE, one token), so its cross-gradient is the constant
# Γ₁₂ = −1 (off-diagonal entries halved, docs/theory.md §2):

# %%
nb.states("linear Γ₁₂ at q₁₂ = 0", G_lin := pots["linear"].gradients(point(0.0, 2.0)).gamma[0, 1], "-1", 1e-12)

# %% [markdown]
# Φ and −∇Φ over (q₁₁, q₁₂) (feasible region q₁₂² ≤ q₁₁q₂₂). The flows move *along* −Γ only through the
# matrix dynamics (docs/theory.md §4–5), but the picture shows where Φ is flat in the q₁₂ direction.

# %%
m = 7 if QUICK else 21
A, B = np.meshgrid(np.linspace(0.2, 3.0, m), np.linspace(-1.2, 1.2, m))
fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
for ax, (act, L) in zip(axes, ACTS):
    P = pots[act]
    Z = np.full(A.shape, np.nan); U = np.zeros(A.shape); V = np.zeros(A.shape)
    for idx in np.ndindex(A.shape):
        a, b = A[idx], B[idx]
        if b * b <= a * q22:
            Z[idx] = P.value(point(b, a))
            g = P.gradients(point(b, a)).gamma
            U[idx], V[idx] = -g[0, 0], -g[0, 1]
    cs = ax.contourf(A, B, Z, 20, cmap="viridis"); fig.colorbar(cs, ax=ax)
    ax.quiver(A, B, U, V, color="w", scale=None, width=0.004)
    ax.axhline(0, color="C3", ls="--", lw=0.8)
    ax.set_title(f"{act}: Φ, −(Γ₁₁, Γ₁₂)"); ax.set_xlabel("q₁₁"); ax.set_ylabel("q₁₂")
fig.tight_layout(); savefig(fig); plt.show()

# %% [markdown]
# ## The derived flows at the uninformative starts
# Evaluate the right-hand sides of the derived systems (ε = 0, the paper's limit) at the free initial states:
# direct S (GOE start, σ = 0.5: t₁ = 0, q₁₂ = 0) and tied S (t₁ = 1, q₁₂ = t₁t₂, p₁₂ = 0), and compare the tied
# `dp₁₂/dt` with the closed formula `−8 Γ₁₂ t₁ p₂₂` (package time).

# %%
flows = {}
print(f"{'act':8s} {'direct dt1/dt':>14s} {'direct dq12/dt':>15s} {'tied dp12/dt':>13s} {'-8Γ12 t1 p22':>13s}")
for act, L in ACTS:
    ds = tied_spec(act, L, name=f"land_direct_{act}")
    ds["indices"][0] = {"name": "student", "role": "student", "parameterization": "direct", "init_scale": 0.5}
    sd = derive(ds, truncation=2)
    mu = R.initial(sd, "free")
    r = R.rhs(sd, 0.0, mu, R.params(sd, 0.0))
    st = derive(tied_spec(act, L), truncation=3)
    mt = R.initial(st, "free")
    rt = R.rhs(st, 0.0, mt, R.params(st, 0.0))
    i_t1, i_q12, i_t2 = st.index(((0, "S"),)), st.index(((0, "S"), (1, "S"))), st.index(((1, "S"),))
    dp12 = rt[i_q12] - rt[i_t1] * mt[i_t2]          # teacher frozen
    th = mt[st.theta_words]
    g12 = st.potential.gradients(th).gamma[0, 1]
    p22 = mt[st.index(((1, "S"), (1, "S")))] - mt[i_t2] ** 2
    pred = -8 * g12 * mt[i_t1] * p22
    flows[act] = (r[sd.index(((0, 'S'),))], r[sd.index(((0, 'S'), (1, 'S')))], dp12, pred)
    print(f"{act:8s} {r[sd.index(((0, 'S'),))]:14.3e} {r[sd.index(((0, 'S'), (1, 'S')))]:15.3e} {dp12:13.4f} {pred:13.4f}")

# %%
G = {act: dict(zip(["direct", "tied", "unit", "unit_t"], vals)) for act, *vals in rows}
rel = max(abs(f[2] - f[3]) / max(abs(f[3]), 1e-300) for f in flows.values())
reading(f"""**Reading.** For h2 the cross-gradient at q₁₂ = 0 is Γ₁₂ = {abs(G['h2']['direct']):.1e} (Φ has no term linear in
q₁₂), for any variances ({abs(G['h2']['unit']):.1e}, {abs(G['h2']['unit_t']):.1e} in the last columns), so the direct flow has zero
velocity out of the uninformative manifold (dt₁/dt = {flows['h2'][0]:.1e}, dq₁₂/dt = {flows['h2'][1]:.1e}) — an invariant
set of the d → ∞ flow; direct S stays uninformative on the Θ(1) time scale (at finite d it escapes later through
fluctuations, notebooks 04 and 06). **h3 is trapped only at unit variance:** its Γ₁₂(q₁₂ = 0) is
{G['h3']['direct']:.3f} with this teacher (q₂₂ = {q22}, Var G* = {2 * q22}), so the direct h3 flow is *not* stuck
(dt₁/dt = {flows['h3'][0]:.3f}, dq₁₂/dt = {flows['h3'][1]:.3f}); with a unit-variance teacher (q₂₂ = ½) it is
{abs(G['h3']['unit']):.1e} (q₁₁ = ½) and {abs(G['h3']['unit_t']):.1e} (q₁₁ = ¼) — the closed form −(3/2)(2q₁₁ − 1)(2q₂₂ − 1) of the
linear term: h3(G) has a first-Hermite component unless Var G = 2q = 1. Notebook 04 therefore uses a teacher with
q₂₂ = ½ (σ* = (2/3)^{{1/4}}). The linear activation has a constant Γ₁₂ = {G['linear']['direct']:.3f} and learns from any
start; softmax (L = 2) has a first Hermite component too (Γ₁₂(0) = {G['softmax']['direct']:.3f}). The tied student starts
at q₁₂ = t₁t₂ where Γ₁₂ ≠ 0 for all four, and the derived tied hierarchy reproduces dp₁₂/dt|₀ = −8Γ₁₂ t₁ p₂₂ to a
relative {rel:.1e} (largest over the four activations).""")

# %%
nb.footer()
