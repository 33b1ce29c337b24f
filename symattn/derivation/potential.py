"""The population loss Φ(θ) = E_G 𝓛(G) and its gradient (docs/theory.md §2).

Polynomial terms of 𝓛 are integrated exactly (Isserlis/Wick, ``symbolic.gaussian``); the
others by Gauss–Hermite quadrature over the entries they depend on (``symbolic.quadrature``).
Gradients: exact differentiation of the closed form, Price's theorem for the quadrature.

Conventions of the returned gradient matrices (full-matrix convention, docs/theory.md §2): with
dΦ = Σ_k g_k dm_k + Σ_{k,l} (GΩ_kl dΩ_kl + GΨ_kl dΨ_kl) over *ordered* pairs, so an
off-diagonal entry is half the derivative in the single symmetric variable. For a pair with
Ω = Ψ = q the derivative in q is split evenly, and the tied Γ = GΩ + GΨ.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from functools import cached_property

import numpy as np
import sympy as sp

from ..errors import SpecError
from ..spec import Spec, load_spec, require_spec
from ..symbolic.calibration import Calibrated
from ..symbolic.gaussian import BETA, LABEL_NOISE, GaussianG, OrderParameters, integrate_label_noise
from ..symbolic.loss import beta_of, build_loss
from ..symbolic.quadrature import (
    MAX_NODES,
    QuadTerm,
    SeparableTerm,
    canonical_basis,
    half_width_for,
    invariant_projection,
    least_nodes,
    max_dimension,
)
from ..transient import PicklesWithoutCaches
from .split import Gradients, GradientSplit, growth_limits, theta_of


def beta_homogeneous(h, variables):
    """(p, g) with h(G) = β^p g(βG) and g free of β (``BETA``): h written in H = βG. The MSE loss of a
    softmax depends on G only through βG, and each ∂/∂G brings one β (the SGD-noise integrands ν)."""
    if not h.has(BETA):
        return 0, h
    g = h.xreplace({v: v / BETA for v in variables})
    if not g.has(BETA):
        return 0, g
    for form in (g, sp.factor_terms(g)):             # a product first: its factors as they are
        rest, dep = form.as_independent(BETA, as_Add=False)
        p = sp.Integer(1) if dep == BETA else (dep.exp if dep.is_Pow and dep.base == BETA else None)
        if p is not None and p.is_integer and not rest.has(BETA):
            return int(p), rest
    raise ValueError(f"a loss term is not a function of β·G: {h}")


@contextmanager
def at_beta(expectations, beta: float):
    """Evaluate (and calibrate) the given expectations at inverse temperature β instead of the spec's."""
    saved = [E.__dict__.get("_beta") for E in expectations]
    for E in expectations:
        E.__dict__["_beta"] = float(beta)
    try:
        yield
    finally:
        for E, b in zip(expectations, saved):
            if b is None:
                E.__dict__.pop("_beta", None)
            else:
                E.__dict__["_beta"] = b


class GaussianExpectation(Calibrated, PicklesWithoutCaches):
    """E[f(G, ξ)] over the Gaussian law of docs/theory.md §2 as a function of the order parameters θ.

    ``terms`` sum to f; polynomial ones are integrated exactly (Wick), the others are grouped by
    the entries they depend on and integrated by quadrature (tolerance ``tol``).
    """

    TRANSIENT = ("_closed", "_mean_hessians", "_scaled", "_beta", "_split", "_limits", "_at", "_kernels")    # lambdified / scaled copies: rebuilt after unpickling

    def __init__(self, spec, terms, tol: float = 1e-8, gauss: GaussianG | None = None, gradient: bool = True,
                 relative: bool = False, start_order: int = 17, max_nodes: int = MAX_NODES):
        self.spec: Spec = require_spec(spec, "GaussianExpectation")
        self.tol, self.gradient, self.relative, self.start_order = tol, gradient, relative, start_order
        self.max_nodes = max_nodes
        if gauss is None:
            gauss = GaussianG(build_loss(self.spec), OrderParameters(self.spec))
        self.gauss, self.op = gauss, gauss.op
        self.symbols = self.op.symbols
        self.names = self.op.names
        gvars = set(self.gauss.index)
        xis = [v for v, where in self.gauss.index.items() if where[0] == "xi"]
        poly, groups = [], {}
        self.symbolic_terms = {}             # the non-polynomial part, by the entries of G it reads (``expression``)
        for term in terms:
            for k, h in integrate_label_noise(term, xis):       # E_ξ first: Σ_k s^{2k} h_k(G)
                vs = h.free_symbols & gvars
                if h.is_polynomial(*vs):
                    poly.append(LABEL_NOISE**k * h)
                else:
                    p, g = beta_homogeneous(h, vs)
                    key = (tuple(sorted(vs, key=lambda s: s.name)), k, p)
                    groups[key] = groups.get(key, 0) + g
                    self.symbolic_terms[key[0]] = self.symbolic_terms.get(key[0], 0) + LABEL_NOISE**k * h
        self.closed_form = sp.expand(sum((self.gauss.expect_polynomial(t) for t in poly), sp.Integer(0)))
        # the β = 1 integrands with the β-free Gaussian data; ``quad_terms`` are them at the spec's β
        bases = {key: self._within_limits(expr, list(key[0])) for key, expr in groups.items()}
        self.base_terms = [self._quad_term(expr, list(vs), k, p, P=bases[vs, k, p])
                           for (vs, k, p), expr in groups.items()]
        self._orders = {}                    # (β, initial laws) -> (the calibrated orders, one per term, their error)

    def _within_limits(self, expr, variables):
        """The term's projection onto the directions it depends on (None: computed by ``QuadTerm``), after
        checking, before any symbolic work on the term, that its quadrature fits: at most
        ``max_dimension`` directions; beyond, SpecError (exit 2) with the estimate (docs/theory.md §2,
        "Limits")."""
        limit = max_dimension(self.start_order, self.max_nodes, self.tol)
        if len(variables) <= limit:
            return None
        P = canonical_basis(invariant_projection(expr, variables))
        r = P.shape[0]
        if r > limit:
            spec = self.spec
            key = "model.loss" if spec.loss is not None else f"model.tokens = {spec.tokens} (activation {spec.activation})"
            n = least_nodes(self.start_order, self.tol)
            raise SpecError(f"{key}: a term of the loss depends on {r} directions of the pre-activations G "
                            f"({len(variables)} entries); its Gaussian quadrature needs at least {n} nodes per "
                            f"direction, {n}^{r} = {float(n) ** r:.1e} nodes, beyond the limit of {self.max_nodes:.0e} "
                            f"(at most {limit} directions; a softmax of L tokens needs 2(L − 1)): refused "
                            f"before any work (docs/theory.md §2, Limits)")
        return P

    def _quad_term(self, expr, variables, noise_power: int = 0, beta_power: int = 0, P=None):
        """QuadTerm with μ, Σ of its variables written as affine functions of θ; its value enters
        multiplied by s^(2·noise_power) (the label-noise variance, ``label_noise``) and β^beta_power."""
        p, n = len(self.symbols), len(variables)
        mu = [self.gauss.mean(v) for v in variables]
        cov = [[self.gauss.cov(a, b) for b in variables] for a in variables]
        zero = {s: 0 for s in self.symbols}

        def coeffs(e):
            e = sp.sympify(e)
            return float(e.subs(zero)), [float(sp.diff(e, s)) for s in self.symbols]

        mu0, mut = np.zeros(n), np.zeros((p, n))
        cov0, covt = np.zeros((n, n)), np.zeros((p, n, n))
        for a in range(n):
            mu0[a], mut[:, a] = coeffs(mu[a])
            for b in range(n):
                cov0[a, b], covt[:, a, b] = coeffs(cov[a][b])
        # separable cross terms through two grids and a kernel (Φ and its gradient only: the generated
        # modules evaluate the tensor rule, so value-only expectations such as ν keep it, bit for bit)
        cls = SeparableTerm if self.gradient and SeparableTerm.usable(expr, variables) else QuadTerm
        return cls(expr, variables, mu0, mut, cov0, covt, P=P, gradient=self.gradient,
                   half_width=half_width_for(self.tol), max_nodes=self.max_nodes, noise_power=noise_power,
                   beta_power=beta_power)

    @property
    def is_closed_form(self) -> bool:
        return not self.base_terms

    @property
    def beta(self) -> float:
        """The softmax inverse temperature β the Python evaluation uses (the spec's; a run-time
        argument of the generated module, 1 where the loss has none)."""
        if "_beta" in self.__dict__:
            return self.__dict__["_beta"]
        return beta_of(self.spec)

    @property
    def quad_terms(self) -> list:
        """The quadrature terms at β: the β = 1 integrands over N(βμ, β²Σ) (``QuadTerm.scaled``)."""
        b = self.beta
        if b == 1.0:
            return self.base_terms
        cache = self.__dict__.setdefault("_scaled", {})
        if b not in cache:
            cache[b] = [t.scaled(b) for t in self.base_terms]
        return cache[b]

    @property
    def _calibration(self) -> tuple:
        """(β, the spec's initial laws): the state the quadrature orders are calibrated for — at the free
        initial state, so another init_scale or width is another calibration (``Spec.initial_laws``)."""
        at = self.__dict__.get("_at")
        if at is None or at[0] is not self.spec:
            at = self.__dict__["_at"] = (self.spec, self.spec.initial_laws)
        return self.beta, at[1]

    @property
    def order(self):
        """The quadrature orders calibrated for the current β and initial laws (None before ``calibrate``)."""
        return self._orders.get(self._calibration, (None, 0.0))[0]

    @order.setter
    def order(self, value):
        if value is None:
            self._orders.pop(self._calibration, None)
        else:
            self._orders[self._calibration] = (tuple(value), self.error)

    @property
    def error(self) -> float:
        """The error estimate of the orders at the current β and initial laws (0 before ``calibrate``)."""
        return self._orders.get(self._calibration, (None, 0.0))[1]

    @error.setter
    def error(self, value):
        self._orders[self._calibration] = (self.order, float(value))

    def weight(self, term, s2: float) -> float:
        """The factor s^(2·noise_power) β^beta_power of a quadrature term."""
        return s2**term.noise_power * self.beta**term.beta_power

    @property
    def label_noise(self) -> float:
        """The label-noise variance s² the Python evaluation uses (the spec's; a run-time argument of
        the generated module)."""
        return self.spec.label_noise_variance

    @cached_property
    def _closed(self):
        args = [self.symbols, LABEL_NOISE, BETA]
        f = sp.lambdify(args, self.closed_form, modules="numpy")
        g = sp.lambdify(args, [sp.diff(self.closed_form, s) for s in self.symbols], modules="numpy")
        return f, g

    def closed_gradient(self) -> list:
        """Exact ∂Φ/∂θ of the closed-form part, one SymPy expression per symbol."""
        return [sp.expand(sp.diff(self.closed_form, s)) for s in self.symbols]

    def expression(self) -> sp.Expr:
        """E f as a SymPy expression in θ: the Wick polynomial of the polynomial terms plus, per group of entries of
        G that a non-polynomial term reads, the object E_{G∼N(m(θ), C(θ))}[f(G)] (``symbolic.expectation``),
        which ``sp.diff`` differentiates by Price's theorem."""
        from ..symbolic.expectation import GaussianMean
        out = self.closed_form
        for vs, h in self.symbolic_terms.items():
            out += GaussianMean(h, vs, [self.gauss.mean(v) for v in vs], [[self.gauss.cov(a, b) for b in vs] for a in vs])
        return out

    def latex_names(self) -> dict:
        """symbol → LaTeX of the order parameters (q_{st}, q^{(1)}_{st}, m_{s}), the label-noise variance Δ, β."""
        from ..symbolic.names import order_parameter_latex
        out = {s: order_parameter_latex(self.spec, s.name) for s in self.symbols}
        out.update({LABEL_NOISE: r"\Delta", BETA: r"\beta"})
        return out

    def latex(self) -> str:
        """Φ in readable symbols (q_{ss}, q_{st}): its closed form, or with quadrature terms the Gaussian
        expectations it is (``expression``)."""
        return sp.latex(self.expression(), symbol_names=self.latex_names())

    def _repr_latex_(self):
        return r"$$\Phi = %s$$" % self.latex()

    def __repr__(self):
        what = "closed form" if self.is_closed_form else f"closed form + {len(self.symbolic_terms)} Gaussian expectation(s)"
        return f"<{type(self).__name__} of {self.spec.name}: {what} in {', '.join(self.names)}>"

    # ------------------------------------------------------------------ evaluation
    def theta(self, values) -> np.ndarray:
        """Order parameters as an array in ``self.names`` order from a dict (keys: names or SymPy symbols) or an
        array (``split.theta_of``)."""
        return theta_of(self.names, values)

    @property
    def has_quadrature(self) -> bool:
        """Whether Φ (or this ν) has terms integrated by quadrature (their orders are calibrated per state)."""
        return bool(self.base_terms)

    @property
    def _growth_limits(self) -> list:
        """The ``split.GrowthLimit`` of each quadrature term at β whose expectation exists only below a variance
        of some variable (``symbolic.growth``); [] for most losses."""
        cache = self.__dict__.setdefault("_limits", {})
        b = self.beta
        if b not in cache:
            cache[b] = growth_limits(self.quad_terms)
        return cache[b]

    def check_existence(self, theta) -> None:
        """Raise ExpectationUndefined naming the first quadrature term whose Gaussian expectation does not
        exist at θ: along a variable y it grows like exp(c y²) and Var y ≥ 1/(2c) (every Var y > 0 when it
        grows faster than any Gaussian). A few multiply-adds per term with such growth; nothing otherwise."""
        for limit in self._growth_limits:
            limit.check(theta)

    def _term_values(self, i: int, theta, rule, half_width: float | None = None) -> tuple:
        """(E f, ∂E f/∂θ) of ``quad_terms[i]`` on the rule (n, kind), on a window of ``half_width`` if given:
        the Python quadrature, or the compiled kernels lent by ``evaluated_by`` (the calibration's
        evaluations — the same nodes, to round-off)."""
        lent = self.__dict__.get("_kernels")
        if lent is not None:
            return lent(i, theta, rule, half_width)
        t = self.quad_terms[i]
        if half_width is not None:
            t = copy.copy(t)
            t.half_width = half_width
        return t.evaluate(theta, 0, rule)

    @contextmanager
    def evaluated_by(self, kernels):
        """Calibrate (``calibrate``: the orders, the tail check) with ``kernels(i, θ, (n, kind), half_width)``
        — a generated module's compiled expectations (``codegen.systems.compiled_terms``) — in place of the
        Python quadrature."""
        self.__dict__["_kernels"] = kernels
        try:
            yield self
        finally:
            self.__dict__.pop("_kernels", None)

    def value_at_order(self, values) -> float:
        """Φ(θ) with the current quadrature order (no recalibration)."""
        th = self.theta(values)
        s2 = self.label_noise
        return float(self._closed[0](th, s2, self.beta)) + sum(
            self.weight(t, s2) * self._term_values(i, th, t.rule(o))[0]
            for i, (t, o) in enumerate(zip(self.quad_terms, self.order)))

    def value_and_gradient(self, values):
        """(Φ(θ), ∂Φ/∂θ) with ∂ in the plain partial-derivative sense, in ``self.names`` order."""
        th = self.theta(values)
        f, g = self._closed
        s2 = self.label_noise
        val = float(f(th, s2, self.beta))
        grad = np.array(g(th, s2, self.beta), dtype=float).reshape(-1) if self.symbols else np.zeros(0)
        grad = np.broadcast_to(grad, (len(self.symbols),)).copy()
        if self.quad_terms:
            if self.order is None:
                self.calibrate(th)
            self.check_existence(th)
            for t, o in zip(self.quad_terms, self.order):
                v, gr = t.evaluate(th, o)
                val += self.weight(t, s2) * v
                grad += self.weight(t, s2) * gr
        return val, grad

    def value(self, values) -> float:
        return self.value_and_gradient(values)[0]

    def mean_hessian(self, values, positions) -> np.ndarray:
        """∂²Φ/∂θ_a∂θ_b over ``positions`` (parameters that only shift the mean of G, the m_k):
        SymPy's second derivatives of the closed form plus the quadrature terms' μ_aᵀE[∇²f]μ_b."""
        th, pos = self.theta(values), tuple(int(p) for p in positions)
        fn = self._mean_hessians.get(pos)
        if fn is None:
            syms = [self.symbols[p] for p in pos]
            fn = sp.lambdify([self.symbols, LABEL_NOISE, BETA],
                             [[sp.diff(self.closed_form, a, b) for b in syms] for a in syms], modules="numpy")
            self._mean_hessians[pos] = fn
        s2 = self.label_noise
        H = np.array(fn(th, s2, self.beta), dtype=float).reshape(len(pos), len(pos))
        if self.quad_terms:
            if self.order is None:
                self.calibrate(th)
            self.check_existence(th)
            for t, o in zip(self.quad_terms, self.order):
                H += self.weight(t, s2) * t.mean_hessian(th, o, pos)
        return H

    @cached_property
    def _mean_hessians(self) -> dict:
        return {}


class Potential(GaussianExpectation):
    """Φ of one spec as a function of the order parameters named like the CSV columns."""

    def __init__(self, spec, tol: float = 1e-8):
        spec = require_spec(spec, "Potential")
        self.loss = build_loss(spec)
        super().__init__(spec, self.loss.terms, tol, GaussianG(self.loss, OrderParameters(spec)))

    def gradients(self, values) -> Gradients:
        """∂Φ as the matrices g_m, GΩ, GΨ of the full-matrix convention (module docstring)."""
        _, grad = self.value_and_gradient(values)
        return self.split_gradient(grad)

    def gradient_matrices(self, thetas) -> tuple:
        """(GΩ, GΨ), each (R, K, K), at the R rows of ``thetas``: ``gradients`` of each row, split at once."""
        return self.split_gradients(np.array([self.value_and_gradient(row)[1] for row in thetas]))

    def split_gradients(self, grads) -> tuple:
        """(GΩ, GΨ), each (R, K, K), from R rows of plain partials (``split_gradient`` of each row)."""
        return self.split.matrices(grads)

    def split_gradient(self, grad) -> Gradients:
        """g_m, GΩ, GΨ from the plain partials ``grad`` (``split_plan``, built once)."""
        return self.split.gradients(grad)

    @property
    def split(self) -> GradientSplit:
        """``split_plan`` as a ``split.GradientSplit`` (built once)."""
        plan = self.__dict__.get("_split")
        if plan is None:
            plan = self._split = GradientSplit(self.spec.K, *self.split_plan())
        return plan

    def split_plan(self):
        """The full-matrix convention (module docstring) as data: (indices k with a mean, the positions
        of their ∂Φ/∂m_k in θ, per entry (k, l) row-major the positions of ∂Φ/∂Ω_kl and ∂Φ/∂Ψ_kl, and
        the weight of both: ½ off the diagonal (ordered pairs), ½ again where Ω = Ψ = q, the derivative
        in q split evenly). The Python split and the generated coefficient lines read it."""
        K = self.spec.K
        pos = {n: i for i, n in enumerate(self.names)}
        m_at = [k for k in range(K) if self.op.m(k) != 0]
        m_pos = [pos[self.op.m(k).name] for k in m_at]
        o_pos, p_pos, w = [], [], []
        for k in range(K):
            for l in range(K):
                so, sq = self.op.omega(k, l), self.op.psi(k, l)
                o_pos.append(pos[so.name])
                p_pos.append(pos[sq.name])
                w.append((1.0 if k == l else 0.5) * (0.5 if so == sq else 1.0))
        return (np.array(m_at, dtype=int), np.array(m_pos, dtype=int), np.array(o_pos, dtype=int),
                np.array(p_pos, dtype=int), np.array(w))

    def gamma(self, values) -> np.ndarray:
        return self.gradients(values).gamma

    def infeasible(self, values, tol: float = 1e-10) -> str | None:
        """Why θ is no point of the feasible set, or None: Ω_kl = Tr(S_k S_lᵀ)/d and Ψ_kl = Tr(S_k S_l)/d are Gram
        matrices of real matrices, so (Ω + Ψ)/2 (of the symmetric parts) and (Ω − Ψ)/2 (of the skew parts) are
        positive semi-definite (P eq. 398; for symmetric matrices Ω = Ψ = q, the Gram matrix of the S_k)."""
        th = dict(zip(self.names, self.theta(values)))
        K = self.spec.K
        omega = np.array([[th[self.op.omega(k, l).name] for l in range(K)] for k in range(K)])
        psi = np.array([[th[self.op.psi(k, l).name] for l in range(K)] for k in range(K)])
        for label, G in (("(Ω + Ψ)/2", 0.5 * (omega + psi)), ("(Ω − Ψ)/2", 0.5 * (omega - psi))):
            w, U = np.linalg.eigh(G)
            if w.min() < -tol * max(1.0, np.abs(w).max()):
                v = U[:, 0]
                where = ", ".join(f"{self.spec.names[k]}" for k in np.flatnonzero(np.abs(v) > 1e-8))
                return (f"the order parameters are no Gram matrix of real matrices: {label} over "
                        f"{where} has the eigenvalue {w.min():.4g} < 0 (q_kl = Tr(S_k S_l)/d needs "
                        f"|q_kl| ≤ √(q_kk q_ll); P eq. 398)")
        return None

    def gradient_named(self, values) -> dict:
        """docs/interface.md ``potential --json`` gradient: Γ convention (off-diagonal halved) by name."""
        _, grad = self.value_and_gradient(values)
        out = {}
        for n, gval in zip(self.names, grad):
            parts = n.split("_")
            off = len(parts) == 3 and parts[1] != parts[2]
            out[n] = float(gval) * (0.5 if (n.startswith("q") and off) else 1.0)
        return out


def potential(spec, tol: float = 1e-8) -> Potential:
    """Φ of a spec (path, dict or Spec)."""
    return Potential(load_spec(spec), tol=tol)
