"""Second-order (Itô) SGD-noise terms of the moment hierarchies at noise ratio ε = αd/B (docs/theory.md §7).

Per step a trainable letter moves by its drift plus a fluctuation linear in δ_k = Ĥ_k − E Ĥ_k,
Ĥ_k the batch-mean gradient ∂𝓛/∂S_k (symmetrised for tied and direct indices):

    tied    S' = (I − 2αĤ)S(I − 2αĤ)       forms −2α(δS + Sδ),     second order 4α² δSδ
    direct  S' = S − αĤ                     form  −αδ
    untied  U' = U − αĤV, V' = V − αĤᵀU    M: −α(δB + Aδ), Mᵀ: −α(Bδᵀ + δᵀA),
                                            A: −α(δMᵀ + Mδᵀ), B: −α(δᵀM + Mᵀδ);
                                            second order δMᵀδ, δᵀMδᵀ, δBδᵀ, δᵀAδ.

With e^k = ∂𝓛/∂G_{··k} of one sample (s^k = sym e^k for a symmetric index), the per-sample
H_k = Σ_ij e^k_ij x_i x_jᵀ/√d gives, at leading order in 1/d,

    E Tr(X δ_k Y δ_l)/d  = (ν1_kl/B) tr X tr Y,    ν1_kl = E tr(e^k C e^l C),
    E Tr(X δ_k Y δ_lᵀ)/d = (ν2_kl/B) tr X tr Y,    ν2_kl = E tr(e^k C e^lᵀ C),
    E[δ_k Y δ_k] = (ν1_kk/B) tr(Y) I,   E[δ_k Y δ_kᵀ] = E[δ_kᵀ Y δ_k] = (ν2_kk/B) tr(Y) I.

For a pair with a symmetric member ν1 = ν2 =: ν (one constant, named ``nu``). With d/α steps per
unit package time these become, on dμ_w/dt,
  * pair contractions: letters i < j of w = a X₁ b X₂ (cyclically) with forms (L_a, δ_a, R_a, c_a),
    (L_b, δ_b, R_b, c_b):  ε ν c_a c_b μ(R_a X₁ L_b) μ(R_b X₂ L_a) — the word splits in two;
  * the second order of one letter (the "Itô drift"), e.g. tied 4 ε ν_kk μ(S_k) μ(w ∖ i).
With a feature covariance the letters are the whitened ones and every δ is flanked by the preconditioner
Σ as the kind's update says (tied: −2α(ΣδS̃ + S̃δΣ), second order 4α²ΣδS̃δΣ → 4εν μ(S̃) Σ² in place of the
letter; direct: −αΣδΣ; docs/theory.md §1).
Everything is zero-truncated at M like the drift. Checked against SGD (``tests/test_noise.py``).
"""
from __future__ import annotations

from collections import defaultdict

import sympy as sp

from ..symbolic.gaussian import rational_matrix
from ..symbolic.loss import g_symbol
from .potential import GaussianExpectation
from .split import nu_name


def nu_names(spec) -> list:
    """All noise coefficients of a spec's trainable pairs."""
    st, out = spec.students, []
    for x, k in enumerate(st):
        for l in st[x:]:
            names = [nu_name(spec, k, l, "dd"), nu_name(spec, k, l, "dt")]
            out += list(dict.fromkeys(names))
    return out


def _terms(expr):
    return sp.Add.make_args(sp.expand(expr, deep=False))


def nu_expectations(potential, tol: float = 2e-2) -> dict:
    """ν (or ν1, ν2) of every trainable pair as GaussianExpectation objects, keyed by name.

    ν enters at O(ε) next to O(1/d) finite-size effects, so a non-polynomial ν is calibrated to a
    relative tolerance of 2e-2 only (value only, no derivatives): the error it leaves on the
    drift is ≤ 2% of an O(ε) term. Polynomial losses give ν in closed form.
    """
    spec, loss = potential.spec, potential.loss
    L, C = spec.tokens, rational_matrix(spec.covariance)
    mat = {}
    mine = [g_symbol(i, j, k) for k in spec.students for i in range(L) for j in range(L)]
    grad = dict(zip(mine, loss.pathwise_gradient(mine)))
    for k in spec.students:
        e = [[grad[g_symbol(i, j, k)] for j in range(L)] for i in range(L)]
        if spec.indices[k].symmetric:
            e = [[(e[i][j] + e[j][i]) / 2 for j in range(L)] for i in range(L)]
        mat[k] = e
    out = {}
    for x, k in enumerate(spec.students):
        for l in spec.students[x:]:
            for kinds in ("dd", "dt"):
                name = nu_name(spec, k, l, kinds)
                if name in out:
                    continue
                el = mat[l] if kinds == "dd" else [list(r) for r in zip(*mat[l])]
                terms = []
                for i in range(L):
                    for j in range(L):
                        for i2 in range(L):
                            for j2 in range(L):
                                c = C[j][i2] * C[j2][i]          # tr(e^k C e^l C)
                                if c == 0:
                                    continue
                                for t1 in _terms(mat[k][i][j]):
                                    for t2 in _terms(el[i2][j2]):
                                        terms.append(c * t1 * t2)
                out[name] = GaussianExpectation(spec, terms, tol=tol, gauss=potential.gauss, gradient=False,
                                                relative=True, start_order=9, max_nodes=200_000)
    return out


def noise_terms(spec, words, alphabet, coef_index, truncation, metric: tuple = ()) -> dict:
    """Sparse quadratic terms (row, c1, c2, key) -> value of the ε-corrections (module docstring);
    ``metric`` = (Σ,) for whitened letters (each kind's forms then carry the preconditioner)."""
    index = {w: n for n, w in enumerate(words)}
    kind = {k: spec.indices[k].kind for k in spec.students}
    acc = defaultdict(float)

    def col(word):
        if len(word) > truncation:
            return None
        return index[alphabet.canonical(tuple(word))]

    def add(row, c1, c2, key, val):
        if c1 is not None and c2 is not None:
            a, b = sorted((c1, c2))
            acc[(row, a, b, coef_index[key])] += val

    for row, w in enumerate(words):
        pos = [i for i, (k, op) in enumerate(w) if k in kind]
        for i in pos:                                   # second order of one letter
            k = w[i][0]
            for c, kinds, middle, outer in kind[k].second_order(w[i], metric):
                add(row, col(w[:i] + outer + w[i + 1:]), col(middle), nu_name(spec, k, k, kinds), c)
        for x, i in enumerate(pos):                      # pair contractions
            for j in pos[x + 1:]:
                k, l = w[i][0], w[j][0]
                X1, X2 = w[i + 1:j], w[j + 1:] + w[:i]
                for La, ta, Ra, ca in kind[k].fluctuation_forms(w[i], metric):
                    for Lb, tb, Rb, cb in kind[l].fluctuation_forms(w[j], metric):
                        add(row, col(Ra + X1 + Lb), col(Rb + X2 + La), nu_name(spec, k, l, ta + tb), ca * cb)
    return acc
