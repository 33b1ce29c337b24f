"""A derived system as mathematics: SymPy right-hand sides, LaTeX and plain text (docs/theory.md §4–§7).

A ``System`` is data: dμ[row]/dτ = Σ val·coef[key]·μ[c1]·μ[c2], plus the velocities of the slaved means
(§6). Here that data is read back into SymPy, on package time τ = nα/d:

* one symbol per state entry — the trace moment μ_w of each word (``symbolic.names``: μ_{sst},
  μ(M_s M_s^⊤ A_s)) and each untied mean m_k;
* one symbol per coefficient — Γ_kl (tied, direct) or Γ^Ω_kl, Γ^Ψ_kl (general, untied), the slaved-mean
  force β̄_k, the noise constants ν, the weight decay γ and the noise ratio ε;
* ``equations(closed=False)``: the right-hand sides in those symbols; ``closed=True`` replaces every
  coefficient by what it is in the moments. For a polynomial Φ, Γ = ∂Φ/∂θ in the full-matrix convention
  (§2: off-diagonal entries halved) with θ the moments of the order parameters, ν its Wick polynomial, β̄_k
  = −ψ_k/D_k: the system is a polynomial (rational, with β̄) ODE in the μ's alone. Where Φ has quadrature
  terms, each coefficient stays a SymPy function of θ (``implemented_function``: differentiable
  symbolically, evaluated numerically by ``lambdify`` through the package's own expectations).

The slaved means obey dm/dτ = −(∂²Φ/∂m²)⁻¹ Σ_j (∂²Φ/∂m∂θ_j) θ̇_j (implicit function theorem, §6); with a
schedule s(τ) every right-hand side is s(τ)·[F(γ s_γ(τ)) + ε s(τ) N] (§3, "Schedules").
"""
from __future__ import annotations

from fractions import Fraction
from functools import cached_property

import numpy as np
import sympy as sp
from sympy.utilities.lambdify import implemented_function

from ..symbolic.gaussian import LABEL_NOISE
from ..symbolic.loss import BETA
from ..symbolic.names import index_symbols, order_parameter_latex, symbol_latex, word_ascii, word_latex
from . import system as S

TAU = sp.Symbol("tau", nonnegative=True)
GAMMA = sp.Symbol("gamma", nonnegative=True)
EPSILON = sp.Symbol("epsilon", nonnegative=True)
TIME_UNIT = r"\tau = n\alpha/d"           # package time (docs/theory.md §3)


def _pair(syms, k, l) -> tuple:
    a, b = syms[k], syms[l]
    ascii_ = a + b if len(a) == len(b) == 1 else f"{a},{b}"
    tex = symbol_latex(a) + symbol_latex(b) if len(a) == len(b) == 1 else symbol_latex(a) + r"," + symbol_latex(b)
    return ascii_, tex


class Equations:
    """The SymPy view of one derived ``System`` (module docstring); built once per system
    (``System.equations``, ``System.symbols``, ``System.latex`` delegate here)."""

    def __init__(self, system):
        self.system = system
        spec = system.spec
        self.spec = spec
        self.syms = index_symbols(spec)
        sym = list(system.alphabet.symmetric)
        self.latex_names = {}                       # Symbol -> LaTeX (sp.latex's symbol_names)
        state = [sp.Integer(1)]
        for w in system.words[1:]:
            s = sp.Symbol(word_ascii(w, self.syms, sym), real=True)
            self.latex_names[s] = word_latex(w, self.syms, sym)
            state.append(s)
        for k in system.mean_indices:
            s = sp.Symbol(f"m_{self.syms[k]}", real=True)
            self.latex_names[s] = f"m_{{{symbol_latex(self.syms[k])}}}"
            state.append(s)
        self.state = state
        self.coefficients = [self._coefficient_symbol(c) for c in system.coefficient_rules]
        self.latex_names.update({GAMMA: r"\gamma", EPSILON: r"\varepsilon", TAU: r"\tau", LABEL_NOISE: r"\Delta"})
        # θ (Φ's order parameters, Potential.names order) as state symbols
        self.theta = [state[i] for i in system.theta_words]
        P = system.potential
        self.theta_subs = dict(zip(P.symbols, self.theta))
        for name, s in zip(P.names, P.symbols):
            self.latex_names.setdefault(s, order_parameter_latex(spec, name))

    # ----------------------------------------------------------------------------------- symbols
    def _coefficient_symbol(self, c):
        """The symbol of one coefficient rule (None for the constants 1 and 0)."""
        if c.source in (S.ONE, S.ZERO):
            return None
        if c.source == S.DECAY:
            return GAMMA
        if c.source == S.GRADIENT:
            mat, k, l = c.args
            a, tex = _pair(self.syms, k, l)
            head, top = {"Gamma": ("Gamma", r"\Gamma"), "GO": ("GammaOmega", r"\Gamma^{\Omega}"),
                         "GP": ("GammaPsi", r"\Gamma^{\Psi}")}[mat]
            s = sp.Symbol(f"{head}_{a}", real=True)
            self.latex_names[s] = f"{top}_{{{tex}}}"
            return s
        if c.source == S.MEAN_FORCE:
            k = c.args[0]
            s = sp.Symbol(f"betabar_{self.syms[k]}", real=True)
            self.latex_names[s] = r"\bar\beta_{%s}" % symbol_latex(self.syms[k])
            return s
        if c.source == S.NOISE:
            head, k, l = c.args[0].split("_")
            a, tex = _pair(self.syms, int(k), int(l))
            s = sp.Symbol(f"{head}_{a}", real=True)
            self.latex_names[s] = {"nu": r"\nu", "nu1": r"\nu^{(1)}", "nu2": r"\nu^{(2)}"}[head] + f"_{{{tex}}}"
            return s
        raise ValueError(f"unknown coefficient source {c.source!r}")

    def symbols(self) -> dict:
        """Word name (``System.word_names()``, e.g. ``S_student·S_teacher``, and ``m_<name>``) → its SymPy
        symbol; then coefficient name (``System.coef_names``: ``Gamma_0_1``, ``GO_0_1``, ``beta_0``,
        ``nu_0_0``, ``gamma``) → its symbol, and ``epsilon`` → ε."""
        out = dict(zip(self.system.word_names()[1:], self.state[1:]))
        for c, s in zip(self.system.coefficient_rules, self.coefficients):
            if s is not None:
                out[c.name] = s
        if any(c.source == S.NOISE for c in self.system.coefficient_rules):
            out["epsilon"] = EPSILON
        return out

    # ----------------------------------------------------------------------------------- closed forms
    @cached_property
    def _gradient(self) -> dict:
        """(matrix, k, l) → GΩ_kl / GΨ_kl / Γ_kl of the full-matrix convention (§2) as expressions in the
        moments: Wick polynomials for a polynomial Φ, else implemented functions of θ."""
        P = self.system.potential
        m_at, m_pos, o_pos, p_pos, w = P.split_plan()
        K = self.spec.K
        out = {}
        if P.quad_terms:
            def impl(mat, k, l):
                def value(*theta):
                    gr = P.gradients(np.array(theta, dtype=float))
                    return float({"GO": gr.omega, "GP": gr.psi, "Gamma": gr.gamma}[mat][k, l])
                name = str(self._coefficient_symbol(S.Coef("", S.GRADIENT, (mat, k, l))))
                return implemented_function(name, value)(*self.theta)
            for mat in ("GO", "GP", "Gamma"):
                for k in range(K):
                    for l in range(K):
                        out[mat, k, l] = impl(mat, k, l)
            return out
        grad = [sp.diff(P.closed_form, s).xreplace(self.theta_subs) for s in P.symbols]
        for k in range(K):
            for l in range(K):
                i = k * K + l
                wi = sp.nsimplify(w[i])
                o, p = sp.expand(wi * grad[o_pos[i]]), sp.expand(wi * grad[p_pos[i]])
                out["GO", k, l], out["GP", k, l], out["Gamma", k, l] = o, p, sp.expand(o + p)
        return out

    def _nu(self, name):
        E = self.system.nu[name]
        if not E.quad_terms:
            return sp.expand(E.closed_form.xreplace(self.theta_subs))
        return implemented_function(str(self._coefficient_symbol(S.Coef(name, S.NOISE, (name,)))),
                                    lambda *theta: float(E.value(np.array(theta, dtype=float))))(*self.theta)

    def coefficient_values(self, closed: bool) -> list:
        """coef[key] as expressions: the coefficient symbols, or (``closed``) what they are in the moments."""
        out = []
        for c, s in zip(self.system.coefficient_rules, self.coefficients):
            if c.source == S.ONE:
                out.append(sp.Integer(1))
            elif c.source == S.ZERO:
                out.append(sp.Integer(0))
            elif c.source == S.DECAY:
                out.append(GAMMA)
            elif c.source == S.NOISE:
                out.append(EPSILON * (self._nu(c.args[0]) if closed else s))
            elif not closed:
                out.append(s)
            elif c.source == S.GRADIENT:
                out.append(self._gradient[c.args])
            elif c.source == S.MEAN_FORCE:
                k, parts, (a, b) = c.args
                psi = 2 * sum(self._gradient[mat, k, l] * (self.state[i] + self.state[i2]) for mat, l, i, i2 in parts)
                out.append(-psi / (self.state[a] + self.state[b]))
        return out

    # ----------------------------------------------------------------------------------- equations
    def _moment_rhs(self, closed: bool) -> list:
        coef = self.coefficient_values(closed)
        rows = [sp.Integer(0)] * self.system.size
        acc = [[] for _ in range(self.system.size)]
        y = self.state
        exact = {}                                  # a term's factor as the rational it is (±1, ±2, 4, ½, …)
        for row, c1, c2, key, val in self.system.terms:
            v = exact.get(float(val))
            if v is None:
                v = exact[float(val)] = sp.Rational(Fraction(float(val)).limit_denominator(10**6))
            acc[int(row)].append(v * coef[int(key)] * y[int(c1)] * y[int(c2)])
        for r, parts in enumerate(acc):
            rows[r] = sp.Add(*parts)
        return rows

    def _phi(self, closed: bool):
        """Φ as an expression in the state: its Wick polynomial, or an undefined function of θ (``closed``
        False, or a Φ with quadrature terms: its derivatives then evaluated numerically, ``_mean_rhs``)."""
        P = self.system.potential
        if closed and not P.quad_terms:
            return P.closed_form.xreplace(self.theta_subs)
        return sp.Function("Phi")(*self.theta)

    def _mean_rhs(self, rows: list, closed: bool, compact: bool = False) -> list:
        """dm/dτ = −(∂²Φ/∂m²)⁻¹ Σ_j ∂²Φ/∂m∂θ_j θ̇_j of the trainable means (§6); θ_j over the other order
        parameters. A Φ with quadrature terms: the second derivatives as implemented functions of θ.
        ``compact``: θ̇_j left as the symbols \\dot μ (the equations above it), for printing."""
        sysm = self.system
        if not sysm.mean_trainable:
            return rows
        P = sysm.potential
        means = [self.state[sysm.mean_state[k]] for k in sysm.mean_trainable]
        others = [j for j, s in enumerate(self.theta) if s not in means]
        if compact:
            theta_dot = {}
            for j in others:
                dot = sp.Symbol(f"dot_{self.theta[j]}", real=True)
                self.latex_names[dot] = r"\dot{%s}" % self.latex_names[self.theta[j]]
                theta_dot[j] = dot if rows[sysm.theta_words[j]] != 0 else sp.Integer(0)
        else:
            theta_dot = {j: rows[sysm.theta_words[j]] for j in others}
        if closed and P.quad_terms:
            H, X = self._numeric_mean_derivatives(means, others)
        else:
            phi = self._phi(closed)
            H = sp.Matrix([[sp.diff(phi, a, b) for b in means] for a in means])
            X = sp.Matrix([[sp.diff(phi, a, self.theta[j]) for j in others] for a in means])
        v = X * sp.Matrix([theta_dot[j] for j in others])
        vel = -(H.inv() * v) if len(means) > 1 else -v / H[0, 0]
        rows = list(rows)
        for n, k in enumerate(sysm.mean_trainable):
            rows[sysm.mean_state[k]] = vel[n] if len(means) > 1 else vel[0]
        return rows

    def _numeric_mean_derivatives(self, means, others):
        """∂²Φ/∂m∂m and ∂²Φ/∂m∂θ_j as implemented functions of θ: Φ's exact Hessian in the means and central
        differences of its exact gradient (``derivation.means``)."""
        from .means import FD_STEP
        P, sysm = self.system.potential, self.system
        pos = list(sysm.mean_pos)

        def hess(a, b):
            return lambda *th: float(P.mean_hessian(np.array(th, dtype=float), pos)[a, b])

        def cross(a, j):
            def value(*th):
                th = np.array(th, dtype=float)
                e = np.zeros_like(th)
                e[j] = FD_STEP
                g = lambda x: P.value_and_gradient(x)[1][pos[a]]      # noqa: E731
                return float((g(th + e) - g(th - e)) / (2 * FD_STEP))
            return value
        n = len(means)
        H = sp.Matrix([[implemented_function(f"Phi_{means[a]}_{means[b]}", hess(a, b))(*self.theta)
                        for b in range(n)] for a in range(n)])
        X = sp.Matrix([[implemented_function(f"Phi_{means[a]}_{self.theta[j]}", cross(a, j))(*self.theta)
                        for j in others] for a in range(n)])
        return H, X

    def _scheduled(self, rows: list) -> list:
        """s(τ)·[F(γ s_γ(τ)) + ε s(τ) N] with a non-constant schedule (§3), the factors as implemented
        functions of τ."""
        sched = self.spec.schedule
        if sched.constant:
            return rows
        s = implemented_function("s", lambda t: float(sched(t)))(TAU)
        sg = implemented_function("s_gamma", lambda t: float(sched.gamma_factor(t)))(TAU)
        sub = {GAMMA: GAMMA * sg, EPSILON: EPSILON * s}
        return [s * r.xreplace(sub) for r in rows]

    def rhs(self, closed: bool = False, compact: bool = False) -> list:
        """Right-hand sides of every state entry (entry 0, the constant 1, has 0); ``compact``: the slaved
        means' velocities in the symbols θ̇ of the moment equations (``_mean_rhs``), for printing."""
        rows = self._moment_rhs(closed)
        rows = self._mean_rhs(rows, closed, compact)
        return self._scheduled(rows)

    def _printed(self, closed: bool) -> tuple:
        """What the printers show, as a theorist writes it: (the equations in the coefficient symbols, the
        slaved means' rows compact in θ̇; with ``closed``, the definitions {coefficient symbol: its closed form
        in the moments}, each written once instead of substituted into every row)."""
        key = ("printed", closed)
        if key not in self._cache:
            rows = self.rhs(False, compact=True)
            defs = {}
            if closed:
                sysm = self.system
                if sysm.mean_trainable:
                    closed_rows = self.rhs(True, compact=True)
                    for k in sysm.mean_trainable:
                        rows[sysm.mean_state[k]] = closed_rows[sysm.mean_state[k]]
                for c, s, v in zip(sysm.coefficient_rules, self.coefficients, self.coefficient_values(True)):
                    if s is not None and s is not GAMMA:
                        defs[s] = v / EPSILON if c.source == S.NOISE else v
            self._cache[key] = (dict(zip(self.system.word_names()[1:], rows[1:])), defs)
        return self._cache[key]

    @cached_property
    def _cache(self) -> dict:
        return {}

    def equations(self, closed: bool = False) -> dict:
        """Word name → dμ_w/dτ (module docstring), and m_<name> → dm/dτ of the means; every state entry but the
        constant 1 (a frozen teacher's words: 0)."""
        if closed not in self._cache:
            rows = self.rhs(closed)
            self._cache[closed] = dict(zip(self.system.word_names()[1:], rows[1:]))
        return dict(self._cache[closed])

    # ----------------------------------------------------------------------------------- output
    def _latex_lines(self, closed: bool) -> tuple:
        """(the LaTeX lines ``\\frac{dμ}{dτ} &= …`` of the moving entries, the LaTeX of the constant ones)."""
        names = dict(zip(self.system.word_names(), self.state))
        lines, frozen = [], []
        eqs, defs = self._printed(closed)
        for n, rhs in eqs.items():
            lhs = sp.latex(names[n], symbol_names=self.latex_names)
            if rhs == 0:
                frozen.append(lhs)
                continue
            body = sp.latex(rhs, symbol_names=self.latex_names, long_frac_ratio=3)
            lines.append(r"\frac{d%s}{d\tau} &= %s" % (lhs, body))
        for s, v in defs.items():
            lines.append(r"%s &= %s" % (sp.latex(s, symbol_names=self.latex_names),
                                        sp.latex(v, symbol_names=self.latex_names, long_frac_ratio=3)))
        return lines, frozen

    def latex(self, closed: bool = False) -> str:
        """The equations of the moving state entries as a LaTeX ``aligned`` block, time derivative in package
        time τ = nα/d."""
        return "\\begin{aligned}\n" + " \\\\\n".join(self._latex_lines(closed)[0]) + "\n\\end{aligned}"

    def latex_document(self, closed: bool = False) -> str:
        """A LaTeX document of the equations (amsmath ``align*``, page breaks allowed): what
        ``symattn derive SPEC --equations latex`` prints; compiles with pdflatex as it is."""
        lines, frozen = self._latex_lines(closed)
        sysm = self.system
        how = "the coefficients' closed forms in the moments after the equations" if closed else \
            r"in the coefficients $\Gamma$, $\bar\beta$, $\nu$, $\gamma$, $\varepsilon$"
        title = (sysm.spec.name.replace("_", r"\_") + f": {sysm.description}, truncation $M = {sysm.truncation}$, "
                 f"{sysm.size} moments, {how}. Package time ${TIME_UNIT}$"
                 + (f"; constant: ${', '.join(frozen)}$" if frozen else "") + ".")
        return ("\\documentclass[a4paper,10pt]{article}\n\\usepackage[margin=1.5cm,landscape]{geometry}\n"
                "\\usepackage{amsmath,amssymb}\n\\allowdisplaybreaks\n\\begin{document}\n\\noindent " + title
                + "\n\\begin{align*}\n" + " \\\\\n".join(lines) + "\n\\end{align*}\n\\end{document}\n")

    def text(self, closed: bool = False) -> list:
        """The equations as plain-text lines ``d mu_st/dtau = …`` (ASCII symbol names)."""
        out = []
        names = dict(zip(self.system.word_names(), self.state))
        eqs, defs = self._printed(closed)
        for n, rhs in eqs.items():
            if rhs != 0:
                out.append(f"d {names[n]}/dtau = {sp.sstr(rhs)}")
        if defs:
            out.append("where")
            out += [f"    {s} = {sp.sstr(v)}" for s, v in defs.items()]
        return out

    def jacobian(self, closed: bool = True) -> sp.Matrix:
        """∂(dy/dτ)/∂y over the moving state entries (rows and columns in ``equations`` order)."""
        eqs = {n: r for n, r in self.equations(closed).items() if r != 0}
        names = dict(zip(self.system.word_names(), self.state))
        ys = [names[n] for n in eqs]
        return sp.Matrix([[sp.diff(r, y) for y in ys] for r in eqs.values()])

    def function(self, closed: bool = True, epsilon: float | None = None, gamma: float | None = None, rows=None):
        """f(τ, y) → dy/dτ as a NumPy array over the whole state (``System.size``), lambdified from the
        equations (``closed``: the coefficients' closed forms or implemented functions); γ, ε, the label-noise
        variance and β at the spec's values unless given; ``rows``: only these state entries (the others 0; the
        slaved means' rows need all the moments' rows)."""
        if rows is None or any(r in self.system.mean_state.values() for r in rows):
            rows = self.rhs(closed)
        else:
            every = self._moment_rhs(closed)
            rows = self._scheduled([every[i] if i in set(rows) else sp.Integer(0) for i in range(len(every))])
        spec = self.spec
        if epsilon is None:
            epsilon = spec.noise_ratio if spec.noise_ratio is not None else 0.0
        values = {GAMMA: spec.weight_decay if gamma is None else gamma, EPSILON: epsilon,
                  LABEL_NOISE: self.system.potential.label_noise, BETA: self.system.potential.beta}
        plain = [sp.Symbol(f"y{i}", real=True) for i in range(1, len(self.state))]   # identifiers: no re-dummying
        values.update(zip(self.state[1:], plain))
        exprs = [sp.sympify(r).xreplace(values) for r in rows]
        f = sp.lambdify([sp.Symbol("t"), plain], [e.xreplace({TAU: sp.Symbol("t")}) for e in exprs],
                        modules="numpy", dummify=False)

        def rhs(t, y):
            y = np.asarray(y, dtype=float)
            return np.array([float(v) for v in f(t, list(y[1:]))])
        return rhs


def column_equations(system, closed: bool = True) -> dict:
    """A system whose right-hand sides are functions of its CSV columns alone (the closed direct and general
    systems at M = 2) as an ODE in those columns: column name → d(column)/dτ in the columns' symbols (``q_s_t``
    as ``sp.Symbol("q_student_teacher")``); p = q − c·tr_a·tr_b by the product rule. ValueError for a
    hierarchy whose right-hand side reads moments that are no column."""
    eq = system._sympy
    rhs = eq.rhs(closed)
    col_of = {}                                  # state entry -> column symbol
    for c in system.columns:
        if c.source == S.STATE and c.args[0] not in col_of:
            col_of[c.args[0]] = sp.Symbol(c.name, real=True)
    for k in system.mean_indices:
        col_of.setdefault(system.mean_state[k], sp.Symbol(f"m_{system.spec.names[k]}", real=True))
    to_cols = {eq.state[i]: s for i, s in col_of.items()}
    out = {}
    for c in system.columns:
        if c.source == S.STATE:
            expr = rhs[c.args[0]].xreplace(to_cols)
        elif c.source == S.CENTRED:
            i, a, b, *factor = c.args
            f = factor[0] if factor else 1
            expr = (rhs[i] - f * (rhs[a] * eq.state[b] + eq.state[a] * rhs[b])).xreplace(to_cols)
        else:
            continue
        left = expr.free_symbols - set(to_cols.values()) - {GAMMA, EPSILON, TAU, LABEL_NOISE, BETA}
        left = {s for s in left if s in set(eq.state)}
        if left:
            raise ValueError(f"{system.spec.name}: the right-hand side of {c.name} reads moments that are no CSV "
                             f"column ({', '.join(sorted(map(str, left)))}); use equations() instead")
        out[c.name] = sp.expand(expr) if closed and not system.potential.quad_terms else expr
    return out
