"""The exact population loss at finite d for a loss polynomial in G, and its expected-gradient flow
(docs/theory.md §2, "Exact finite d").

With Gaussian tokens, E[x_ia x_jb] = C_ij δ_ab, every pre-activation is a bilinear form,
G_ijk = (x_iᵀ S_k x_j − c_ijk)/√d (c_ijk = C_ij Tr S_k for a centred index, 0 otherwise). A monomial
Π_m G_m is expanded over the centring constants, and each E Π_m x_{a_m}ᵀ S_m x_{b_m} by Wick's theorem on the
2n token vectors: a perfect matching of the slots pairs tokens (factor C_{token, token}) and identifies their
coordinates, so the coordinate sums close into cycles through the matrices, each cycle a trace of a word in
S_k and S_kᵀ (S_k read from its left slot to its right one, S_kᵀ the other way). With Tr w = d·tr w,

    E Π_{m=1}^{n} G_m = Σ_{centring subsets} Σ_{matchings} Π C · d^{#cycles + #constants − n/2} Π tr(w),

a polynomial in normalised traces tr w = Tr w/d with explicit powers of 1/d — e.g. for one token and h2,
E G⁴ = 3v² + 48 tr(S⁴)/d with v = 2 tr(S²) (the limit keeps the d⁰ part; ``tests/test_finite_d.py`` checks
this against Monte Carlo over x at d = 10, 20, 50). Words are stored canonically (the least of their
rotations and of the reversed word with every letter transposed: Tr w = Tr wᵀ; a symmetric S is its own
transpose).

The expected-gradient flow at dimension d: online SGD's mean step is −α∇_θ E𝓛 = −α∇_θ Φ_d exactly, so on the
time τ = nα/d each factor moves by −d·∇_θ Φ_d − γθ (its kind's ``pullback`` of ∂Φ_d/∂S, the entries of S
independent), integrated on the d×d matrices themselves — no limit and no truncation: what SGD does on
average at that d, without its O(ε) fluctuations.
"""
from __future__ import annotations

import math
from functools import cached_property
from itertools import combinations
from typing import TYPE_CHECKING

import numpy as np

from ..errors import SpecError, UsageError
from ..spec import require_spec

if TYPE_CHECKING:
    import sympy as sp

MEAN = 2            # the letter (k, MEAN): m_k = Tr S_k/√d of an uncentred index, not a trace


def _canonical(word: tuple, symmetric: tuple) -> tuple:
    """The canonical representative of a cyclic word of letters (k, transposed)."""
    w = tuple((k, bool(t) and not symmetric[k]) for k, t in word)
    rev = tuple((k, (not t) and not symmetric[k]) for k, t in reversed(w))
    cands = [c[i:] + c[:i] for c in (w, rev) for i in range(len(c))]
    return min(cands)


class FiniteDPotential:
    """Φ_d = E_x 𝓛 exactly at finite d for a loss polynomial in G (module docstring)."""

    def __init__(self, spec):
        import sympy as sp

        from ..symbolic.gaussian import GaussianG, OrderParameters, integrate_label_noise
        from ..symbolic.loss import build_loss
        self.spec = spec = require_spec(spec, "FiniteD")
        loss = build_loss(spec)
        gauss = GaussianG(loss, OrderParameters(spec))
        self.C = np.asarray(spec.covariance, dtype=float)
        self.symmetric = tuple(ix.symmetric for ix in spec.indices)
        self.centred = tuple(ix.centred for ix in spec.indices)
        xis = [v for v, where in gauss.index.items() if where[0] == "xi"]
        gsyms = [v for v, where in gauss.index.items() if where[0] == "G"]
        s2 = float(spec.label_noise) if spec.loss is None else 0.0
        expr = sp.Integer(0)
        for term in loss.terms:
            for k, h in integrate_label_noise(term, xis):
                expr += sp.Float(s2) ** k * h if k else h
        expr = sp.expand(expr)
        vs = [g for g in gsyms if expr.has(g)]
        if vs and not expr.is_polynomial(*vs):
            what = "model.loss" if spec.loss is not None else f"model.activation = {spec.activation}"
            raise SpecError(f"{spec.source}: {what}: the exact finite-d population loss needs a loss polynomial "
                            f"in the pre-activations G (Wick's theorem over the tokens); this one is not")
        self._cache: dict = {}
        self.terms: dict = {}                     # (twice the power of d, words) -> coefficient
        if vs:
            poly = sp.Poly(expr, *vs)
            where = {v: gauss.index[v][1:] for v in vs}
            for exps, coef in poly.terms():
                factors = tuple(sorted(where[v] for v, e in zip(vs, exps) for _ in range(e)))
                for (p, words), c in self._monomial(factors).items():
                    key = (p, words)
                    self.terms[key] = self.terms.get(key, 0.0) + float(coef) * c
        else:
            self.terms[(0, ())] = float(expr)
        self.terms = self._with_means({k: v for k, v in self.terms.items() if abs(v) > 1e-14 * (1 + abs(v))})

    PLAIN = ("C", "symmetric", "centred", "terms")     # what the store keeps: the polynomial in the traces

    @classmethod
    def stored(cls, spec) -> FiniteDPotential:
        """``FiniteDPotential(spec)`` from the per-user derivation store where it was derived before (its plain
        polynomial in the traces: a warm ``--exact-finite-d`` imports no SymPy), else derived and stored."""
        from . import store
        spec = require_spec(spec, "FiniteD")
        key = store.finite_d_key(spec)
        data = store.load_record(key, "f")
        if isinstance(data, dict) and set(data) == set(cls.PLAIN):
            self = cls.__new__(cls)
            self.spec, self._cache = spec, {}
            self.__dict__.update(data)
            return self
        self = cls(spec)
        store.save_record(key, {name: getattr(self, name) for name in cls.PLAIN}, "f")
        return self

    def _with_means(self, terms: dict) -> dict:
        """An uncentred index's Tr S_k/d = m_k/√d (m_k = Tr S_k/√d, O(1) in the limit, the ``m_`` column):
        the word (k,) becomes the mean letter (k, MEAN) and the term loses half a power of d, so that no term
        grows with d."""
        out = {}
        for (p, ws), c in terms.items():
            new = []
            for w in ws:
                if len(w) == 1 and not self.centred[w[0][0]]:
                    new.append(((w[0][0], MEAN),))
                    p -= 1
                else:
                    new.append(w)
            key = (p, tuple(sorted(new)))
            out[key] = out.get(key, 0.0) + c
        return out

    # ------------------------------------------------------------------ Wick's theorem over the tokens
    def _monomial(self, factors: tuple) -> dict:
        """E Π_m G_m for the factors (i, j, k): {(twice the power of d, canonical words): coefficient}."""
        n = len(factors)
        out: dict = {}
        # centring: G_m = (B_m − c_m)/√d, c_m = C_ij·d·tr(S_k) for a centred index
        cent = [m for m, (i, j, k) in enumerate(factors) if self.centred[k] and self.C[i, j] != 0.0]
        for r in range(len(cent) + 1):
            for drop in combinations(cent, r):
                keep = tuple(f for m, f in enumerate(factors) if m not in drop)
                const = 1.0
                words = []
                for m in drop:
                    i, j, k = factors[m]
                    const *= -self.C[i, j]
                    words.append(((k, False),))
                for (cyc, wds), c in self._wick(tuple(sorted(keep))).items():
                    w = tuple(sorted(words + list(wds)))
                    # Tr = d·tr on every cycle and every centring trace; 1/√d per G: the power of d, as
                    # twice it (an odd number of G's gives half-integer powers, E G³ = 8 tr S³/√d)
                    key = (2 * (cyc + len(drop)) - n, w)
                    out[key] = out.get(key, 0.0) + const * c
        return out

    def _wick(self, factors: tuple) -> dict:
        """E Π_m x_{i_m}ᵀ S_{k_m} x_{j_m} (uncentred) = {(#cycles, canonical words): coefficient}."""
        if factors in self._cache:
            return self._cache[factors]
        n = len(factors)
        tok = [factors[s // 2][s % 2] for s in range(2 * n)]       # slot 2m: left (token i), 2m + 1: right (j)
        C = self.C
        partner = [-1] * (2 * n)
        out: dict = {}

        def cycles():
            seen = [False] * (2 * n)
            words = []
            for start in range(0, 2 * n, 2):
                if seen[start]:
                    continue
                word, s = [], start
                while not seen[s]:
                    m, side = divmod(s, 2)
                    other = 2 * m + 1 - side                        # through S_m: left → right is S, right → left Sᵀ
                    seen[s] = seen[other] = True
                    word.append((factors[m][2], side == 1))
                    s = partner[other]
                words.append(_canonical(tuple(word), self.symmetric))
            return tuple(sorted(words))

        def match(weight):
            free = next((s for s in range(2 * n) if partner[s] < 0), None)
            if free is None:
                ws = cycles()
                key = (len(ws), ws)
                out[key] = out.get(key, 0.0) + weight
                return
            for s in range(free + 1, 2 * n):
                if partner[s] < 0:
                    c = C[tok[free], tok[s]]
                    if c != 0.0:
                        partner[free], partner[s] = s, free
                        match(weight * c)
                        partner[free] = partner[s] = -1

        if n == 0:
            out[(0, ())] = 1.0
        else:
            match(1.0)
        self._cache[factors] = out
        return out

    # ------------------------------------------------------------------ symbolic form
    def word_name(self, w: tuple) -> str:
        names = self.spec.names
        if w[0][1] == MEAN:
            return f"m_{names[w[0][0]]}"
        return "·".join(names[k] + ("ᵀ" if t else "") for k, t in w)

    def symbol(self, w: tuple) -> sp.Symbol:
        import sympy as sp
        return sp.Symbol(self.word_name(w) if w[0][1] == MEAN else f"tr({self.word_name(w)})")

    def expression(self) -> sp.Expr:
        """Φ_d as a SymPy polynomial in the normalised traces tr(w) and 1/d (symbol ``d``)."""
        import sympy as sp
        D = sp.Symbol("d", positive=True)
        out = sp.Integer(0)
        for (p, words), c in self.terms.items():
            out += sp.nsimplify(c, rational=True) * D ** sp.Rational(p, 2) * sp.Mul(*[self.symbol(w) for w in words])
        return sp.collect(sp.expand(out), D)

    @cached_property
    def words(self) -> list:
        return sorted({w for _, ws in self.terms for w in ws})

    @property
    def order_in_d(self) -> float:
        """The largest power of d (0: the limit's terms are the leading ones)."""
        return max(p for p, _ in self.terms) / 2

    # ------------------------------------------------------------------ numbers
    @staticmethod
    def _product(mats, word):
        if word[0][1] == MEAN:
            return mats[word[0][0]]
        A = None
        for k, t in word:
            M = mats[k].T if t else mats[k]
            A = M if A is None else A @ M
        return A

    def traces(self, mats) -> dict:
        """tr(w) = Tr w/d of every word at the d×d matrices ``mats`` (one per index, dense); m_k = Tr S_k/√d
        for a mean letter."""
        d = mats[0].shape[0]
        return {w: float(np.trace(self._product(mats, w))) / (math.sqrt(d) if w[0][1] == MEAN else d)
                for w in self.words}

    def value(self, mats) -> float:
        d = mats[0].shape[0]
        tr = self.traces(mats)
        return float(sum(c * d ** (p / 2) * math.prod(tr[w] for w in ws) for (p, ws), c in self.terms.items()))

    def gradient(self, mats) -> list:
        """∂Φ_d/∂S_k (entries of S_k independent), one d×d matrix per index."""
        d = mats[0].shape[0]
        tr = self.traces(mats)
        dtr = {}                                       # ∂tr(w)/∂S_k: Σ over the letters k of w
        for w in self.words:
            g = {}
            if w[0][1] == MEAN:                        # ∂(Tr S_k/√d)/∂S_k = I/√d
                dtr[w] = {w[0][0]: np.eye(d) / math.sqrt(d)}
                continue
            for p, (k, t) in enumerate(w):
                rest = w[p + 1:] + w[:p]
                X = self._product(mats, rest) if rest else np.eye(d)
                # ∂Tr(S X)/∂S = Xᵀ, ∂Tr(Sᵀ X)/∂S = X
                g[k] = g.get(k, 0.0) + (X if t else X.T) / d
            dtr[w] = g
        out = [np.zeros((d, d)) for _ in mats]
        for (p, ws), c in self.terms.items():
            if not ws:
                continue
            for a, w in enumerate(ws):
                others = math.prod(tr[v] for b, v in enumerate(ws) if b != a)
                for k, G in dtr[w].items():
                    out[k] += (c * d ** (p / 2) * others) * G
        return out


def dense_matrices(spec, states) -> list:
    """The d×d matrix S_k of every index of a simulation state (``Kind.matrix``)."""
    return [np.asarray(ix.kind.matrix(s), dtype=float) for ix, s in zip(spec.indices, states)]


def solve_finite_d(spec, dim: int, time: float = 1.0, points: int = 51, seed: int = 0, rtol: float = 1e-7,
                   potential: FiniteDPotential | None = None):
    """The expected-gradient flow at dimension ``dim`` from simulation seed ``seed``'s initial matrices
    (module docstring): a TheoryResult-like table (time, tr_a, q_a_b, p_a_b, …, loss = Φ_d exactly)."""
    from scipy.integrate import solve_ivp

    from ..errors import NumericalFailure
    from ..initial import draw_initial
    from ..measure import order_parameters
    from ..threads import blas_threads
    spec = require_spec(spec, "solve_finite_d")
    if int(dim) < 2:
        raise UsageError(f"--dim {dim}: the exact finite-d flow needs d >= 2")
    P = potential or FiniteDPotential.stored(spec)
    states = draw_initial(spec, int(dim), int(seed))
    train = list(spec.students)
    names = [[f for f in spec.indices[k].kind.factors] for k in train]
    shapes = [[states[k][f].shape for f in fs] for k, fs in zip(train, names)]

    def unpack(y):
        out, o = [dict(s) for s in states], 0
        for k, fs, shs in zip(train, names, shapes):
            for f, sh in zip(fs, shs):
                n = int(np.prod(sh))
                out[k][f] = y[o:o + n].reshape(sh)
                o += n
        return out

    gamma = spec.weight_decay
    sched = spec.schedule
    # whitened variables (symattn.features): each gradient preconditioned by Σ — a factor's rows scaled by Σ,
    # a matrix trained as it is Σ·∇·Σ: the kind's ``whiten`` with Σ in place of Σ^½
    metric = None if spec.features.identity else spec.features.eigenvalues(int(dim))

    def rhs(t, y):
        st = unpack(y)
        grads = P.gradient(dense_matrices(spec, st))
        s = 1.0 if sched.constant else float(sched(t))
        g = gamma if sched.constant else gamma * float(sched.gamma_factor(t))
        vel = []
        for k, fs in zip(train, names):
            pulled = spec.indices[k].kind.pullback(st[k], grads[k])
            if metric is not None:
                pulled = spec.indices[k].kind.whiten(pulled, metric)
            vel += [(s * (-dim * pulled[f] - g * st[k][f])).ravel() for f in fs]
        return np.concatenate(vel)

    y0 = np.concatenate([states[k][f].ravel() for k, fs in zip(train, names) for f in fs])
    times = np.linspace(0.0, float(time), int(points))
    with blas_threads(int(dim)):
        sol = solve_ivp(rhs, (0.0, float(time)), y0, t_eval=times, method="RK45", rtol=rtol,
                        atol=rtol * 1e-2 * max(float(np.sqrt(np.mean(y0 ** 2))), 1e-300))
    if sol.status != 0 or not np.all(np.isfinite(sol.y)):
        t = float(sol.t[-1]) if sol.t.size else 0.0
        raise NumericalFailure(f"exact finite-d flow failed at time {t:.6g} ({sol.message})", t)
    rows = []
    for i, t in enumerate(sol.t):
        st = unpack(sol.y[:, i])
        row = {"time": float(t), **order_parameters(spec, st, int(dim))}
        row["loss"] = P.value(dense_matrices(spec, st))
        rows.append(row)
    return {c: np.array([r[c] for r in rows]) for c in rows[0]}
