"""Word algebra for normalised trace moments μ_w = Tr(X_1 ⋯ X_n)/d (docs/theory.md §5, §6).

A letter is ``(k, op)``: index k (0-based, spec order) and op ∈ {'S', 'T', 'A', 'B'} — the matrix
S_k (= M_k = U_k V_kᵀ when untied), its transpose, A_k = U_k U_kᵀ, B_k = V_k V_kᵀ. For a
symmetric index only 'S' occurs. A word is a tuple of letters. Since the trace is cyclic and
Tr X = Tr Xᵀ, μ is invariant under rotation and under reversal with every letter transposed;
:func:`canonical` picks the smallest representative of that class.
"""
from __future__ import annotations

from functools import cache
from itertools import product

_TRANSPOSE = {"S": "T", "T": "S", "A": "A", "B": "B"}
_OP_ORDER = {"S": 0, "T": 1, "A": 2, "B": 3}


def transpose_letter(letter, symmetric: bool):
    k, op = letter
    return letter if symmetric else (k, _TRANSPOSE[op])


def _key(word):
    return tuple((k, _OP_ORDER[op]) for k, op in word)


class Alphabet:
    """The letters of a model: symmetric indices contribute S_k, untied ones S_k, S_kᵀ, A_k, B_k, a
    general matrix S_k and S_kᵀ (each index's kind says which: ``Kind.letters``)."""

    def __init__(self, symmetric: list, ops: list | None = None):
        """``ops[k]``: the letters of index k (default "S" when symmetric, else "STAB")."""
        self.symmetric = list(symmetric)
        self.ops = list(ops) if ops is not None else ["S" if s else "STAB" for s in self.symmetric]

    def letters(self, ks=None) -> list:
        out = []
        for k in (range(len(self.symmetric)) if ks is None else ks):
            out += [(k, op) for op in self.ops[k]]
        return out

    def transpose(self, word) -> tuple:
        """Word of the transposed product: reversed, each letter transposed."""
        return tuple(transpose_letter(x, self.symmetric[x[0]]) for x in reversed(word))

    @cache
    def canonical(self, word) -> tuple:
        """Smallest rotation of the word or of its transpose (the trace is the same)."""
        word = tuple(word)
        if not word:
            return word
        best = None
        for w in (word, self.transpose(word)):
            for r in range(len(w)):
                c = w[r:] + w[:r]
                if best is None or _key(c) < _key(best):
                    best = c
        return best

    def words(self, max_length: int, ks=None) -> list:
        """All canonical words of lengths 1..max_length over the letters of indices ks, sorted."""
        letters = self.letters(ks)
        seen = set()
        for n in range(1, max_length + 1):
            for w in product(letters, repeat=n):
                seen.add(self.canonical(w))
        return sorted(seen, key=lambda w: (len(w), _key(w)))


def word_name(word, names) -> str:
    """Readable form, e.g. ``S_student·S_teacher`` or ``M_s·Mᵀ_s·A_s``."""
    sym = {"S": "S", "T": "St", "A": "A", "B": "B"}
    return "·".join(f"{sym[op]}_{names[k]}" for k, op in word)
