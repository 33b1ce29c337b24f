"""The matrix-level limit flow as SymPy matrix expressions (docs/theory.md §4–§7), package time τ = nα/d.

``matrix_flow(spec)`` returns what the matrix-level engine integrates, written out:

* the drift of every trainable letter — dS_k/dτ (tied, direct), dS_k/dτ and dS_kᵀ/dτ (general), dM_k, dM_kᵀ,
  dA_k, dB_k (untied) — read from the same letter flows the hierarchy is derived from (``Kind.letter_flow``),
  so the two cannot disagree;
* the drift of the trained factors themselves — dW_k/dτ (tied), dU_k/dτ and dV_k/dτ (untied), dS_k/dτ
  (direct, general) — from each kind's ``factor_flow`` (the kind's one statement of its gradient flow);
  ``check_product_rule`` verifies that the product rule on the factors gives the letter drifts;
* the SGD-noise map of one step of length dτ on each letter (``Kind.fluctuation_forms`` to first order and
  ``Kind.second_order`` to second) in the Gaussian increments dΞ_k, and the covariance of the increments:
  E[(dΞ_k)_ab (dΞ_l)_cd] = (ε dτ/d)(ν⁽¹⁾_kl δ_ad δ_bc + ν⁽²⁾_kl δ_ac δ_bd) (a pair with a symmetric member:
  ν⁽¹⁾ = ν⁽²⁾ = ν), so that E Tr(X dΞ_k Y dΞ_l)/d = ε ν⁽¹⁾_kl dτ tr X tr Y.

Matrices are ``sympy.MatrixSymbol`` of size d × d (a factor of width κd: d × r); Σ is the feature
covariance (the identity without one); coefficients are the symbols of ``derivation.equations``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from ..symbolic.names import index_symbols, symbol_latex
from .equations import EPSILON, GAMMA, Equations

D = sp.Symbol("d", positive=True, integer=True)
R = sp.Symbol("r", positive=True, integer=True)         # a factor's width κd


class FlowSymbols:
    """The symbols a kind writes its flow in: letters, factors, coefficients (``coef(name)``: the symbol of the
    coefficient rule ``name`` — Gamma_k_l, GO_k_l, GP_k_l, beta_k, gamma), the metric Σ and the increments."""

    def __init__(self, spec, eq: Equations | None = None):
        self.spec = spec
        self.syms = index_symbols(spec)
        self.latex_names = {}
        self.sigma = sp.Identity(D) if spec.features.identity else sp.MatrixSymbol("Sigma", D, D)
        self._coef = {}
        if eq is not None:
            for c, s in zip(eq.system.coefficient_rules, eq.coefficients):
                if s is not None:
                    self._coef[c.name] = s
            self.latex_names.update(eq.latex_names)

    def coef(self, name: str):
        if name == "gamma":
            return GAMMA
        return self._coef.get(name, sp.Symbol(name, real=True))

    def _matrix(self, head: str, k: int, cols=D, tex: str = "{head}_{{{s}}}"):
        s = self.syms[k]
        m = sp.MatrixSymbol(f"{head}_{s}", D, cols)
        self.latex_names[m] = self.latex_names[m.name] = tex.format(head=head, s=symbol_latex(s))
        return m

    def symmetric_letters(self) -> dict:
        """{Xᵀ: X} for every symmetric matrix (the symmetric indices' S and Σ): SymPy's matrix symbols are
        general, so a product rule writes Sᵀ where S is meant."""
        out = {self.S(k).T: self.S(k) for k, ix in enumerate(self.spec.indices) if ix.symmetric}
        if isinstance(self.sigma, sp.MatrixSymbol):
            out[self.sigma.T] = self.sigma
        return out

    def S(self, k):
        return self._matrix("S", k)

    def M(self, k):
        return self._matrix("M", k)

    def A(self, k):
        return self._matrix("A", k)

    def B(self, k):
        return self._matrix("B", k)

    def factor(self, name: str, k: int):
        """A trained factor (W, U, V of width r, or S itself)."""
        return self._matrix(name, k, D if name == "S" else R)

    def increment(self, k):
        return self._matrix(r"dXi", k, tex=r"d\Xi_{{{s}}}")

    def letter(self, letter):
        """The matrix of a word letter (k, op)."""
        k, op = letter
        if k == self.spec.K:
            return self.sigma
        ix = self.spec.indices[k]
        if ix.symmetric:
            return self.S(k)                       # S_kᵀ = S_k
        base = self.S(k) if ix.centred else self.M(k)   # general S, untied M = UVᵀ
        if op == "S":
            return base
        if op == "T":
            return base.T
        return self.A(k) if op == "A" else self.B(k)

    def letter_drifts(self) -> dict:
        """letter name → its drift from the kinds' letter flows (:func:`letter_drifts`)."""
        return letter_drifts(self.spec, self)

    def letter_name(self, letter) -> str:
        """The name of a letter's drift entry: S_s, M_s, A_s, B_s, and St_s / Mt_s for a transpose."""
        m = self.letter(letter)
        if letter[1] == "T" and not self.spec.indices[letter[0]].symmetric:
            base = m.arg
            name = f"{base.name[0]}t_{self.syms[letter[0]]}"
            self.latex_names[name] = self.latex_names[base] + r"^{\top}"
        else:
            name = m.name
            self.latex_names[name] = self.latex_names[m]
        return name

    def word(self, letters):
        """The product of a tuple of letters (the identity for the empty word)."""
        mats = [self.letter(x) for x in letters]
        if not mats:
            return sp.Identity(D)
        return sp.MatMul(*mats).doit() if len(mats) > 1 else mats[0]


@dataclass
class MatrixFlow:
    """The matrix-level flow of a spec (module docstring)."""

    spec: object
    letters: dict                       # letter name (S_s, M_s, Mt_s, A_s, B_s) -> drift MatrixExpr
    factors: dict                       # factor name (W_s, U_s, V_s, S_s) -> drift MatrixExpr
    noise: dict                         # letter name -> its increment under one step (first + second order)
    covariance: str                     # LaTeX of E[dΞ_k ⊗ dΞ_l]
    latex_names: dict = field(default_factory=dict)

    def latex(self) -> str:
        """Drifts of the factors and letters, the noise map and the increments' covariance, as one LaTeX block."""
        def tex(e):          # SymPy prints a MatAdd's negative terms as "+ -"
            return sp.latex(e, symbol_names=self.latex_names).replace("+ - ", "- ")
        lines = []
        for name, e in self.factors.items():
            lines.append(r"\frac{d%s}{d\tau} &= %s" % (self.latex_names.get(name, name), tex(e)))
        for name, e in self.letters.items():
            if name not in self.factors:
                lines.append(r"\frac{d%s}{d\tau} &= %s" % (self.latex_names.get(name, name), tex(e)))
        for name, e in self.noise.items():
            lines.append(r"%s &\mapsto %s + \left(%s\right)" % (self.latex_names.get(name, name),
                                                              self.latex_names.get(name, name), tex(e)))
        if self.noise:
            lines.append(self.covariance)
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def _repr_latex_(self):
        return "$$" + self.latex() + "$$"

    def __repr__(self):
        return f"<MatrixFlow {self.spec.name}: {', '.join(self.factors)} (package time τ = nα/d)>"


def letter_drifts(spec, c: FlowSymbols) -> dict:
    """letter name → Σ factor · coefficient · (product of the replacement letters), from ``Kind.letter_flow``."""
    from ..kinds import metric_letters
    cidx, names = _coefficient_index(spec)
    sym = [ix.symmetric for ix in spec.indices]
    out = {}
    for k in spec.students:
        flows = spec.indices[k].kind.letter_flow(k, spec.K, cidx, sym, metric_letters(spec))
        for letter, items in flows.items():
            terms = [sp.Rational(str(f)) * c.coef(names[key]) * c.word(repl) for key, repl, f in items]
            out[c.letter_name(letter)] = sp.MatAdd(*terms).doit()
    return out


def _coefficient_index(spec) -> tuple:
    """(name → key, key → name) of the coefficient rules the letter flows index: those of the spec's system."""
    from .hierarchy import symmetric_coefficient_rules
    if all(ix.symmetric for ix in spec.indices):
        rules = symmetric_coefficient_rules(spec)
    else:
        from .untied import untied_coefficient_rules
        rules = untied_coefficient_rules(spec, lambda w: 0, [k for k in spec.students if not spec.indices[k].centred])
    names = [r.name for r in rules]
    return {n: i for i, n in enumerate(names)}, names


def noise_increments(spec, c: FlowSymbols) -> dict:
    """letter name → its change under one SGD step in the increments dΞ: first order Σ_forms coefficient ·
    L dΞ R (dΞᵀ for a transposed form), second order coefficient · dΞ_a middle dΞ_b (``Kind.fluctuation_forms``,
    ``Kind.second_order``; the whitened forms carry Σ)."""
    from ..kinds import metric_letters
    metric = metric_letters(spec)
    out = {}
    for k in spec.students:
        kind = spec.indices[k].kind
        for letter in kind.letters(k):
            dX = c.increment(k)
            terms = []
            for left, t, right, f in kind.fluctuation_forms(letter, metric):
                mid = dX if t == "d" else dX.T
                terms.append(sp.Rational(str(f)) * sp.MatMul(c.word(left), mid, c.word(right)).doit())
            for f, kinds, middle, outer in kind.second_order(letter, metric):
                a = dX if kinds[0] == "d" else dX.T
                b = dX if kinds[1] == "d" else dX.T
                half = len(outer) // 2
                terms.append(sp.Rational(str(f)) * sp.MatMul(c.word(outer[:half]), a, c.word(middle), b,
                                                              c.word(outer[half:])).doit())
            out[c.letter_name(letter)] = sp.MatAdd(*terms).doit()
    return out


def matrix_flow(spec) -> MatrixFlow:
    """The matrix-level flow of a spec (path, dict, example name or Spec): module docstring."""
    from ..spec import load_spec
    from .potential import Potential
    spec = load_spec(spec)
    eq = _equation_symbols(spec, Potential)
    c = FlowSymbols(spec, eq)
    letters = letter_drifts(spec, c)
    factors = {}
    for k in spec.students:
        for name, e in spec.indices[k].kind.factor_flow(k, spec.K, c).items():
            factors[name] = e
    noise = noise_increments(spec, c)
    cov = (r"\mathbb{E}\big[(d\Xi_k)_{ab}(d\Xi_l)_{cd}\big] &= \frac{\varepsilon\, d\tau}{d}\big(\nu^{(1)}_{kl}"
           r"\delta_{ad}\delta_{bc} + \nu^{(2)}_{kl}\delta_{ac}\delta_{bd}\big)")
    names = dict(c.latex_names)
    names.update({EPSILON: r"\varepsilon", GAMMA: r"\gamma", D: "d", R: "r"})
    return MatrixFlow(spec, letters, factors, noise, cov, names)


def _equation_symbols(spec, Potential):
    """The coefficient symbols of the spec's derived system at the least truncation (no quadrature is run:
    the symbols only need the coefficient rules and Φ's order-parameter names)."""
    from . import min_truncation
    from .hierarchy import derive_symmetric
    from .untied import derive_untied
    build = derive_symmetric if all(ix.symmetric for ix in spec.indices) else derive_untied
    system = build(spec, min_truncation(spec), potential=Potential(spec), nu={})
    return Equations(system)


def check_product_rule(spec) -> dict:
    """letter name → (letter drift from the letter flows) − (the product rule on the factor drifts), after
    writing the factor products back as letters; all zero when the two statements of the flow agree."""
    flow = matrix_flow(spec)
    c = FlowSymbols(spec)
    out = {}
    for k in spec.students:
        kind = spec.indices[k].kind
        for name, (expr, rewrite) in kind.letters_from_factors(k, flow.factors, c).items():
            sym = c.symmetric_letters()
            got = _rewrite(expr, rewrite).xreplace(sym)
            d = sp.expand(got - flow.letters[name].xreplace(sym))
            out[name] = sp.Integer(0) if isinstance(d, sp.ZeroMatrix) else d
    return out


def _rewrite(expr, pairs: dict):
    """A MatAdd of products of factors with every adjacent pair (X, Yᵀ) in ``pairs`` replaced by its letter."""
    expr = sp.expand(expr)
    terms = expr.args if isinstance(expr, sp.MatAdd) else (expr,)
    out = []
    for t in terms:
        coeff, mats = t.as_coeff_mmul() if isinstance(t, sp.MatMul) else (1, t)
        seq = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
        scalars = [a for a in seq if not a.is_Matrix]
        seq = [a for a in seq if a.is_Matrix]
        new, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and (seq[i], seq[i + 1]) in pairs:
                new.append(pairs[seq[i], seq[i + 1]])
                i += 2
            else:
                new.append(seq[i])
                i += 1
        out.append(sp.Mul(coeff, *scalars) * sp.MatMul(*new).doit())
    return sp.MatAdd(*out).doit()
