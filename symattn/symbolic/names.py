"""Readable symbols for the mathematics a user reads (docs/theory.md §4–§6): each index gets a short
symbol — the spec's ``symbol`` key, else its initial where that is unique among the indices, else its name —
so that Φ and the equations read q_{ss}, q_{st}, μ_{sst}, Γ_{st} in LaTeX while the CSV columns keep the
indices' names (q_student_teacher).

``index_symbols`` gives the short symbols; ``word_symbol`` the SymPy symbol of a trace moment μ_w (its name
a Python identifier, e.g. ``mu_sst`` or ``mu_Ms_Mts_As``) and ``word_latex`` its LaTeX; ``order_parameter_latex`` the
LaTeX of Φ's order parameters (q_{st}, q^{(1)}_{st}, m_{s}).
"""
from __future__ import annotations

import re

import sympy as sp

SIGMA = "Sigma"          # the feature covariance's letter (index K, op "S"; symattn.kinds.alphabet_of)


def index_symbols(spec) -> list:
    """The short symbol of every index, in spec order (module docstring), and "Sigma" for the feature
    covariance's letter after them."""
    names = [ix.name for ix in spec.indices]
    initials = [n[0] for n in names]
    out = []
    for ix, initial in zip(spec.indices, initials):
        if ix.symbol is not None:
            out.append(ix.symbol)
        elif initials.count(initial) == 1 and initial not in [j.symbol for j in spec.indices]:
            out.append(initial)
        else:
            out.append(ix.name)
    return out + [SIGMA]


def symbol_latex(sym: str) -> str:
    """LaTeX of an index symbol: a letter as it is, letters and digits as a subscripted letter (s1 → s_1),
    a longer name upright."""
    if sym == SIGMA:
        return r"\Sigma"
    if len(sym) == 1:
        return sym
    m = re.fullmatch(r"([A-Za-z])(\d+)", sym)
    if m:
        return f"{m.group(1)}_{{{m.group(2)}}}"
    return r"\mathrm{%s}" % sym


def _compact(syms) -> bool:
    return all(len(s) == 1 for s in syms)


def _letter_parts(word, syms, symmetric):
    """(ascii, latex) of each letter of a word; a symmetric index's S as its symbol alone."""
    ascii_, latex = [], []
    for k, op in word:
        s = syms[k]
        if k < len(symmetric) and symmetric[k] and op == "S" or s == SIGMA:
            ascii_.append("Sigma" if s == SIGMA else s)
            latex.append(symbol_latex(s))
            continue
        base = {"S": "M", "T": "Mt", "A": "A", "B": "B"}[op]
        ascii_.append(f"{base}{s}")
        tex = {"S": "M_{%s}", "T": r"M_{%s}^{\top}", "A": "A_{%s}", "B": "B_{%s}"}[op]
        latex.append(tex % symbol_latex(s))
    return ascii_, latex


def word_ascii(word, syms, symmetric) -> str:
    """ASCII name of the moment μ_w, a Python identifier (so that ``sympify`` reads the equations back):
    ``mu_sst`` where every letter is a one-character symmetric index, else the letters joined by "_", e.g.
    ``mu_Ms_Mts_As`` (M = UVᵀ, Mt its transpose, A = UUᵀ, B = VVᵀ) or ``mu_s1_s2``."""
    if not word:
        return "1"
    ascii_, _ = _letter_parts(word, syms, symmetric)
    plain = all(len(a) == 1 for a in ascii_)
    return "mu_" + ("".join(ascii_) if plain else "_".join(ascii_))


def word_latex(word, syms, symmetric) -> str:
    """LaTeX of the moment μ_w: μ_{sst}, μ_{s_1 s_2}, μ(M_s M_s^⊤ A_s)."""
    if not word:
        return "1"
    ascii_, latex = _letter_parts(word, syms, symmetric)
    if all(len(a) == 1 for a in ascii_):
        return r"\mu_{%s}" % "".join(latex)
    if all(not t.startswith(("M", "A", "B")) for t in latex):
        return r"\mu_{%s}" % r"\,".join(latex)
    return r"\mu(%s)" % r"\,".join(latex)


def word_symbol(word, syms, symmetric) -> sp.Symbol:
    """The SymPy symbol of μ_w (real; ``word_ascii`` its name)."""
    return sp.Symbol(word_ascii(word, syms, symmetric), real=True)


def pair_symbols(spec, a: str, b: str) -> str:
    """The subscript of a pair of index names, e.g. "st" (``index_symbols``; separated when a symbol is
    longer than one character)."""
    syms = index_symbols(spec)
    sa, sb = syms[spec.names.index(a)], syms[spec.names.index(b)]
    return sa + sb if _compact((sa, sb)) else f"{sa},{sb}"


def order_parameter_latex(spec, name: str) -> str:
    """LaTeX of an order parameter named like a CSV column: q_a_b → q_{ab}, q1_a_b → q^{(1)}_{ab},
    q2_a_b → q^{(2)}_{ab}, m_a → m_{a}, tr_a → t_{a}, p_a_b → p_{ab} (short index symbols)."""
    syms = index_symbols(spec)
    parts = name.split("_")
    head, idx = parts[0], parts[1:]
    tex = [symbol_latex(syms[spec.names.index(n)]) for n in idx]
    sub = "".join(tex) if all(len(t) == 1 for t in tex) else r"\,".join(tex)
    top = {"q": "q", "q1": "q^{(1)}", "q2": "q^{(2)}", "m": "m", "tr": "t", "p": "p", "trA": "t^{A}",
           "trB": "t^{B}", "overlap": r"\rho"}.get(head, r"\mathrm{%s}" % head)
    return f"{top}_{{{sub}}}"
