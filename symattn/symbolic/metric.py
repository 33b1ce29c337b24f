"""Large-d trace moments of words in whitened matrices and a feature covariance Σ (docs/theory.md §1, §7).

With a feature covariance the hierarchy's letters are the whitened S̃_k = Σ^{½}S_kΣ^{½} and Σ itself
(``kinds.alphabet_of``: Σ is the letter (K, "S") after the K indices). At initialisation the S_k are
independent rotation-invariant matrices, hence free from each other and from the deterministic Σ, so
a whitened word is a word in the free pair ({S_k}, Σ): moving the halves Σ^{½} together,

    φ(S̃_{k1} Σ^{n1} S̃_{k2} Σ^{n2} ⋯) = φ(a_1 b_1 a_2 b_2 ⋯ a_r b_r),   a_i = S_{ki},  b_i = Σ^{1 + n_i},

and for {a_i} free from {b_i} (Nica–Speicher, Lecture 14)

    φ(a_1 b_1 ⋯ a_r b_r) = Σ_{π ∈ NC(r)} κ_π[a_1, …, a_r] · Π_{V ∈ K(π)} φ(Σ^{Σ_{i∈V} m_i}),

with K(π) the Kreweras complement (b_i sits between a_i and a_{i+1}) and κ_π the product over the blocks
of π of the multivariate free cumulants of the a's — zero for a block mixing two indices (free), and
within one index computed from its own moments (``freeprob.free_moment``) by the moment–cumulant
recursion κ_n = φ − Σ_{π ≠ 1_n} κ_π. A word without S letters is φ(Σ^n). The moments of Σ are its limit
law's (``FeatureCovariance.moment``): a power law's φ(Σ^n) is infinite for n ≥ 1/a, so a hierarchy that
reaches such a word is refused (``require_moments``). Checked against the Wick engine with Σ itself a
Wishart law and against sampled matrices (``tests/test_features.py``).
"""
from __future__ import annotations

import math
from functools import cache
from itertools import product


@cache
def noncrossing(n: int) -> tuple:
    """All non-crossing partitions of {0, …, n−1}, each a tuple of sorted blocks."""
    return tuple(_noncrossing(tuple(range(n))))


def _noncrossing(el: tuple):
    if not el:
        yield ()
        return
    first, rest = el[0], el[1:]
    m = len(rest)
    for mask in range(1 << m):
        chosen = [i for i in range(m) if mask >> i & 1]
        block = (first,) + tuple(rest[i] for i in chosen)
        bounds = [-1] + chosen + [m]
        gaps = [rest[bounds[i] + 1:bounds[i + 1]] for i in range(len(bounds) - 1)]
        for parts in product(*[tuple(_noncrossing(g)) for g in gaps]):
            yield (block,) + sum(parts, ())


@cache
def kreweras(pi: tuple, n: int) -> tuple:
    """Blocks of the Kreweras complement K(π) = π⁻¹γ (γ: i ↦ i + 1 mod n; block i of K(π) collects the
    b_i that sit between a_i and a_{i+1})."""
    nxt = [0] * n
    for block in pi:
        for j, i in enumerate(block):
            nxt[i] = block[(j + 1) % len(block)]
    inv = [0] * n
    for i, j in enumerate(nxt):
        inv[j] = i
    seen, out = set(), []
    for i in range(n):
        if i in seen:
            continue
        cycle, j = [], i
        while j not in seen:
            seen.add(j)
            cycle.append(j)
            j = inv[(j + 1) % n]
        out.append(tuple(cycle))
    return tuple(out)


class WhitenedMoments:
    """φ of whitened words for the initial laws ``laws`` (K indices, letter (K, "S") = Σ) and the moments
    ``sigma_moment(n)`` = φ(Σ^n) of Σ's law (module docstring)."""

    def __init__(self, laws, sigma_moment):
        self.laws = list(laws)
        self.K = len(self.laws)
        self.sigma_moment = sigma_moment
        self._cumulant: dict = {}
        self._moment: dict = {}

    def family_moment(self, word: tuple) -> float:
        """φ of a word in the letters of one index (the Wick engine of ``freeprob``)."""
        if word not in self._moment:
            from .freeprob import free_moment
            self._moment[word] = float(free_moment(word, self.laws))
        return self._moment[word]

    def cumulant(self, letters: tuple) -> float:
        """The multivariate free cumulant κ_n(a_1, …, a_n) of letters of one index."""
        if letters not in self._cumulant:
            n = len(letters)
            value = self.family_moment(letters)
            for pi in noncrossing(n):
                if len(pi) > 1:
                    value -= math.prod(self.cumulant(tuple(letters[i] for i in V)) for V in pi)
            self._cumulant[letters] = value
        return self._cumulant[letters]

    def __call__(self, word) -> float:
        """φ(word) (the empty word is 1)."""
        word = tuple(word)
        if not word:
            return 1.0
        at = [i for i, (k, _) in enumerate(word) if k < self.K]
        if not at:
            return self.sigma_moment(len(word))
        w = word[at[0]:] + word[:at[0]]
        a, m = [], []
        for letter in w:
            if letter[0] < self.K:
                a.append(letter)
                m.append(1)                 # Σ^{½} from either neighbour
            else:
                m[-1] += 1
        n, total = len(a), 0.0
        for pi in noncrossing(n):
            if any(len({a[i][0] for i in V}) > 1 for V in pi):
                continue                    # mixed cumulants of free indices vanish
            c = math.prod(self.cumulant(tuple(a[i] for i in V)) for V in pi)
            if c == 0.0:
                continue
            total += c * math.prod(self.sigma_moment(sum(m[i] for i in V)) for V in kreweras(pi, n))
        return total

