"""Tests of symattn.symbolic.freeprob (docs/theory.md §7): exact free moments and sampled moments.

Tolerance of the sampling comparisons.  For a word w of length |w| the sampled Tr(w)/d deviates
from its d → ∞ limit by an O(1/d) bias plus O(1/d) fluctuations whose size is set by the
"norm" of the word, scale(w) = sqrt(φ(w w^T)) (≥ |φ(w)|; e.g. 456 for S^6 with κ = σ = 1, while
φ(S^6) = 132), times a constant growing with |w|.  We test

    |sample − exact| ≤ C · |w| · scale(w) / d,   C = 6.

Justification (measured, seeds 0 and 1, d = 1000 and 2000, all canonical words up to length 6 of
cases (a), (b) and all up to length 4 plus 20 random longer ones of case (c)): the largest
normalised deviation d·|sample − exact| / (|w| scale(w)) was 2.6 (single-letter GOE / Wishart
traces), typically 0.8–2.2, and it does not grow with d (≈ 2.2 at d = 1000, 0.84–2.6 at d = 2000).
A wrong law shows up orders of magnitude above this (e.g. κ² instead of κ in Tr(M M^T)/d is off
by 0.16 at κ = 1/2 against a tolerance ≈ 0.005).
"""
from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from functools import cache

import numpy as np
import pytest
import sympy as sp

from symattn.symbolic.freeprob import (
    GOE,
    Identity,
    Untied,
    Wishart,
    canonical_word,
    canonical_words,
    clear_cache,
    free_moment,
    free_moment_value,
    free_moments,
    free_moments_float,
    letter_matrix,
    letters_of,
    sample_matrices,
    sample_moment,
    sample_moments,
    transpose_word,
)

R = sp.Rational
C_TOL = 6.0


def S(k, n=1):
    return ((k, "S"),) * n


# ---------------------------------------------------------------------------------------------
# independent reference: free cumulants over non-crossing partitions (symmetric laws only)
# ---------------------------------------------------------------------------------------------

def _free_cumulant(law, s):
    if isinstance(law, Wishart):
        return sp.sympify(law.kappa) * sp.sympify(law.sigma) ** (2 * s)
    if isinstance(law, GOE):
        return sp.sympify(law.sigma) ** 2 if s == 2 else sp.Integer(0)
    if isinstance(law, Identity):
        return sp.sympify(law.scale) if s == 1 else sp.Integer(0)
    raise TypeError(law)


def cumulant_moment(w, laws):
    """φ(a_1..a_n) = Σ_{block {0=i_1<..<i_s} of one index} κ_s Π φ(gaps) (first-block recursion)."""
    ks = tuple(k for k, _ in w)

    @cache
    def phi(t):
        if not t:
            return sp.Integer(1)
        n = len(t)
        k0 = t[0]
        tot = sp.Integer(0)
        same = [i for i in range(1, n) if t[i] == k0]
        for r in range(len(same) + 1):
            for rest in itertools.combinations(same, r):
                block = (0,) + rest
                c = _free_cumulant(laws[k0], len(block))
                if c == 0:
                    continue
                term = c
                ends = block[1:] + (n,)
                for a, b in zip(block, ends):
                    term *= phi(t[a + 1:b])
                tot += term
        return sp.expand(tot)

    return phi(ks)


def narayana(n, j):
    return math.comb(n, j) * math.comb(n, j - 1) // n


# ---------------------------------------------------------------------------------------------
# exact identities
# ---------------------------------------------------------------------------------------------

def test_empty_word_and_types():
    laws = [Wishart(R(1, 2), 1)]
    assert free_moment((), laws) == 1
    v = free_moment(S(0, 2), laws)
    assert isinstance(v, sp.Rational) and v == R(3, 4)          # σ⁴κ(1+κ)
    assert free_moment(S(0, 2), [Wishart(Fraction(1, 2), 1)]) == R(3, 4)
    vf = free_moment(S(0, 2), [Wishart(0.5, 1.0)])
    assert isinstance(vf, sp.Float) and abs(float(vf) - 0.75) < 1e-15
    k, s = sp.symbols("kappa sigma", positive=True)
    vs = free_moment(S(0, 2), [Wishart(k, s)])
    assert sp.expand(vs - s**4 * k * (1 + k)) == 0


def test_narayana_wishart_exact():
    kappa, sigma = R(1, 3), R(3, 2)
    laws = [Wishart(kappa, sigma)]
    ks, ss = sp.symbols("kappa sigma", positive=True)
    for n in range(1, 9):
        expected = sigma ** (2 * n) * sum(narayana(n, j) * kappa**j for j in range(1, n + 1))
        assert free_moment(S(0, n), laws) == expected
        sym = free_moment(S(0, n), [Wishart(ks, ss)])
        ref = ss ** (2 * n) * sum(narayana(n, j) * ks**j for j in range(1, n + 1))
        assert sp.expand(sym - ref) == 0


def test_goe_catalan_and_identity():
    sigma = R(2, 3)
    laws = [GOE(sigma), Identity(R(7, 10))]
    for n in range(1, 11):
        expected = 0 if n % 2 else sp.catalan(n // 2) * sigma**n
        assert free_moment(S(0, n), laws) == expected
    assert free_moment(S(0, 2), [GOE(0)]) == 0
    # identity: pure powers and scaling of any word
    for n in range(5):
        assert free_moment(S(1, n), laws) == R(7, 10) ** n
    w = S(0, 2) + S(1) + S(0, 2)
    assert free_moment(w, laws) == R(7, 10) * free_moment(S(0, 4), laws)


def test_freeness_product_and_abab():
    k1, k2, s1, s2, g = sp.symbols("k1 k2 s1 s2 g", positive=True)
    pairs = [
        [Wishart(k1, s1), Wishart(k2, s2)],
        [Wishart(k1, s1), GOE(g)],
        [Wishart(R(1, 2), 1), Identity(R(3, 5))],
    ]
    for laws in pairs:
        a, b = (0, "S"), (1, "S")
        phi = lambda *w: free_moment(w, laws)
        assert sp.expand(phi(a, b) - phi(a) * phi(b)) == 0
        rhs = phi(a, a) * phi(b) ** 2 + phi(a) ** 2 * phi(b, b) - phi(a) ** 2 * phi(b) ** 2
        assert sp.expand(phi(a, b, a, b) - rhs) == 0
    # the same with untied letters a = A_0, b = B_1 (both symmetric, free)
    laws = [Untied(k1, s1, s2), Untied(k2, g, s1)]
    a, b = (0, "A"), (1, "B")
    phi = lambda *w: free_moment(w, laws)
    assert sp.expand(phi(a, b) - phi(a) * phi(b)) == 0
    rhs = phi(a, a) * phi(b) ** 2 + phi(a) ** 2 * phi(b, b) - phi(a) ** 2 * phi(b) ** 2
    assert sp.expand(phi(a, b, a, b) - rhs) == 0


def test_against_free_cumulants():
    """Planar-pairing engine == moment–cumulant formula on all words up to length 7."""
    laws = [Wishart(R(1, 2), R(3, 2)), GOE(R(2, 3)), Identity(R(5, 7)), Wishart(2, R(1, 2))]
    letters = letters_of(laws)
    for n in range(1, 6):
        for w in itertools.product(letters, repeat=n):
            assert free_moment(w, laws) == cumulant_moment(w, laws), w
    rng = random.Random(3)
    for _ in range(60):
        w = tuple(rng.choice(letters) for _ in range(7))
        assert free_moment(w, laws) == cumulant_moment(w, laws), w


def test_untied_exact():
    kap, su, sv = sp.symbols("kappa sigma_u sigma_v", positive=True)
    laws = [Untied(kap, su, sv)]
    M, MT, A, B = (0, "S"), (0, "T"), (0, "A"), (0, "B")
    phi = lambda *w: sp.expand(free_moment(w, laws))
    assert phi(M) == 0 and phi(MT) == 0
    assert phi(A) == kap * su**2
    assert phi(B) == kap * sv**2
    # Tr(M M^T)/d = Tr(U V^T V U^T)/d: V^T V → σ_V² I_{κd}, then Tr(U U^T)/d = κσ_U²  (not κ²)
    assert phi(M, MT) == kap * su**2 * sv**2
    assert phi(MT, M) == kap * su**2 * sv**2
    assert phi(M, M) == 0
    assert phi(A, A) == sp.expand(kap * (1 + kap) * su**4)
    assert phi(A, B) == sp.expand(kap**2 * su**2 * sv**2)   # U^T V: no planar pairing between A and B
    assert phi(M, A) == 0
    # M M^T M M^T: Tr((U^TU)(V^TV)(U^TU)(V^TV)); at κ = 1 this is φ(abab) of two free
    # Wisharts = 2 + 2 − 1 = 3; in general κ(1 + 2κ)σ_U⁴σ_V⁴ (checked by sampling below)
    assert phi(M, MT, M, MT) == sp.expand(kap * su**4 * sv**4 * (1 + 2 * kap))
    # exact rationals with σ_U ≠ σ_V
    lr = [Untied(R(1, 2), 1, R(4, 5))]
    assert free_moment(((0, "S"), (0, "T")), lr) == R(1, 2) * R(16, 25)
    assert free_moment(((0, "B"), (0, "B")), lr) == R(16, 25) ** 2 * R(3, 4)


def test_untied_sampling_mmt():
    """Sampled Tr(M M^T)/d agrees with κσ_U²σ_V² and rules out κ²σ_U²σ_V²."""
    laws = [Untied(0.5, 1.0, 0.8)]
    F = sample_matrices(laws, 800, np.random.default_rng(5))
    v = sample_moment(((0, "S"), (0, "T")), F)
    assert abs(v - 0.5 * 0.64) < 0.02
    assert abs(v - 0.25 * 0.64) > 0.1
    v4 = sample_moment(((0, "S"), (0, "T")) * 2, F)
    assert abs(v4 - 0.5 * 2 * 0.64**2) < 0.03


def test_invalid_letters():
    with pytest.raises(ValueError):
        free_moment(((0, "A"),), [Wishart(1, 1)])
    with pytest.raises(ValueError):
        free_moment(((1, "S"),), [Wishart(1, 1)])
    with pytest.raises(ValueError):
        free_moment(((0, "X"),), [Untied(1, 1, 1)])


def test_canonical_words_invariance():
    laws = [Untied(R(1, 2), 1, R(4, 5)), Wishart(R(1, 3), 1)]
    rng = random.Random(0)
    letters = letters_of(laws)
    for _ in range(40):
        w = tuple(rng.choice(letters) for _ in range(rng.randint(1, 6)))
        c = canonical_word(w, laws)
        v = free_moment(w, laws)
        assert free_moment(c, laws) == v
        assert free_moment(transpose_word(w, laws), laws) == v
        assert free_moment(w[2:] + w[:2], laws) == v
        assert canonical_word(transpose_word(w, laws), laws) == c
    ws = canonical_words(laws, 4)
    assert len(set(ws)) == len(ws)
    assert all(canonical_word(w, laws) == w for w in ws)


def test_free_moments_float_consistent():
    laws = [Wishart(R(1, 2), 1), GOE(R(1, 2)), Untied(R(1, 2), 1, R(4, 5))]
    ws = canonical_words(laws, 3)
    ex = free_moments(ws, laws)
    fl = free_moments_float(ws, laws)
    assert fl.dtype == np.float64
    assert np.allclose(fl, [float(ex[w]) for w in ws], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("laws", [
    [Wishart(R(1, 2), 1), GOE(R(1, 2)), Untied(R(1, 2), 1, R(4, 5))],          # exact rationals
    [Wishart(0.37, 0.9), GOE(0.61), Untied(0.45, 1.3, 0.7)],                    # floats
    [Wishart(R(1, 3), 0.9), Identity(), Untied(0.45, R(1, 2), 1)],              # both
])
def test_free_moment_value_is_the_exact_moment_rounded(laws):
    """``free_moment_value`` (no SymPy: a warm run's initial state) is ``float(free_moment)`` bit for bit — the
    exact rational rounded once for rational parameters, the same float sum otherwise."""
    ws = canonical_words(laws, 4)
    assert len(ws) > 20
    for w in ws:
        assert free_moment_value(w, laws) == float(free_moment(w, laws)), w


def test_work_is_polynomial_in_the_word_length(monkeypatch):
    """All canonical words up to length 8 over 3 indices, and length 10 over 2: the memoised planar recursion
    makes at most Σ_w |w|² calls of ``_planar`` (each word's contiguous cyclic sub-sequences, each solved once),
    where the plain recursion over non-crossing pairings grows like the Catalan numbers. Counted, not timed
    (the timing is in benchmarks/bench_freeprob.py)."""
    from symattn.symbolic import freeprob
    calls = [0]
    planar = freeprob._planar

    def counted(seq):
        calls[0] += 1
        return planar(seq)
    monkeypatch.setattr(freeprob, "_planar", counted)
    for laws, M in (([Wishart(1, 1), Wishart(R(1, 2), 1), GOE(R(1, 2))], 8), ([Wishart(1, 1), Wishart(R(1, 2), 1)], 10)):
        clear_cache()
        calls[0] = 0
        words = canonical_words(laws, M)
        values = free_moments(words, laws)
        assert len(values) == len(words)
        assert calls[0] <= sum(len(w) ** 2 for w in words), (M, calls[0])


# ---------------------------------------------------------------------------------------------
# sampling
# ---------------------------------------------------------------------------------------------

def test_sample_matrices_shapes_and_normalisation():
    laws = [Wishart(0.5, 1.0), Untied(0.25, 1.0, 2.0), GOE(0.5), Identity(0.7)]
    d = 400
    F = sample_matrices(laws, d, np.random.default_rng(0))
    assert F[0]["W"].shape == (d, 200)
    assert F[1]["U"].shape == (d, 100) and F[1]["V"].shape == (d, 100)
    assert F[2]["S"].shape == (d, d) and np.array_equal(F[2]["S"], F[2]["S"].T)
    assert np.array_equal(F[3]["S"], 0.7 * np.eye(d))
    assert abs(np.trace(F[2]["S"] @ F[2]["S"]) / d - 0.25) < 0.02
    M = letter_matrix(F[1], "S")
    assert np.allclose(letter_matrix(F[1], "T"), M.T)
    assert np.allclose(letter_matrix(F[1], "A"), F[1]["U"] @ F[1]["U"].T)
    assert np.allclose(letter_matrix(F[1], "B"), F[1]["V"] @ F[1]["V"].T)
    # direct evaluation of a few words
    ws = [(), ((0, "S"),), ((1, "S"), (2, "S"), (1, "T")), ((3, "S"), (1, "A"), (0, "S"), (3, "S")),
          ((1, "S"), (1, "S"), (0, "S"), (2, "S"), (1, "B"))]
    got = sample_moments(ws, F)
    for w, g in zip(ws, got):
        P = np.eye(d)
        for k, op in w:
            P = P @ letter_matrix(F[k], op)
        assert abs(g - np.trace(P) / d) < 1e-10 * (1 + abs(g))
        assert abs(sample_moment(w, F) - g) < 1e-12 * (1 + abs(g))


def _check_agreement(laws, words, d, seed, label):
    ex = free_moments_float(words, laws)
    scale = np.sqrt(free_moments_float([w + transpose_word(w) for w in words], laws))
    scale = np.maximum(scale, 1e-12)
    lens = np.array([max(len(w), 1) for w in words])
    got = sample_moments(words, sample_matrices(laws, d, np.random.default_rng(seed)))
    dev = np.abs(got - ex)
    norm = dev * d / (lens * scale)
    i = int(np.argmax(norm))
    print(f"\n[{label}] d={d}: {len(words)} words, max |dev| = {dev.max():.4g}, "
          f"max d|dev|/(|w| scale) = {norm.max():.3f} at {words[i]}")
    bad = [(words[j], got[j], ex[j]) for j in np.nonzero(norm > C_TOL)[0]]
    assert not bad, bad[:5]
    return ex, got


CASE_A = [Wishart(1.0, 1.0), Wishart(0.5, 1.0)]
CASE_B = [Wishart(1.0, 1.0), Identity(0.7), GOE(0.5)]
CASE_C = [Untied(1.0, 1.0, 0.8), Untied(0.5, 1.0, 1.0)]


def test_sampling_case_a_wishart_student_teacher():
    _check_agreement(CASE_A, canonical_words(CASE_A, 6, 1), 2000, 0, "a")


def test_sampling_case_b_wishart_identity_goe():
    _check_agreement(CASE_B, canonical_words(CASE_B, 6, 1), 2000, 0, "b")


def test_sampling_case_c_untied_d1000_all_up_to_4():
    """Case (c) at d = 1000: all 704 canonical words up to length 4 (half-products of length ≤ 2)."""
    _check_agreement(CASE_C, canonical_words(CASE_C, 4, 1), 1000, 0, "c, d=1000")


def test_sampling_case_c_untied_d2000_subset():
    """Case (c) at d = 2000: all 30 canonical words up to length 2, 10 random ones of length 3
    and 4 of length 4..6.

    All 26 396 canonical words up to length 6 would need thousands of d = 2000 products, hence
    the subset (the complete set up to length 4 is checked at d = 1000 above).
    """
    ws = canonical_words(CASE_C, 2, 1)
    rng = random.Random(1)
    ws += rng.sample(canonical_words(CASE_C, 3, 3), 10)
    ws += rng.sample(canonical_words(CASE_C, 6, 4), 4)
    _check_agreement(CASE_C, ws, 2000, 0, "c, d=2000")


def test_deviation_scales_like_one_over_d():
    """RMS over words (≤ 4, case (a)) and 2 draws of (sample − exact)/(|w| scale) at d = 1000, 2000.

    Single draws are noisy (ratio of max deviations between 0.4 and 8 over seeds), so we
    average over words and two draws and accept a ratio in [1.2, 4.5] (1/d gives 2, 1/√d 1.4).
    """
    laws = CASE_A
    words = canonical_words(laws, 4, 1)
    ex = free_moments_float(words, laws)
    scale = np.sqrt(free_moments_float([w + transpose_word(w) for w in words], laws))
    lens = np.array([len(w) for w in words])
    rms, mx = {}, {}
    for d in (1000, 2000):
        devs = []
        for seed in (0, 1):
            got = sample_moments(words, sample_matrices(laws, d, np.random.default_rng([seed, d])))
            devs.append(got - ex)
        devs = np.array(devs)
        mx[d] = np.abs(devs).max()
        rms[d] = np.sqrt(np.mean((devs / (lens * scale)) ** 2))
    print(f"\nmax |dev|: d=1000 {mx[1000]:.4g}, d=2000 {mx[2000]:.4g}; "
          f"d·rms: {1000 * rms[1000]:.3f}, {2000 * rms[2000]:.3f}; ratio {rms[1000] / rms[2000]:.2f}")
    assert 1.2 < rms[1000] / rms[2000] < 4.5
