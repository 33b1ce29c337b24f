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
# # 05 — Untied S = UVᵀ: fast means, slow overlaps, and the dichotomy (paper Fig. 3)
#
# Untied student and teacher (κ = σ = 1), L = 1, activations h1 (linear), h2, h3 (docs/theory.md §6). The pre-activations
# are *not* centred, so the means `m_k = Tr M_k/√d` are O(1) and move on the **fast** time t = nα (a boundary
# layer of Θ(d) steps), while the overlaps move on the **slow** time τ = nα/d (the package time axis).
#
# * fast phase: `dm/dt = −(t^A(0) + t^B(0)) ∂Φ/∂m (m, q(0))`, moments frozen → m relaxes onto ∂Φ/∂m = 0, at the
#   rate D = t^A + t^B = 2 for κ = σ = 1;
# * slow phase: means slaved to the critical manifold, moment hierarchy in the alphabet {M, Mᵀ, A, B};
# * weak recovery: `dq₁₂/dτ|₀ = −2 D₁(0) Q₂ g*₁₂` with `g*₁₂ = −E[σ'(Z₁)]E[σ*'(Z₂)]` at the fast-phase mean.
#   For h2, `E[h2'(Z)] = √2·m`, so a zero teacher mean (the free-probability limit) gives no signal — the
#   dichotomy; linear always learns; h3 has `E[h3'(Z)] = 3(m² + v − 1)/√6`.
#
# The untied theory here is `symattn.derivation.untied` (fast phase, slaved means, slow hierarchy; noise terms are
# not implemented for untied, so the theory is the ε → 0 limit). Means at finite d are random, O(1): every seed
# has its own teacher mean, so theory is integrated from the *sampled* initial moments of that seed
# (`init="sample"`) and compared seed by seed.

# %%
import os
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")    # shared 2-core machine: one BLAS thread
import matplotlib.pyplot as plt
import numpy as np

import symattn
from symattn.derivation import derive
from symattn.notebook import QUICK, Notebook, reading

# %matplotlib inline
nb = Notebook("05_untied_fast_slow")
savefig = nb.savefig

# %%
from symattn.derivation.state import fast_phase

D = 30 if QUICK else 100
SEEDS = [0] if QUICK else [0, 1]
M = 3 if QUICK else 4   # M = 2 drops every length-3 word the overlap drift needs (it is then exactly 0); odd M
                        # overshoot fastest (measured: linear overlap at τ = 0.1 is 1.74 (M=3), 0.26 (M=4), 0.64 (M=5))
T = 0.1 if QUICK else 0.3
T_EARLY = 0.05          # early slow phase, before the truncation fans out
T_LAYER = 10.0          # fast time t = nα after which the mean's boundary layer is over (rate D ≈ 2)
EPS, B = 0.01, 256
ACTS = ["linear", "h2", "h3"] if not QUICK else ["linear", "h2"]


def make(act):
    ix = lambda n, r: {"name": n, "role": r, "parameterization": "untied", "width": 1.0, "init_scale": 1.0}
    return {"name": f"fig3_untied_{act}", "model": {"tokens": 1, "activation": act},
            "indices": [ix("student", "student"), ix("teacher", "teacher")],
            "training": {"batch_size": B, "noise_ratio": EPS, "weight_decay": 0.0}, "theory": {"truncation": M}}


nb.states("fast rate D = t^A + t^B", sum(fast_phase(make("linear"), time=1.0, points=2).rate.values()), "2", 1e-12)


def sim_overlap(tab):
    """Normalised overlap of M₁ + M₁ᵀ with M₂ + M₂ᵀ from the simulated q1/q2 columns (the theory's column)."""
    num = tab["q1_student_teacher"] + tab["q2_student_teacher"]
    den = np.sqrt(np.abs((tab["q1_student_student"] + tab["q2_student_student"]) * (tab["q1_teacher_teacher"] + tab["q2_teacher_teacher"])))
    return num / den


from types import SimpleNamespace

from scipy.integrate import solve_ivp

from symattn.derivation import state as R


def slow_theory(system, seed):
    """The slow untied hierarchy from seed's sampled moments (means relaxed by the fast phase), ε = 0.

    Integrated with SciPy on the reference right-hand side ``reference.rhs`` (what
    ``symattn.integrate`` does with the compiled module; the pure-Python path avoids one Numba
    compilation per activation on this loaded machine). Stops where the zero truncation blows up."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y0 = R.initial(system, "sample", dim=D, seed=seed)

    def blowup(t, y, p):
        return 1e6 - np.max(np.abs(y)) if np.all(np.isfinite(y)) else -1.0
    blowup.terminal = True
    sol = solve_ivp(lambda t, y, p: R.rhs(system, t, y, p), (0.0, T), y0, t_eval=np.linspace(0.0, T, 61), args=(R.params(system, 0.0),),
                    method="DOP853", rtol=1e-8, atol=1e-10, events=blowup)
    tab = {"time": sol.t, **R.observables(system, sol.y.T)}
    # the zero truncation is not positivity preserving: stop where Tr(M Mᵀ)/d < 0 or |overlap| > 1 (breakdown)
    bad = np.nonzero((tab["q1_student_student"] < 0) | ~(np.abs(tab["overlap_student_teacher"]) <= 1))[0]
    broke = float(tab["time"][bad[0]]) if bad.size else None
    if bad.size:
        tab = {c: v[:bad[0]] for c, v in tab.items()}
    return SimpleNamespace(table=tab, diverged_at=None if sol.status == 0 else float(sol.t[-1]), breakdown=broke)


res, diverged = {}, {}
for act in ACTS:
    t0 = time.time()
    spec = make(act)
    system = derive(spec, truncation=M)
    print(f"{act:6s}: derive {time.time() - t0:.1f} s")
    for s in SEEDS:
        t1 = time.time()
        try:                 # seed by seed: a diverging seed is recorded with its time, not dropped silently
            one = symattn.simulate(spec, dim=D, seeds=1, seed0=s, time=T, points=31, progress=False, test_samples=0)
        except symattn.NumericalFailure as exc:
            diverged[act, s] = exc.time
            print(f"        seed {s}: SGD DIVERGED at τ = {exc.time:.4g} (left out)")
            continue
        t2 = time.time()
        fp = fast_phase(system, time=20.0, points=81, init="sample", dim=D, seed=s)
        th = slow_theory(system, s)
        sim = SimpleNamespace(table={c: one.per_seed[c][0] for c in one.per_seed}, alpha=one.alpha)
        res[act, s] = (fp, th, sim)
        print(f"        seed {s}: SGD d={D} ({one.info['steps_total']} steps, α={one.alpha:.4g}) {t2 - t1:.1f} s; "
              f"theory (fast + slow) {time.time() - t2:.1f} s; slow theory diverged_at={th.diverged_at}, "
              f"unphysical (Tr MMᵀ < 0 or |overlap| > 1) from τ = {th.breakdown}")
OK = {act: [s for s in SEEDS if (act, s) in res] for act in ACTS}

# %%
fastdev, mstar, early_dev, ov_final, broke = {}, {}, {}, {}, {}
print("fast phase (boundary layer of the mean), t = nα ≤ 20  [package time ≤ 20/d]:")
for (act, s), (fp, th, sim) in res.items():
    tf = sim.table["time"] * D
    msk = tf <= 20.0 + 1e-9
    m_th = np.interp(tf[msk], fp.table["time_fast"], fp.table["m_student"])
    dev = np.max(np.abs(m_th - sim.table["m_student"][msk]))
    fastdev[act, s], mstar[act, s] = dev, fp.m_star["student"]
    print(f"  {act:6s} seed {s}: m_teacher = {fp.m_star['teacher']:+.3f}, m(0) = {sim.table['m_student'][0]:+.3f}, "
          f"fast-phase m* = {fp.m_star['student']:+.3f}, SGD m at t=20: {np.interp(20.0, tf, sim.table['m_student']):+.3f}; "
          f"max|theory−SGD| = {dev:.3f}")
print("slow phase (package time τ ≤ T, up to the truncation's breakdown):")
for (act, s), (fp, th, sim) in res.items():
    ov = sim_overlap(sim.table)
    tab = dict(sim.table); tab["overlap_student_teacher"] = ov
    tmax = th.table["time"][-1]
    ov_final[act, s], broke[act, s] = ov[-1], th.breakdown or th.diverged_at
    for c in ["overlap_student_teacher", "m_student", "q1_student_student"]:
        t_lo = T_LAYER / D if c == "m_student" else 0.0     # the slaved mean only after the boundary layer
        msk = (sim.table["time"] <= tmax + 1e-12) & (sim.table["time"] >= t_lo - 1e-12)
        y_th = np.interp(sim.table["time"][msk], th.table["time"], th.table[c])
        d_ = np.max(np.abs(y_th - tab[c][msk])) if msk.any() else float("nan")
        early = msk & (sim.table["time"] <= T_EARLY + 1e-12)
        d_early = np.max(np.abs(np.interp(sim.table["time"][early], th.table["time"], th.table[c]) - tab[c][early]))             if early.any() else float("nan")
        early_dev[act, s, c] = d_early
        print(f"  {act:6s} seed {s} {c:>24s}: max|theory−SGD| = {d_early:.4f} for τ ≤ {T_EARLY}")
        print(f"  {act:6s} seed {s} {c:>24s}: max|theory−SGD| = {d_:.4f} (τ ∈ [{t_lo:.2g}, {tmax:.3g}]), "
              f"final theory {th.table[c][-1]:+.3f}, SGD {np.interp(tmax, sim.table['time'], tab[c]):+.3f}")

# %% [markdown]
# ## The dichotomy: the initial slow drift of the overlap from the fast-phase mean
# `g*₁₂ = ∂Φ/∂q^(1)₁₂` at the slaved means and the initial moments (docs/theory.md §6); zero ⇔ no weak recovery on
# the slow scale. We compare the free-probability limit (teacher mean m* = 0) with the sampled start of each seed.

# %%
g12s, rates = {}, {}
print(f"{'act':6s} {'start':>10s} {'m_teacher':>10s} {'m*_student':>11s} {'g*12':>10s} {'dq12/dτ|0 theory':>17s} {'SGD dq12/dτ 1st pt':>18s}")
for act in ACTS:
    system = derive(make(act), truncation=M)
    names = system.potential.names
    for label, s in [("free", None)] + [(f"seed {s}", s) for s in OK[act]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = R.initial(system, "free") if s is None else R.initial(system, "sample", dim=D, seed=s)
        th = R.theta(system, y)
        val = dict(zip(names, th))
        g = system.potential.value_and_gradient(th)[1]
        g12 = g[names.index("q1_student_teacher")]
        rate = R.rhs(system, 0.0, y, R.params(system, 0.0))[system.index(((0, "S"), (1, "T")))]
        sim_rate = ""
        g12s[act, label] = g12
        if s is not None:
            tab = res[act, s][2].table
            i0, j = 0, 1                      # first measurement interval (τ ≤ T/30)
            r_sgd = (tab['q1_student_teacher'][j] - tab['q1_student_teacher'][i0]) / (tab['time'][j] - tab['time'][i0])
            rates[act, s] = (rate, r_sgd)
            sim_rate = f"{r_sgd:18.3f}"
        print(f"{act:6s} {label:>10s} {val['m_teacher']:10.3f} {val['m_student']:11.3f} {g12:10.4f} {rate:17.3f} {sim_rate}")

# %%
fig, axes = plt.subplots(2, len(ACTS), figsize=(5 * len(ACTS), 7), squeeze=False)
for j, act in enumerate(ACTS):
    for s in OK[act]:
        fp, th, sim = res[act, s]
        c = f"C{s}"
        axes[0, j].plot(fp.table["time_fast"], fp.table["m_student"], "-", color=c, label=f"fast phase, seed {s}")
        axes[0, j].plot(sim.table["time"] * D, sim.table["m_student"], "o", color=c, ms=3)
        axes[0, j].axhline(fp.m_star["student"], color=c, ls=":", lw=0.8)
        axes[1, j].plot(th.table["time"], th.table["overlap_student_teacher"], "-", color=c, label=f"slow theory, seed {s}")
        axes[1, j].plot(sim.table["time"], sim_overlap(sim.table), "o", color=c, ms=3)
    axes[0, j].set_xlim(0, 40); axes[0, j].set_xlabel("fast time t = nα"); axes[0, j].set_title(f"{act}: mean m_student")
    axes[1, j].set_xlabel("slow time τ = nα/d"); axes[1, j].set_title(f"{act}: overlap of M₁+M₁ᵀ with M₂+M₂ᵀ")
axes[0, 0].legend(fontsize=7); axes[1, 0].legend(fontsize=7)
fig.suptitle(f"untied, d = {D}: lines theory, dots SGD (ε = {EPS}, B = {B})")
fig.tight_layout(); savefig(fig); plt.show()

# %%
NL = [a for a in ACTS if a != "linear"]
fmt = lambda xs: " / ".join(f"{x:.3f}" for x in xs)
rng = lambda xs: f"{min(xs):.3f}–{max(xs):.3f}" if xs else "n/a"
blow = [broke[k] for k in broke if broke[k] is not None]
div_txt = ("; SGD diverged (left out): " + ", ".join(f"{a} seed {s_} at τ = {t:.3g}" for (a, s_), t in diverged.items())
           if diverged else "")
reading(f"""**Reading (this run: d = {D}, seeds {', '.join(map(str, SEEDS))}, M = {M}{div_txt}).**

* *Boundary layer of the mean*: for linear the fast phase drives m_student to m* = {fmt([mstar['linear', s] for s in OK['linear']])}
  (the teacher's mean) and SGD follows it (max |Δm| over t ≤ 20: {fmt([fastdev['linear', s] for s in OK['linear']])}); for
  {', '.join(NL)} the fast phase sends m to m* = {fmt([mstar[a, s] for a in NL for s in OK[a]])} and SGD fluctuates
  around it at the O(d^{{-1/2}}) level (max |Δm| {rng([fastdev[a, s] for a in NL for s in OK[a]])}) before drifting on the slow scale.
* *Initial slow drift* of q^(1)₁₂ for linear: {fmt([rates['linear', s][0] for s in OK['linear']])} from the derived hierarchy at τ = 0
  (seeds {', '.join(map(str, OK['linear']))}) against {fmt([rates['linear', s][1] for s in OK['linear']])} over the first SGD interval. For
  {', '.join(NL)} the drift is small (|g*₁₂| ≤ {max(abs(g12s[a, 'free']) for a in NL):.3f} in the free limit) and the first-interval
  SGD slopes ({fmt([rates[a, s][1] for a in NL for s in OK[a]])}) are dominated by finite-d fluctuations at this d.
* *Dichotomy*: the free-probability limit has g*₁₂ = {fmt([g12s[a, 'free'] for a in NL])} for {', '.join(NL)} (no weak
  recovery on the slow scale; SGD overlaps at τ = {T}: {fmt([ov_final[a, s] for a in NL for s in OK[a]])}), while linear has
  g*₁₂ = {g12s['linear', 'free']:.3f} and learns (overlap {fmt([ov_final['linear', s] for s in OK['linear']])} at τ = {T}).
* *Slow overlaps*: for τ ≤ {T_EARLY} the M = {M} hierarchy matches the overlap to
  {rng([early_dev[a, s, 'overlap_student_teacher'] for a in ACTS for s in OK[a]])} and Tr MMᵀ/d to
  {rng([early_dev[a, s, 'q1_student_student'] for a in ACTS for s in OK[a]])}; afterwards the zero truncation fans out
  """ + (f"and becomes unphysical or blows up at τ ≈ {min(blow):.3g}–{max(blow):.3g}." if blow else "(no blow-up before τ = T here).")
        + """ The long-time curves follow below, from the matrix-level solver.""")

# %% [markdown]
# ## All times: the matrix-level slow phase (paper Fig. 3 at long times)
# The untied slow phase integrated at matrix level (`theory(spec, "spectral")`, docs/theory.md §6): U, V themselves, with
# the means slaved to ∂Φ/∂m = 0 and the force β that keeps tr M fixed — no truncation, valid at all times.
# *Sampled*: started from each seed's own U, V (N = d, with the O(ε) SGD-noise terms, 2 antithetic paths) next
# to that seed's SGD. *Free law*: N = 256 quantile realisation, teacher mean 0 (ε → 0); a teacher the students do
# not see at zero overlap (h2) is realised off-diagonally in two halves, exactly on the uninformative set.

# %%
from symattn import theory

T_LONG = 0.2 if QUICK else 1.0
N_FREE = 64 if QUICK else 256
long_res, long_div, free_res, free_decoupled = {}, {}, {}, {}
for act in ACTS:
    spec = make(act)
    t0 = time.time()
    free_one = theory(spec, "spectral", time=T_LONG, points=41, size=N_FREE, rotations=1, error_estimate=False,
                      noise=False)
    free_res[act], free_decoupled[act] = free_one.table, bool(free_one.info["decoupled"])
    for s in SEEDS:
        try:
            one = symattn.simulate(spec, dim=D, seeds=1, seed0=s, time=T_LONG, points=41, progress=False,
                                   test_samples=0)
        except symattn.NumericalFailure as exc:
            long_div[act, s] = exc.time
            print(f"{act:6s} seed {s}: SGD DIVERGED at τ = {exc.time:.4g} (left out)")
            continue
        sim = {c: one.per_seed[c][0] for c in one.per_seed}
        th = theory(spec, "spectral", time=T_LONG, points=41, init="sample", dim=D, seed=s,  # ε = EPS, the spec's
                    realisations=2).table
        long_res[act, s] = (th, sim)
    print(f"{act:6s}: matrix level + SGD to τ = {T_LONG}: {time.time() - t0:.1f} s")

long_dev = {}
for (act, s), (th, sim) in long_res.items():
    ov_sim = sim_overlap(sim)
    long_dev[act, s] = float(np.max(np.abs(th["overlap_student_teacher"] - ov_sim)))
    print(f"{act:6s} seed {s}: overlap at τ = {T_LONG}: matrix level {th['overlap_student_teacher'][-1]:+.3f}, "
          f"SGD {ov_sim[-1]:+.3f}; max |Δ overlap| on τ ≤ {T_LONG}: {long_dev[act, s]:.3f}")
free_final = {act: float(free_res[act]["overlap_student_teacher"][-1]) for act in ACTS}
free_start = {act: float(abs(free_res[act]["overlap_student_teacher"][0])) for act in ACTS}

fig, axes = plt.subplots(1, len(ACTS), figsize=(5 * len(ACTS), 3.6), squeeze=False)
for j, act in enumerate(ACTS):
    ax = axes[0, j]
    ax.plot(free_res[act]["time"], free_res[act]["overlap_student_teacher"], "k--", lw=1.2,
            label=f"free law, N = {N_FREE}")
    for s in SEEDS:
        if (act, s) in long_res:
            th, sim = long_res[act, s]
            ax.plot(th["time"], th["overlap_student_teacher"], "-", color=f"C{s}", label=f"matrix level, seed {s}")
            ax.plot(sim["time"], sim_overlap(sim), "o", color=f"C{s}", ms=3)
    ax.set_xlabel("slow time τ = nα/d"); ax.set_title(f"{act}: overlap of M₁+M₁ᵀ with M₂+M₂ᵀ")
axes[0, 0].legend(fontsize=7)
fig.suptitle(f"untied, d = {D}, all times: lines matrix-level theory, dots SGD (ε = {EPS}, B = {B})")
fig.tight_layout(); savefig(fig); plt.show()

# %%
def escape(t, ov, level=0.3):
    """First time with |overlap| > level (NaN if never)."""
    hit = np.nonzero(np.abs(ov) > level)[0]
    return float(t[hit[0]]) if hit.size else float("nan")


esc = {k: (escape(th["time"], th["overlap_student_teacher"]), escape(sim["time"], sim_overlap(sim)))
       for k, (th, sim) in long_res.items()}
same_sign = {k: bool(np.sign(th["overlap_student_teacher"][-1]) == np.sign(sim_overlap(sim)[-1]))
             for k, (th, sim) in long_res.items()}
for k, (a_, b_) in esc.items():
    print(f"{k[0]:6s} seed {k[1]}: τ(|overlap| > 0.3) matrix level {a_:.3f}, SGD {b_:.3f}; same sign: {same_sign[k]}")
lin = [k for k in sorted(long_res) if k[0] == "linear"]
nl = [k for k in sorted(long_res) if k[0] != "linear"]
reading(f"""**Reading (all times, d = {D}, τ ≤ {T_LONG}).** *Linear*: started from each seed's own matrices the
matrix-level slow phase lies on SGD over the whole run (max |Δ overlap| {', '.join(f"seed {k[1]}: {long_dev[k]:.3f}" for k in lin)}).
*{', '.join(NL)}*: it escapes in the same direction as SGD ({sum(same_sign[k] for k in nl)} of {len(nl)} seed runs with the same final
sign) and to the same learned state, but later: τ(|overlap| > 0.3) {', '.join(f"{k[0]} seed {k[1]}: {esc[k][0]:.2f} vs SGD {esc[k][1]:.2f}" for k in nl)},
so the largest gap during the escape is {max(long_dev[k] for k in nl):.2f}. A likely reason, not tested here: the slaved
theory leaves out the O(√ε) fluctuations of the SGD mean around m* (max |Δm| 0.065–0.100 above), which can seed
the unstable mode earlier in SGD. The
free-law limit (N = {N_FREE}) reaches {free_final['linear']:.3f} for linear at τ = {T_LONG}. With the teacher mean 0 there is
no linear signal for {', '.join(NL)}: {', '.join(f"{a}: overlap {free_start[a]:.1e} at the start, {free_final[a]:+.3f} at τ = {T_LONG}" + (" (teacher decoupled: realised exactly on the invariant set)" if free_decoupled[a] else " (Haar realisation)") for a in NL)}.
The uninformative point is unstable (docs/theory.md §7): where Φ is even in the teacher (h2) the realisation
sits exactly on it and stays there — the limit; where the coupling vanishes only at the free-law values of the
teacher's own parameters (h3: E h3'(G_t) = 3(q_tt − 1)), a finite-N realisation starts O(1/N) off it and moves
away (h3 at τ = {T_LONG}: {free_final.get('h3', float('nan')):+.3f}); only N → ∞ stays at 0. At finite d the h2 escape in SGD does not follow d^(−1/2) (README: 0.56 / 0.61 / 0.61 at
d = 100 / 200 / 400).""")

# %%
nb.footer()
