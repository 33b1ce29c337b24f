"""Untied attention S_k = M_k = U_k V_kᵀ: fast means, slow moments (docs/theory.md §6), on package time.

Derivation (one SGD step, batch-mean gradient, step α, weight decay γ; G *not* centred):

    ∂𝓛/∂S_k = Σ_ij e_ijk x_i x_jᵀ/√d,  ∇_U = (∂𝓛/∂S) V,  ∇_V = (∂𝓛/∂S)ᵀ U,
    E ∂𝓛/∂S_k = ∇_{S_k}Φ = g_k I/√d + (2/d) Σ_l (GΩ_kl S_l + GΨ_kl S_lᵀ)

(g_k = ∂Φ/∂m_k; GΩ, GΨ in the full-matrix convention of ``derive.potential``: Ω_kl and Ω_lk both
carry GΩ_kl, hence the 2). On the slow time τ = nα/d (= package time):

    U̇_k = −β̃_k V_k − 2 X_k V_k − γ U_k,   V̇_k = −β̃_k U_k − 2 X_kᵀ U_k − γ V_k,
    X_k = Σ_l (GΩ_kl M_l + GΨ_kl M_lᵀ),   β̃_k = √d g_k  (the O(√d) mean force).

The letter flows follow from Ṁ = U̇Vᵀ + UV̇ᵀ, Ȧ = U̇Uᵀ + UU̇ᵀ, Ḃ = V̇Vᵀ + VV̇ᵀ:

    Ṁ_k  = −β_k (A_k + B_k) − 2 Σ_l [GΩ_kl (M_l B_k + A_k M_l) + GΨ_kl (M_lᵀ B_k + A_k M_lᵀ)] − 2γ M_k
    Ṁ_kᵀ = −β_k (A_k + B_k) − 2 Σ_l [GΩ_kl (B_k M_lᵀ + M_lᵀ A_k) + GΨ_kl (B_k M_l + M_l A_k)] − 2γ M_kᵀ
    Ȧ_k  = −β_k (M_k + M_kᵀ) − 2 Σ_l [GΩ_kl (M_l M_kᵀ + M_k M_lᵀ) + GΨ_kl (M_lᵀ M_kᵀ + M_k M_l)] − 2γ A_k
    Ḃ_k  = −β_k (M_k + M_kᵀ) − 2 Σ_l [GΩ_kl (M_lᵀ M_k + M_kᵀ M_l) + GΨ_kl (M_l M_k + M_kᵀ M_lᵀ)] − 2γ B_k

The mean m_k = √d μ(M_k) obeys dm_k/dτ = −d D_k g_k − √d ψ_k − 2γ m_k with D_k = t^A_k + t^B_k and
ψ_k = 2 Σ_l [GΩ_kl (μ(M_l B_k) + μ(A_k M_l)) + GΨ_kl (μ(M_lᵀ B_k) + μ(A_k M_lᵀ))]. On the fast time
t = nα this is dm_k/dt = −D_k g_k (moments frozen); on the slow scale m_k is slaved to the
critical manifold ∂Φ/∂m_k = 0, to the order g_k = β_k/√d with

    β_k = −ψ_k / D_k       (exactly the value that keeps dμ(M_k)/dτ = −2γ μ(M_k)).

The slaved mean moves with the moments, m*(q(τ)); it is part of the state vector (after the
moments) with dm*/dτ = −H_mm⁻¹ ∂_τ(∂Φ/∂m)|_m (implicit function theorem), and every evaluation of
the coefficients re-solves ∂Φ/∂m = 0 by Newton from the state value (``derivation.means``; the
backends run it). This module builds the ``derivation.system.System`` (data); β_k is its
``MEAN_FORCE`` coefficient.
Symmetric (tied/direct) trainable indices in the same model use the flows of ``hierarchy`` with
S_l → (M_l + M_lᵀ)/2 for untied l.
"""
from __future__ import annotations

from ..kinds import alphabet_of, metric_letters
from ..spec import Spec, require_spec
from . import closes, min_truncation
from .hierarchy import apply_flows
from .noise import noise_terms, nu_expectations, nu_names
from .potential import Potential
from .system import (
    DECAY,
    GRADIENT,
    LOSS,
    MEAN_FORCE,
    NOISE,
    ONE,
    OVERLAP,
    STATE,
    THETA,
    ZERO,
    Coef,
    Column,
    System,
    pack_terms,
    pair_columns,
)

__all__ = ["derive_untied", "untied_coefficient_rules", "untied_letter_flows"]

DESCRIPTION = "untied fast-mean/slow-moment hierarchy"


def untied_coefficient_rules(spec, index, mean_trainable) -> tuple:
    """coef = [1, γ, β_k, GΩ_kl, GΨ_kl, Γ_kl (row-major), ε ν...]: β_k of a trainable untied k is the
    mean force −ψ_k/D_k (module docstring), ψ_k over the words M_l B_k, A_k M_l, M_lᵀ B_k, A_k M_lᵀ (whitened:
    ΣM_l B_k, A_k M_l Σ, …, and D_k = μ(ΣB_k) + μ(A_kΣ), docs/theory.md §1)."""
    K, sym = spec.K, [ix.symmetric for ix in spec.indices]
    m = metric_letters(spec)
    rules = [Coef("1", ONE), Coef("gamma", DECAY)]
    for k in range(K):
        if k not in mean_trainable:
            rules.append(Coef(f"beta_{k}", ZERO))
            continue
        A, B, parts = (k, "A"), (k, "B"), []
        for l in range(K):
            Ml, Tl = (l, "S"), ((l, "S") if sym[l] else (l, "T"))
            parts += [("GO", l, index(m + (Ml, B)), index((A, Ml) + m)),
                      ("GP", l, index(m + (Tl, B)), index((A, Tl) + m))]
        rules.append(Coef(f"beta_{k}", MEAN_FORCE, (k, tuple(parts), (index((A,) + m), index(m + (B,))))))
    for mat in ("GO", "GP", "Gamma"):
        rules += [Coef(f"{mat}_{k}_{l}", GRADIENT, (mat, k, l)) for k in range(K) for l in range(K)]
    return tuple(rules) + tuple(Coef(n, NOISE, (n,)) for n in nu_names(spec))


def untied_letter_flows(spec: Spec, cidx: dict) -> dict:
    """letter -> [(coef key, replacement letters, factor)] for every trainable letter (module doc;
    each student's kind, symattn.kinds)."""
    sym = [ix.symmetric for ix in spec.indices]
    flows = {}
    for k in spec.students:
        flows.update(spec.indices[k].kind.letter_flow(k, spec.K, cidx, sym, metric_letters(spec)))
    return flows


def untied_columns(spec, index, mean_state, theta_pos, symmetric) -> list:
    """CSV columns (docs/interface.md): tr, m, trA, trB per index, the pairs, the overlaps of
    M_k + M_kᵀ and M_l + M_lᵀ, the loss."""
    names, cols = spec.names, []
    for k, name in enumerate(names):
        cols.append(Column(f"tr_{name}", STATE, (index(((k, "S"),)),)))
        if not spec.indices[k].centred:
            cols += [Column(f"m_{name}", THETA, (theta_pos[f"m_{name}"],)),
                     Column(f"trA_{name}", STATE, (index(((k, "A"),)),)),
                     Column(f"trB_{name}", STATE, (index(((k, "B"),)),))]
    cols += pair_columns(spec, index, symmetric, spec.features.second_moment)

    def sym_product(k, l):          # Tr((M_k + M_kᵀ)(M_l + M_lᵀ))/d = 2(q1_kl + q2_kl)
        return index(((k, "S"), (l, "T"))), index(((k, "S"), (l, "S")))
    for k in range(spec.K):
        for l in range(k + 1, spec.K):
            if not symmetric[k] and not symmetric[l]:
                cols.append(Column(f"overlap_{names[k]}_{names[l]}", OVERLAP,
                                   (sym_product(k, l), sym_product(k, k), sym_product(l, l))))
    return cols + [Column("loss", LOSS)]


def derive_untied(spec, truncation: int | None = None, potential: Potential | None = None,
                  nu: dict | None = None) -> System:
    """The untied slow hierarchy of a spec with at least one untied index (docs/theory.md §6)."""
    spec = require_spec(spec, "derive_untied")
    M = truncation or spec.truncation
    # flows that preserve the word length (direct, general S) close the system at M = 2 (§4), not with Σ (§1)
    M = 2 if closes(spec) else M
    if M < min_truncation(spec):
        from ..errors import SpecError
        raise SpecError(f"{spec.source}: theory.truncation: M = {M}; with model.feature_covariance the untied mean "
                        f"force needs the words ΣM_lB_k (M ≥ 3)")
    P = potential or Potential(spec)
    alphabet = alphabet_of(spec)
    words = [()] + alphabet.words(M)
    word_index = {w: i for i, w in enumerate(words)}

    def index(word):
        return word_index[alphabet.canonical(tuple(word))]
    mean_indices = [k for k, ix in enumerate(spec.indices) if not ix.centred]       # the O(1/√d) means
    mean_state = {k: len(words) + j for j, k in enumerate(mean_indices)}
    trainable = [k for k in mean_indices if spec.indices[k].trainable]
    rules = untied_coefficient_rules(spec, index, trainable)
    cidx = {c.name: i for i, c in enumerate(rules)}
    acc = apply_flows(words, alphabet, untied_letter_flows(spec, cidx), M)
    for key, val in noise_terms(spec, words, alphabet, cidx, M, metric_letters(spec)).items():
        acc[key] += val
    nu = nu if nu is not None else nu_expectations(P)
    theta_words = []
    for name in P.names:
        kind, *pair = name.split("_")
        ks = [spec.names.index(n) for n in pair]
        if kind == "m":
            theta_words.append(mean_state[ks[0]])
            continue
        a, b = ks
        second = "T" if kind == "q1" else "S"
        theta_words.append(index(((a, "S"), (b, "S") if alphabet.symmetric[b] else (b, second))))
    cols = untied_columns(spec, index, mean_state, {n: i for i, n in enumerate(P.names)}, alphabet.symmetric)
    return System(DESCRIPTION, spec, M, alphabet, words, rules, pack_terms(acc), theta_words, P, tuple(cols),
                  mean_indices=mean_indices, nu=nu)
