"""Large-d limits of trace moments of words in independent random matrices (docs/theory.md §7).

A *word* is a tuple of letters; a letter is ``(k, op)`` with ``k`` the (0-based) index of a matrix
family and ``op`` one of

* ``'S'`` the matrix S_k itself (for an untied index S_k = M_k = U_k V_k^T),
* ``'T'`` its transpose (M_k^T = V_k U_k^T; for symmetric laws ``'T'`` is the same as ``'S'``),
* ``'A'`` A_k = U_k U_k^T and ``'B'`` B_k = V_k V_k^T (untied only).

The law of each index is one of :class:`Wishart`, :class:`Identity`, :class:`GOE`, :class:`Untied`.

Two sides are provided:

* :func:`free_moment` -- the exact d → ∞ limit of ``Tr(X_1 ⋯ X_w)/d`` when the indices are
  independent (hence asymptotically free), as an exact sympy number (rational inputs), a sympy
  Float (float inputs) or a polynomial in the symbols (symbolic inputs).
* :func:`sample_matrices` / :func:`sample_moments` -- the same moments measured on concrete
  sampled matrices, e.g. the initial state of a simulation (docs/theory.md §7, "Sampled initial
  conditions").

Engine of the exact side (genus-0 Wick expansion).  Every letter is written as a product of
Gaussian factors: Wishart ``S = W W^T``; GOE ``S = σZ`` with Z one symmetric factor; untied
``M = U V^T``, ``M^T = V U^T``, ``A = U U^T``, ``B = V V^T``; an identity letter is a scalar.
A factor F of shape (d, κd) has i.i.d. entries of variance σ_F²/d.  By Wick's theorem
``E Tr(F_1 ⋯ F_n)/d`` is a sum over pairings; at leading order only planar (non-crossing)
pairings of F with F^T (of the same factor; Z with Z) survive, and each contributes
``Π_pairs σ_F² · Π_faces (dim of the face)/d``, a face (index loop) having dimension d or κd.
The sum over planar pairings is computed by the first-factor recursion
``T(F_1..F_n) = Σ_j σ² T(F_2..F_{j-1}) T(F_{j+1}..F_n)`` over the compatible partners F_j of F_1,
where an empty inner (outer) segment is the single face of the column (row) index of F_1.
``T`` is a polynomial with non-negative integer coefficients in the variables
κ_k, σ_k², σ_{U,k}², σ_{V,k}², c_k; it depends only on the *types* of the laws, so it is memoised
on the factor sequence (shared by all calls and all parameter values) and evaluated at the
parameters at the end.  Cost: O(n³) per word of n factors, with sub-sequences shared between
words.  Independence of different indices gives freeness automatically (e.g. φ(ab) = φ(a)φ(b),
φ(abab) = φ(a²)φ(b)² + φ(a)²φ(b²) − φ(a)²φ(b)²); a Wishart alone gives the Narayana moments
``Tr S^n/d → σ^{2n} Σ_j N(n,j) κ^j`` (free Poisson, free cumulants κσ^{2n}).
"""
from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Integral
from numbers import Rational as _NumRational
from typing import Any

import numpy as np

__all__ = [
    "Wishart",
    "Identity",
    "GOE",
    "Untied",
    "free_moment",
    "free_moments",
    "free_moments_float",
    "free_moment_poly",
    "letters_of",
    "transpose_word",
    "canonical_word",
    "canonical_words",
    "sample_matrices",
    "letter_matrix",
    "sample_moment",
    "sample_moments",
    "clear_cache",
]


# ----------------------------------------------------------------------------------------------
# Laws
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Wishart:
    """S = W W^T, W of shape d×(κd) with i.i.d. N(0, σ²/d) entries (free Poisson, rate κ, jump σ²)."""

    kappa: Any = 1
    sigma: Any = 1


@dataclass(frozen=True)
class Identity:
    """S = c·I (c = ``scale``)."""

    scale: Any = 1


@dataclass(frozen=True)
class GOE:
    """S = σ Z, Z a GOE matrix with Tr Z²/d → 1 (semicircle of variance σ²; σ = 0: zero matrix)."""

    sigma: Any = 1


@dataclass(frozen=True)
class Ginibre:
    """S a d×d matrix with i.i.d. N(0, σ²/d) entries, not symmetric (a circular element of variance σ²)."""

    sigma: Any = 1


@dataclass(frozen=True)
class Untied:
    """S = M = U V^T; U, V of shape d×(κd), i.i.d. N(0, σ_U²/d) and N(0, σ_V²/d) entries."""

    kappa: Any = 1
    sigma_u: Any = 1
    sigma_v: Any = 1


_SYMMETRIC_OPS = ("S",)
_UNTIED_OPS = ("S", "T", "A", "B")
_GINIBRE_OPS = ("S", "T")


def letters_of(laws: Sequence) -> list:
    """All distinct letters of ``laws``: ``(k,'S')`` for symmetric laws, S, T, A, B for untied."""
    out = []
    for k, law in enumerate(laws):
        ops = _UNTIED_OPS if isinstance(law, Untied) else _GINIBRE_OPS if isinstance(law, Ginibre) else _SYMMETRIC_OPS
        out.extend((k, op) for op in ops)
    return out


# ----------------------------------------------------------------------------------------------
# Sparse integer polynomials in the law parameters
# ----------------------------------------------------------------------------------------------
# A monomial is a sorted tuple of (var, exponent) pairs, var = (k, name) with name in
# {'kappa', 's', 'u', 'v', 'c'} (s = σ², u = σ_U², v = σ_V², c = identity scale).
# A polynomial is a dict monomial -> int.

_ONE: dict = {(): 1}


def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    if not m1:
        return m2
    if not m2:
        return m1
    d = dict(m1)
    for v, e in m2:
        d[v] = d.get(v, 0) + e
    return tuple(sorted(d.items()))


def _poly_mul(p: dict, q: dict) -> dict:
    if p is _ONE:
        return q
    if q is _ONE:
        return p
    r: dict = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = _mono_mul(m1, m2)
            r[m] = r.get(m, 0) + c1 * c2
    return r


def _poly_add_into(r: dict, p: dict) -> None:
    for m, c in p.items():
        r[m] = r.get(m, 0) + c


# ----------------------------------------------------------------------------------------------
# Words -> Gaussian factor sequences
# ----------------------------------------------------------------------------------------------
# A factor is (kind, k, t): kind in 'W', 'U', 'V' (rectangular d×κd), 'Z' (square symmetric);
# t = 1 for the transpose.

def _law_kind(law) -> str:
    if isinstance(law, Wishart):
        return "W"
    if isinstance(law, Identity):
        return "I"
    if isinstance(law, GOE):
        return "Z"
    if isinstance(law, Untied):
        return "M"
    if isinstance(law, Ginibre):
        return "G"
    raise TypeError(f"unknown law {law!r}; expected one of Wishart, Identity, GOE, Ginibre, Untied")


def _check_letter(letter, laws) -> tuple:
    try:
        k, op = letter
    except (TypeError, ValueError):
        raise ValueError(f"a letter is a pair (k, op), got {letter!r}") from None
    if not isinstance(k, Integral) or not 0 <= k < len(laws):
        raise ValueError(f"letter {letter!r}: index k must be an int in [0, {len(laws)})")
    kind = _law_kind(laws[k])
    if kind == "M":
        if op not in _UNTIED_OPS:
            raise ValueError(f"letter {letter!r}: op must be one of S, T, A, B for an untied index")
    elif op not in ("S", "T"):
        raise ValueError(f"letter {letter!r}: op must be 'S' or 'T' for a symmetric "
                         f"({type(laws[k]).__name__}) index")
    return int(k), kind, op


def _factorise(word, laws) -> tuple[tuple, tuple]:
    """(factor sequence, scalar monomial) of a word."""
    seq: list = []
    scal: dict = {}
    for letter in word:
        k, kind, op = _check_letter(letter, laws)
        if kind == "W":
            seq += [("W", k, 0), ("W", k, 1)]
        elif kind == "Z":
            seq.append(("Z", k, 0))
        elif kind == "I":
            scal[(k, "c")] = scal.get((k, "c"), 0) + 1
        elif kind == "G":                     # one square factor G; Sᵀ is its transpose
            seq.append(("G", k, 0 if op == "S" else 1))
        else:  # untied
            if op == "S":
                seq += [("U", k, 0), ("V", k, 1)]
            elif op == "T":
                seq += [("V", k, 0), ("U", k, 1)]
            elif op == "A":
                seq += [("U", k, 0), ("U", k, 1)]
            else:
                seq += [("V", k, 0), ("V", k, 1)]
    return tuple(seq), tuple(sorted(scal.items()))


def _factor_transpose(f):
    kind, k, t = f
    return f if kind == "Z" else (kind, k, 1 - t)


def _canonical_factors(seq: tuple) -> tuple:
    """Minimal representative of a cyclic factor sequence under rotation and transposition."""
    n = len(seq)
    if n <= 1:
        return seq
    rev = tuple(_factor_transpose(f) for f in reversed(seq))
    best = seq
    for s in (seq, rev):
        for i in range(n):
            r = s[i:] + s[:i]
            if r < best:
                best = r
    return best


_WEIGHT_NAME = {"W": "s", "Z": "s", "G": "s", "U": "u", "V": "v"}
_KAPPA_LOOP: dict = {}


def _loop_poly(ratio_var):
    if ratio_var is None:
        return _ONE
    p = _KAPPA_LOOP.get(ratio_var)
    if p is None:
        p = _KAPPA_LOOP[ratio_var] = {((ratio_var, 1),): 1}
    return p


_PLANAR_CACHE: dict = {}


def _planar(seq: tuple) -> dict:
    """Sum over planar compatible pairings of the cyclic factor sequence (non-empty, see module doc)."""
    res = _PLANAR_CACHE.get(seq)
    if res is not None:
        return res
    n = len(seq)
    res = {}
    if n % 2 == 0:
        kind, k, t = seq[0]
        wvar = (k, _WEIGHT_NAME[kind])
        if kind in ("Z", "G"):                # square factors: both faces have dimension d
            col = row = None
        else:
            # non-transposed: rows d, columns κd; transposed: the other way round
            col = (k, "kappa") if t == 0 else None
            row = None if t == 0 else (k, "kappa")
        for j in range(1, n, 2):
            g = seq[j]
            if g[0] != kind or g[1] != k or (kind != "Z" and g[2] == t):
                continue
            inner = seq[1:j]
            outer = seq[j + 1:]
            pin = _planar(inner) if inner else _loop_poly(col)
            if not pin:
                continue
            pout = _planar(outer) if outer else _loop_poly(row)
            if not pout:
                continue
            prod = _poly_mul(pin, pout)
            for m, c in prod.items():
                mm = _mono_mul(m, ((wvar, 1),))
                res[mm] = res.get(mm, 0) + c
    _PLANAR_CACHE[seq] = res
    return res


def clear_cache() -> None:
    """Empty the memoisation caches of :func:`free_moment`."""
    _PLANAR_CACHE.clear()


def free_moment_poly(word, laws) -> dict:
    """The large-d limit of Tr(word)/d as a polynomial ``{monomial: int}`` in the law variables.

    A monomial is a sorted tuple of ``((k, name), exponent)``, name ∈ {'kappa', 's' (σ²),
    'u' (σ_U²), 'v' (σ_V²), 'c' (identity scale)}.  Engine: planar Wick pairings (module doc).
    """
    seq, scal = _factorise(word, laws)
    if not seq:
        poly = _ONE
    else:
        poly = _planar(_canonical_factors(seq))
    if scal:
        poly = {_mono_mul(m, scal): c for m, c in poly.items()}
    return poly


# ----------------------------------------------------------------------------------------------
# Evaluation of the polynomials at the law parameters
# ----------------------------------------------------------------------------------------------

def _raw_param(law, name):
    if name == "kappa":
        return law.kappa, 1
    if name == "c":
        return law.scale, 1
    if name == "s":
        return law.sigma, 2
    if name == "u":
        return law.sigma_u, 2
    if name == "v":
        return law.sigma_v, 2
    raise KeyError(name)


def _loaded_sympy():
    """SymPy if it is loaded (a law parameter given as a SymPy number means it is), else None: a numeric law's
    moments are computed without importing it (a warm ``theory`` does not)."""
    return sys.modules.get("sympy")


def _as_fraction(x):
    """Fraction for exact rational inputs, else None."""
    if isinstance(x, bool):
        return Fraction(int(x))
    if isinstance(x, (Integral, np.integer)):
        return Fraction(int(x))
    if isinstance(x, Fraction):
        return x
    sp = _loaded_sympy()
    if sp is not None and isinstance(x, sp.Basic):
        if isinstance(x, sp.Rational):
            return Fraction(int(x.p), int(x.q))
        return None
    if isinstance(x, _NumRational):
        return Fraction(x.numerator, x.denominator)
    return None


def _is_float(x) -> bool:
    sp = _loaded_sympy()
    return isinstance(x, (float, np.floating)) or (sp is not None and isinstance(x, sp.Float))


def _float_sum(poly: dict, raw: dict) -> float:
    """The polynomial in floating point at the raw parameters {variable: (value, power)}."""
    vals = {v: float(x) ** p for v, (x, p) in raw.items()}
    tot = 0.0
    for m, c in poly.items():
        term = float(c)
        for v, e in m:
            term *= vals[v] ** e
        tot += term
    return tot


def _evaluate(poly: dict, laws, mode: str):
    """Evaluate a polynomial at the parameters. mode: 'exact' (a SymPy number or expression), 'value' (the exact
    result as the nearest float, by Fractions: no SymPy for numeric parameters) or 'float' (floating point)."""
    raw = {}
    for v in {v for m in poly for v, _ in m}:
        k, name = v
        raw[v] = _raw_param(laws[k], name)
    if mode == "float":
        return _float_sum(poly, raw)
    fr = {v: _as_fraction(x) for v, (x, _) in raw.items()}
    if all(f is not None for f in fr.values()):
        vals = {v: fr[v] ** raw[v][1] for v in raw}
        tot = Fraction(0)
        for m, c in poly.items():
            term = Fraction(c)
            for v, e in m:
                term *= vals[v] ** e
            tot += term
        if mode == "value":
            return float(tot)
        import sympy as sp
        return sp.Rational(tot.numerator, tot.denominator)
    if all(fr[v] is not None or _is_float(raw[v][0]) for v in raw):
        tot = _float_sum(poly, raw)
        if mode == "value":
            return tot
        import sympy as sp
        return sp.Float(tot)
    import sympy as sp
    vals = {v: sp.sympify(x) ** p for v, (x, p) in raw.items()}
    expr = sp.Add(*(sp.Mul(sp.Integer(c), *[vals[v] ** e for v, e in m]) for m, c in poly.items()))
    return float(expr) if mode == "value" else expr


def free_moment(word, laws):
    """Exact d → ∞ limit of Tr(X_1 ⋯ X_w)/d for independent indices (docs/theory.md §7).

    ``word``: tuple of letters ``(k, op)``; ``laws``: sequence of law objects indexed by k.
    Returns an exact sympy Rational for rational parameters, a sympy Float for float
    parameters and a polynomial in the symbols for symbolic parameters.  Empty word → 1.
    """
    return _evaluate(free_moment_poly(tuple(word), laws), laws, "exact")


def free_moment_value(word, laws) -> float:
    """``float(free_moment(word, laws))``, bit for bit, without SymPy for numeric parameters."""
    return _evaluate(free_moment_poly(tuple(word), laws), laws, "value")


def free_moments(words: Iterable, laws) -> dict:
    """``{word: free_moment(word, laws)}`` (shares the memoisation cache)."""
    return {tuple(w): free_moment(w, laws) for w in words}


def free_moments_float(words: Iterable, laws) -> np.ndarray:
    """float64 array of the large-d limits of Tr(word)/d, in the order of ``words``."""
    words = list(words)
    out = np.empty(len(words))
    for i, w in enumerate(words):
        out[i] = _evaluate(free_moment_poly(tuple(w), laws), laws, "float")
    return out


# ----------------------------------------------------------------------------------------------
# Canonical words
# ----------------------------------------------------------------------------------------------

_T_OP = {"S": "T", "T": "S", "A": "A", "B": "B"}


def transpose_word(word, laws=None) -> tuple:
    """The word of the transposed product: reversed, with S ↔ T (A, B and symmetric letters fixed).

    Tr(word) = Tr(transpose_word(word)).  With ``laws`` given, letters of symmetric laws keep 'S'.
    """
    out = []
    for k, op in reversed(tuple(word)):
        if laws is not None and not isinstance(laws[k], Untied):
            out.append((k, "S"))
        else:
            out.append((k, _T_OP[op]))
    return tuple(out)


def canonical_word(word, laws=None) -> tuple:
    """Minimal representative of ``word`` under cyclic rotation and transposition (trace invariances).

    With ``laws`` given, 'T' letters of symmetric (non-untied) laws are first replaced by 'S'.
    """
    w = tuple((k, op) for k, op in word)
    if laws is not None:
        w = tuple((k, "S") if not isinstance(laws[k], Untied) else (k, op) for k, op in w)
    n = len(w)
    if n == 0:
        return w
    best = w
    for s in (w, transpose_word(w, laws)):
        for i in range(n):
            r = s[i:] + s[:i]
            if r < best:
                best = r
    return best


def canonical_words(laws, max_len: int, min_len: int = 0) -> list:
    """All canonical words (see :func:`canonical_word`) of length min_len..max_len over the letters
    of ``laws`` (:func:`letters_of`), sorted by length then lexicographically."""
    letters = letters_of(laws)
    out = []
    for n in range(min_len, max_len + 1):
        seen = set()
        for w in itertools.product(letters, repeat=n):
            c = canonical_word(w, laws)
            if c == w:  # w is minimal among its class; each class yields exactly once
                seen.add(c)
        out.extend(sorted(seen))
    return out


# ----------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------

def sample_matrices(laws, d: int, rng: np.random.Generator, dtype=np.float64) -> list:
    """Draw the concrete factors of every index (docs/theory.md §3 initialisation, §7 sampled ICs).

    Returns a list (indexed by k) of dicts: ``{'W': W}`` (Wishart, W d×d_k, entries N(0, σ²/d)),
    ``{'U': U, 'V': V}`` (untied), ``{'S': S}`` (GOE: S = σ(X + X^T)/√(2d), X i.i.d. N(0,1), so
    Tr S²/d → σ²; identity: S = c·I).  Width d_k = max(1, round(κ d)).
    """
    out = []
    for law in laws:
        kind = _law_kind(law)
        if kind in ("W", "M"):
            dk = max(1, int(round(float(law.kappa) * d)))
        if kind == "W":
            W = rng.standard_normal((d, dk)) * (float(law.sigma) / np.sqrt(d))
            out.append({"W": W.astype(dtype, copy=False)})
        elif kind == "M":
            U = rng.standard_normal((d, dk)) * (float(law.sigma_u) / np.sqrt(d))
            V = rng.standard_normal((d, dk)) * (float(law.sigma_v) / np.sqrt(d))
            out.append({"U": U.astype(dtype, copy=False), "V": V.astype(dtype, copy=False)})
        elif kind == "G":
            out.append({"S": (rng.standard_normal((d, d)) * (float(law.sigma) / np.sqrt(d))).astype(dtype, copy=False)})
        elif kind == "Z":
            X = rng.standard_normal((d, d))
            S = (X + X.T) * (float(law.sigma) / np.sqrt(2.0 * d))
            out.append({"S": S.astype(dtype, copy=False)})
        else:
            out.append({"S": (float(law.scale) * np.eye(d)).astype(dtype, copy=False)})
    return out


def letter_matrix(factors: dict, op: str) -> np.ndarray:
    """The d×d matrix of letter ``op`` built from one index's factors (see :func:`sample_matrices`)."""
    if "W" in factors:
        if op not in ("S", "T"):
            raise ValueError(f"op {op!r} undefined for a Wishart index")
        W = factors["W"]
        return W @ W.T
    if "U" in factors:
        U, V = factors["U"], factors["V"]
        if op == "S":
            return U @ V.T
        if op == "T":
            return V @ U.T
        if op == "A":
            return U @ U.T
        if op == "B":
            return V @ V.T
        raise ValueError(f"op {op!r} undefined for an untied index")
    if "S" in factors:
        if op == "S":
            return factors["S"]
        if op == "T":
            return factors["S"].T
        raise ValueError(f"op {op!r} undefined for a direct/GOE/identity index")
    raise ValueError(f"unrecognised factor dict with keys {sorted(factors)}")


def _scalar_multiple_of_identity(M: np.ndarray):
    """c if M == c·I exactly, else None."""
    c = M[0, 0]
    diag = np.diagonal(M)
    if not np.all(diag == c):
        return None
    if np.count_nonzero(M) != np.count_nonzero(diag):
        return None
    return float(c)


def _trace_of_product(L: np.ndarray, Rt: np.ndarray) -> float:
    """Tr(L R) = Σ_ij L_ij (R^T)_ij, given L and R^T (contiguous dot when the layouts agree)."""
    if (L.flags.c_contiguous and Rt.flags.c_contiguous) or (L.flags.f_contiguous and Rt.flags.f_contiguous):
        return float(np.dot(L.ravel(order="K"), Rt.ravel(order="K")))
    return float(np.einsum("ij,ij->", L, Rt))


def sample_moment(word, factor_list) -> float:
    """Tr(X_1 ⋯ X_w)/d of the concrete matrices (letters built by :func:`letter_matrix`)."""
    return float(sample_moments([word], factor_list)[0])


def sample_moments(words, factor_list, max_cache_bytes: float = 2e9) -> np.ndarray:
    """Tr(word)/d of the concrete matrices for every word; float64 array in the order of ``words``.

    Meet in the middle: Tr(L R) = Σ_ij L_ij R_ji with L, R the products of the two halves of the
    word, each half-product built from a memoised shorter product (one d×d matmul each) and
    shared between words; a product and its transpose share one cache entry.  Letters equal to
    c·I are applied as scalars.  The product cache is capped at ``max_cache_bytes`` (cleared when
    full), so memory stays bounded for long lists of long words.
    """
    words = [tuple(w) for w in words]
    out = np.empty(len(words))
    d = None
    for fl in factor_list:
        for key in ("W", "U", "S"):
            if key in fl:
                d = fl[key].shape[0]
                break
        if d is not None:
            break

    letters: dict = {}  # (k, op) -> (matrix, scalar or None, key of the letter, symmetric)
    sym_cache: dict = {}

    def is_sym(k):
        """Is S_k symmetric (Wishart, or a symmetric 'S' matrix: GOE, identity, symmetric direct)?"""
        if k not in sym_cache:
            fl = factor_list[k]
            sym_cache[k] = "W" in fl or ("S" in fl and np.array_equal(fl["S"], fl["S"].T))
        return sym_cache[k]

    tr_op = {"S": "T", "T": "S", "A": "A", "B": "B"}

    def get(letter):
        res = letters.get(letter)
        if res is None:
            k, op = letter
            fl = factor_list[k]
            sym = is_sym(k) and op in ("S", "T")
            if sym and op == "T":
                res = letters[letter] = get((k, "S"))
                return res
            tl = (k, tr_op[op])
            if op in ("S", "T") and tl in letters:
                M = letters[tl][0].T
            else:
                M = letter_matrix(fl, op)
            c = _scalar_multiple_of_identity(M) if "S" in fl else None
            key = (k, "S") if sym else (k, op)
            res = letters[letter] = (M, c, key, sym)
        return res

    def key_transpose(t):
        # symmetric letters are their own transpose
        return tuple((k, op if is_sym(k) else tr_op[op]) for k, op in reversed(t))

    cache: dict = {}
    nbytes = [0]

    def product(t):
        """d×d product of the letter keys t (non-scalar letters, len ≥ 1)."""
        if len(t) == 1:
            return get(t[0])[0]
        tt = key_transpose(t)
        if tt < t:
            return product(tt).T
        P = cache.get(t)
        if P is not None:
            return P
        h = len(t) // 2
        P = product(t[:h]) @ product(t[h:])
        if nbytes[0] + P.nbytes > max_cache_bytes:
            cache.clear()
            nbytes[0] = 0
        cache[t] = P
        nbytes[0] += P.nbytes
        return P

    reduced: dict = {}
    for i, w in enumerate(words):
        scale = 1.0
        red = []
        for letter in w:
            _, c, key, _ = get(tuple(letter))
            if c is not None:
                scale *= c
            else:
                red.append(key)
        reduced.setdefault(tuple(red), []).append((i, scale))
    # process in an order that keeps equal halves adjacent
    for red in sorted(reduced, key=lambda t: (len(t), t)):
        n = len(red)
        if n == 0:
            v = 1.0
        elif n == 1:
            v = float(np.trace(letters[red[0]][0])) / d
        else:
            h = (n + 1) // 2
            v = _trace_of_product(product(red[:h]), product(key_transpose(red[h:]))) / d
        for i, scale in reduced[red]:
            out[i] = scale * v
    return out
