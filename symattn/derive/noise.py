"""Second-order (Itô) SGD-noise terms of the moment hierarchies at noise ratio ε = αd/B (THEORY.md §7).

Per step a trainable letter moves by its drift plus a fluctuation linear in δ_k = Ĝ_k − E Ĝ_k,
where Ĝ_k is the batch-mean symmetrised gradient ∂𝓛/∂S_k: tied S' = (I − 2αĜ)S(I − 2αĜ), so
the fluctuation forms are −2α(δS + Sδ); direct S' = S − αĜ, form −αδ. With e = ∂𝓛/∂G of
one sample and s^k = sym e_{··k}, the per-sample G_k = Σ_ij s^k_ij x_i x_jᵀ/√d gives, at leading
order in 1/d,

    E Tr(X δ_k Y δ_l)/d = (ν_kl/B) tr X tr Y,      ν_kl = E tr_L(s^k C s^l C),
    E[δ_k S δ_k] = (ν_kk/B) tr(S) I.

With d/α steps per unit package time these become, on dμ_w/dt,
  * pair contractions: for letters i < j of w = a X₁ b X₂ (cyclically) with forms
    (L_a, R_a, c_a), (L_b, R_b, c_b):  ε ν_kl c_a c_b μ(R_a X₁ L_b) μ(R_b X₂ L_a)  — a word splits in two;
  * the Itô drift of a tied letter (4α² ĜSĜ):  4 ε ν_kk μ(S_k) μ(w ∖ i).
Everything is zero-truncated at M like the drift.
"""
from __future__ import annotations

from collections import defaultdict

import sympy as sp

from ..symbolic.gaussian import rational_matrix
from ..symbolic.loss import g_symbol
from .potential import GaussianExpectation


def fluctuation_forms(par: str, k: int) -> list:
    """(left letters, right letters, coefficient/α) of the first-order fluctuation of S_k."""
    S = (k, "S")
    if par == "tied":
        return [((), (S,), -2.0), ((S,), (), -2.0)]
    if par == "direct":
        return [((), (), -1.0)]
    raise NotImplementedError(f"noise terms of a {par} index")


def nu_name(k: int, l: int) -> str:
    a, b = sorted((k, l))
    return f"nu_{a}_{b}"


def _terms(expr):
    return sp.Add.make_args(sp.expand(expr, deep=False))


def nu_expectations(potential, tol: float = 2e-2) -> dict:
    """ν_kl = E tr(s^k C s^l C) for trainable k ≤ l, as GaussianExpectation objects (THEORY §7).

    ν enters at O(ε) next to O(1/d) finite-size effects (≈ 13/d, §7), so a non-polynomial ν is
    calibrated to a relative tolerance of 2e-2 only (value only, no derivatives): the error it
    leaves on the drift is ≤ 2% of an O(ε) term. Polynomial losses give ν in closed form.
    """
    spec, loss = potential.spec, potential.loss
    L, C = spec.tokens, rational_matrix(spec.covariance)
    sym = {}
    for k in spec.students:
        e = [[sp.diff(loss.expr, g_symbol(i, j, k)) for j in range(L)] for i in range(L)]
        sym[k] = [[(e[i][j] + e[j][i]) / 2 for j in range(L)] for i in range(L)]
    out = {}
    for a, k in enumerate(spec.students):
        for l in spec.students[a:]:
            terms = []
            for i in range(L):
                for j in range(L):
                    for i2 in range(L):
                        for j2 in range(L):
                            c = C[j][i2] * C[j2][i]
                            if c == 0:
                                continue
                            for t1 in _terms(sym[k][i][j]):
                                for t2 in _terms(sym[l][i2][j2]):
                                    terms.append(c * t1 * t2)
            out[(k, l)] = GaussianExpectation(spec, terms, tol=tol, gauss=potential.gauss, gradient=False,
                                              relative=True, start_order=9, max_nodes=200_000)
    return out


def noise_terms(spec, words, alphabet, coef_index, truncation) -> dict:
    """Sparse quadratic terms (row, c1, c2, key) -> value of the ε-corrections (module docstring)."""
    index = {w: n for n, w in enumerate(words)}
    trainable = {k: spec.indices[k].parameterization for k in spec.students}
    acc = defaultdict(float)

    def col(word):
        if len(word) > truncation:
            return None
        return index[alphabet.canonical(tuple(word))]

    for row, w in enumerate(words):
        pos = [i for i, (k, op) in enumerate(w) if k in trainable]
        for i in pos:                                   # Itô drift of a tied letter
            k = w[i][0]
            if trainable[k] == "tied":
                rest = col(w[:i] + w[i + 1:])
                if rest is not None:
                    a, b = sorted((rest, col(((k, "S"),))))
                    acc[(row, a, b, coef_index[nu_name(k, k)])] += 4.0
        for x, i in enumerate(pos):                      # pair contractions
            for j in pos[x + 1:]:
                k, l = w[i][0], w[j][0]
                X1, X2 = w[i + 1:j], w[j + 1:] + w[:i]
                for La, Ra, ca in fluctuation_forms(trainable[k], k):
                    for Lb, Rb, cb in fluctuation_forms(trainable[l], l):
                        c1, c2 = col(Ra + X1 + Lb), col(Rb + X2 + La)
                        if c1 is None or c2 is None:
                            continue
                        a, b = sorted((c1, c2))
                        acc[(row, a, b, coef_index[nu_name(k, l)])] += ca * cb
    return acc
