"""Deterministic Gaussian quadrature of non-polynomial loss terms (docs/theory.md §2).

A term f of the loss depends on a few entries x = (G.., ξ..) only (read off its SymPy free
symbols). It often depends on fewer directions still (a softmax row only on differences): the
directions v with v·∇f ≡ 0 are found numerically and verified, so f(x) = f(PᵀP x) with P the
r×n orthonormal basis of the remaining ones. Then, with y = P x ~ N(Pμ, PΣPᵀ) = N(μ_y, B Bᵀ),

    E f(x) = Σ_q w_q f(Pᵀ(μ_y + B z_q))        (tensor trapezoidal rule in r dimensions)

with B = Σ_y^{1/2} the symmetric square root, so that the grid is aligned with the canonical
basis P (Gram–Schmidt of the coordinate directions): unique even for degenerate Σ_y, and it
converges ~10× faster than an eigenvector-aligned grid for the softmax rows of L = 3.

and the gradient in the order parameters θ follows from Price's theorem:

    ∂Φ/∂θ = Σ_a ∂μ_a/∂θ E[∂_a f] + ½ Σ_ab ∂Σ_ab/∂θ E[∂_a ∂_b f].

Where ∂²f has a Dirac mass (relu), E[∂_a∂_b f] comes from Stein's lemma with one derivative,
E[∇²g(y)] = E[∇g(y) ⊗ Σ_y⁻¹(y − μ_y)]. The number n of nodes per dimension is raised until two successive
orders agree to the requested tolerance; that difference is the reported error estimate.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import sympy as sp

from ..transient import PicklesWithoutCaches
from .jumps import ae_gradient, is_smooth, smoothness
from .quadrature_rule import (
    HALF_WIDTH,
    MIN_TRAPEZOID,
    STEIN_CONDITION,
    node_map_conditioned,
    price_gradient,
    rule_1d,
    rule_for,
    scaled_law,
    score_moments,
    stein_hessian,
    tensor_points,
)

MAX_NODES = 2_000_000
COARSEST = 4     # nodes per dimension of the coarsest rule worth calibrating (Gauss–Hermite, exact to degree 7)


def least_nodes(start: int, tol: float) -> int:
    """Nodes per direction a calibration needs at least: its first order ``start`` for a tight tolerance
    (< 1e-4: Φ and ∇Φ start at 17), COARSEST for a coarse one (the SGD-noise constants ν, to 2e-2)."""
    return start if tol < 1e-4 else COARSEST


def max_dimension(start: int, max_nodes: int, tol: float) -> int:
    """The most directions a term may have within ``max_nodes`` at ``least_nodes`` per direction: Φ five
    (17⁵ = 1.4e6 ≤ 2e6 < 17⁶), ν eight (4⁸ ≤ 2e5: two heads of softmax L = 2 need them)."""
    least = least_nodes(start, tol)
    r = 1
    while least ** (r + 1) <= max_nodes:
        r += 1
    return r


def half_width_for(tol: float) -> float:
    """Half-width z_max of the rule: the Gaussian mass beyond it, 2Φc(z_max) per dimension, stays
    well below tol — z_max = √(2 ln(1/tol)) + 0.5 for tight tolerances (6.57 at 1e-8: mass 5e-11,
    ≤ 1e-8 even with the z² weights of Price's Hessian in 4 dimensions), + 1.5 (≥ 4) for crude ones,
    never above 8. Why not always 8: the trapezoidal error of an analytic integrand falls like
    exp(−2πa/h) with a the half-width of its strip of analyticity (for softmax ≈ 1 in whitened
    units), so at a fixed node count a wider rule is coarser. Measured on the L = 3 softmax 4-d term
    (nodes 21 → 27 → 35 → 41): changes 6.9e-5, 3.7e-6, 1.5e-8 at z_max = 8 and 7.8e-6, 7.7e-8, 2.4e-10
    at 6.5."""
    if tol < 1e-6:
        return min(HALF_WIDTH, float(np.sqrt(2 * np.log(1 / tol))) + 0.5)
    return min(HALF_WIDTH, max(4.0, float(np.sqrt(2 * np.log(1 / tol))) + 1.5))




@cache
def gauss_rule(n: int, r: int, half_width: float = HALF_WIDTH, kind: str = "trapezoid"):
    """Nodes (N×r) and weights (N) of the n^r tensor rule for the standard normal.

    Trapezoidal on |z| ≤ half_width: for integrands analytic in a strip |Im z| < a the error decays
    like exp(−2πa/h), h = 2·half_width/(n−1) — far faster than Gauss–Hermite for logistic-like
    softmax terms. ``kind="hermite"``: Gauss–Hermite, used when a term has so many effective
    dimensions that only a few nodes per dimension fit (exact for polynomials of degree < 2n).
    """
    x, w = rule_1d(n, half_width, kind)
    grids = np.meshgrid(*([x] * r), indexing="ij")
    wgrids = np.meshgrid(*([w] * r), indexing="ij")
    nodes = np.stack([g.ravel() for g in grids], axis=1)
    weights = np.prod(np.stack([g.ravel() for g in wgrids], axis=1), axis=1)
    return nodes, weights


def invariant_projection(expr, variables, rng=None, tol=1e-9):
    """Orthonormal P (r×n) with expr(x) = expr(PᵀP x): drops the directions along which it is constant."""
    n = len(variables)
    rng = rng or np.random.default_rng(12345)
    # a Dirac mass (relu-like losses) vanishes at the random probe points almost surely
    mods = [{"DiracDelta": lambda x, *k: np.zeros_like(x), "Heaviside": lambda x, h0=0.5: np.heaviside(x, h0)},
            "numpy"]
    grad = sp.lambdify([variables], [sp.diff(expr, v) for v in variables], modules=mods)

    def jac(m):
        X = rng.standard_normal((m, n))
        return np.array([np.broadcast_to(np.asarray(grad(x), dtype=float), (n,)) for x in X])

    J = jac(n + 4)
    _, s, Vt = np.linalg.svd(J, full_matrices=True)
    if not np.all(np.isfinite(s)) or s[0] == 0:
        return np.eye(n)
    r = int(np.sum(s > tol * s[0]))
    if r == n:
        return np.eye(n)
    P, N = Vt[:r], Vt[r:]
    check = jac(3 * n + 5)
    if np.max(np.abs(check @ N.T)) > 1e-8 * max(1.0, np.max(np.abs(check))):
        return np.eye(n)
    if is_smooth(expr):
        return P
    # the a.e. gradient misses a jump across a dropped direction (Heaviside(x1 − x2)·x3): the values too
    value = sp.lambdify([variables], expr, modules=mods)
    X = rng.standard_normal((3 * n + 5, n))
    shifted = X + rng.standard_normal((len(X), N.shape[0])) @ N
    a = np.array([float(value(x)) for x in X])
    b = np.array([float(value(x)) for x in shifted])
    if not np.allclose(a, b, rtol=1e-8, atol=1e-8 * max(1.0, float(np.max(np.abs(a))))):
        return np.eye(n)
    return P


def canonical_basis(P):
    """A deterministic orthonormal basis of the row space of P (Gram–Schmidt of its projector)."""
    if P.shape[0] == P.shape[1]:
        return np.eye(P.shape[0])
    proj = np.round(P.T @ P, 12)
    rows = []
    for col in proj.T:
        v = col - sum((r @ col) * r for r in rows)
        if np.linalg.norm(v) > 1e-6:
            rows.append(v / np.linalg.norm(v))
        if len(rows) == P.shape[0]:
            break
    return np.round(np.array(rows), 14)


_LAMBDIFIED: dict = {}     # (variables, outputs) -> their lambdified NumPy function (``QuadTerm._fn``)


@dataclass
class QuadTerm(PicklesWithoutCaches):
    """E over N(μ(θ), Σ(θ)) of one non-polynomial term, with μ, Σ affine in θ."""

    expr: sp.Expr
    variables: list
    mu0: np.ndarray          # (n,)
    mu_theta: np.ndarray     # (p, n)
    cov0: np.ndarray         # (n, n)
    cov_theta: np.ndarray    # (p, n, n)
    P: np.ndarray = field(default=None)
    gradient: bool = True    # False: only E f is ever needed (no derivatives are formed)
    half_width: float = HALF_WIDTH
    max_nodes: int = MAX_NODES
    noise_power: int = 0     # the term enters multiplied by s^(2·noise_power), s² the label-noise variance
    beta_power: int = 0      # ... and by β^beta_power (the integrand is written in H = βG)

    def __post_init__(self):
        v = self.variables
        # the half-width as generated modules print it (15 significant digits): the same nodes in both
        self.half_width = float(f"{float(self.half_width):.15g}")
        if self.P is None:
            self.P = canonical_basis(invariant_projection(self.expr, v))
        # kinked: ∇²f holds a Dirac mass, E∇²f only by Stein's lemma; a jump: ∇f too, E∇f and E∇²f both by
        # Stein's lemma from f alone (``score``; symbolic.jumps)
        self.smoothness = smoothness(self.expr, tuple(v))
        self.stein = self.gradient and self.smoothness == "kink"
        self.score = self.gradient and self.smoothness == "jump"
        # [f, ∇f, ∇²f row-major (smooth only)]: ``_fn``, codegen. A smooth term takes E∇²f by Stein's
        # lemma too while Σ_y is well conditioned (``quadrature_rule.STEIN_CONDITION``), else from ∇²f
        self.outputs = [self.expr]
        if self.stein:
            self.outputs += ae_gradient(self.expr, v)
        elif self.gradient and not self.score:
            grads = [sp.diff(self.expr, a) for a in v]
            self.outputs += grads + [sp.diff(g, b) for g in grads for b in v]

    TRANSIENT = ("_fn_cache",)

    def scaled(self, beta: float) -> QuadTerm:
        """The same integrand over N(βμ, β²Σ): E_{N(μ,Σ)} f(βG) (``quadrature_rule.term_data``)."""
        out = copy.copy(self)
        out.mu0, out.mu_theta, out.cov0, out.cov_theta = scaled_law(beta, self.mu0, self.mu_theta, self.cov0,
                                                                    self.cov_theta)
        return out

    @property
    def _fn(self):
        """The outputs [f, ∇f, (∇²f)] as one vectorised NumPy function (built on first use, and shared by every
        term of this process with the same variables and outputs: a system loaded from the derivation store, or a
        term rescaled to another β, does not lambdify again — ≈ 0.3 s per calibration of a softmax L = 2 Φ)."""
        fn = self.__dict__.get("_fn_cache")
        if fn is None:
            key = (tuple(self.variables), tuple(self.outputs))
            fn = _LAMBDIFIED.get(key)
            if fn is None:
                mods = [{"Heaviside": lambda x, h0=0.5: np.heaviside(x, h0)}, "numpy"]
                fn = _LAMBDIFIED[key] = sp.lambdify([self.variables], self.outputs, modules=mods, cse=True)
            self._fn_cache = fn
        return fn

    @property
    def dim(self) -> int:
        return self.P.shape[0]

    @property
    def variance_bounds(self) -> tuple:
        """Per variable, the variance below which E f exists (``symbolic.growth``; computed once)."""
        got = self.__dict__.get("_variance_bounds")
        if got is None:
            from .growth import variance_bounds
            got = self._variance_bounds = variance_bounds(self.expr, tuple(self.variables))
        return got

    @property
    def cap(self) -> int:
        """Most nodes per dimension within ``max_nodes`` (at least 2)."""
        n = max(2, int(np.floor(self.max_nodes ** (1.0 / self.dim) + 1e-9)))
        return n if n < MIN_TRAPEZOID else n - (1 - n % 2)          # odd: 0 is a node

    def rule(self, order: int):
        """(nodes per dimension, kind) used for a requested order (capped)."""
        return rule_for(order, self.cap)

    @property
    def text(self) -> str:
        """The integrand as text (the calibration's messages, ``calibration.TermRecord``)."""
        return sp.sstr(self.expr)

    def evaluate(self, theta: np.ndarray, order: int, rule=None):
        """(E f, ∂E f/∂θ) with the tensor rule of a common order (or an explicit (n, kind))."""
        Ef, Eg, EH = self._expectations(theta, order, rule)
        if not self.gradient:
            return Ef, np.zeros(len(theta))
        return Ef, price_gradient(Eg, EH, self.mu_theta, self.cov_theta)

    def mean_hessian(self, theta: np.ndarray, order: int, positions) -> np.ndarray:
        """∂²E f/∂θ_a∂θ_b for parameters a, b that shift only the mean μ (the means m_k):
        μ_aᵀ E[∇²f] μ_b, exact for the rule (Stein's lemma where ∇²f has a Dirac mass)."""
        pos = list(positions)
        if np.any(self.cov_theta[pos]):
            raise ValueError("mean_hessian: a parameter in positions moves the covariance")
        _, _, EH = self._expectations(theta, order)
        return self.mu_theta[pos] @ EH @ self.mu_theta[pos].T

    def _expectations(self, theta, order, rule=None):
        """(E f, E ∇f, E ∇²f) over the rule (the last two None when gradient=False): the node map of
        ``quadrature_rule`` (the one the generated modules run), the integrand vectorised over the nodes."""
        n = len(self.variables)
        A, x0, Wh, ratio = node_map_conditioned(self.P, self.mu0, self.mu_theta, self.cov0, self.cov_theta,
                                                np.ascontiguousarray(theta, dtype=float))
        n_dim, kind = rule or self.rule(order)
        z, w = gauss_rule(n_dim, self.dim, self.half_width, kind)
        X = tensor_points(x0, A, rule_1d(n_dim, self.half_width, kind)[0], self.dim)
        with np.errstate(all="ignore"):        # a singular integrand shows as non-finite sums, reported
            vals = self._fn([X[:, a] for a in range(n)])
        vals = [np.broadcast_to(np.asarray(v, dtype=float), w.shape) for v in vals]
        Ef = w @ vals[0]
        if not self.gradient:
            return Ef, None, None
        if self.score:
            if not ratio > STEIN_CONDITION:
                from ..errors import NumericalFailure
                raise NumericalFailure(f"the gradient of the expectation of {sp.sstr(self.expr)} (a jump) does "
                                       f"not exist where the covariance of its variables is singular")
            wf = w * vals[0]
            acc, Hy = score_moments(Ef, wf @ z, np.einsum("q,qa,qb->ab", wf, z, z), Wh, self.P)
            return Ef, acc[1:], stein_hessian(Hy, self.P)
        G = np.stack(vals[1:1 + n], axis=1)                     # (N, n)
        Eg = w @ G
        if self.stein or ratio > STEIN_CONDITION:              # H_y = E[(P∇f) ⊗ Σ_y^(−½) z]
            EH = stein_hessian(np.einsum("q,qi,qj->ij", w, G @ self.P.T, z @ Wh.T), self.P)
        else:
            EH = (w @ np.stack(vals[1 + n:], axis=1)).reshape(n, n)
        return Ef, Eg, EH


def separable_split(expr, variables):
    """[(f_m, g_m)], xs, xt when expr = Σ_m f_m(xs) g_m(xt) over two disjoint, non-empty variable sets
    (a student row times a teacher row of a softmax cross term), else None."""
    terms = sp.Add.make_args(sp.expand(expr, deep=False))
    first = [f.free_symbols for f in sp.Mul.make_args(terms[0]) if f.free_symbols]
    if len(first) < 2:
        return None
    seed = max(first, key=len)                   # grow one side from the largest factor's variables
    side = set(seed)
    changed = True
    while changed:                               # close under "shares a factor with"
        changed = False
        for t in terms:
            for f in sp.Mul.make_args(t):
                fs = f.free_symbols
                if fs & side and not fs <= side:
                    side |= fs
                    changed = True
    xs = [v for v in variables if v in side]
    xt = [v for v in variables if v not in side]
    if not xs or not xt:
        return None
    pairs = []
    for t in terms:
        f, g = sp.Integer(1), sp.Integer(1)
        for fac in sp.Mul.make_args(t):
            if fac.free_symbols and fac.free_symbols <= side:
                f *= fac
            else:
                g *= fac
        if g.free_symbols & side:
            return None
        pairs.append((f, g))
    return pairs, xs, xt


class SeparableTerm(QuadTerm):
    """A quadrature term of the form Σ_m f_m(x_s) g_m(x_t) (disjoint x_s, x_t; both at least 2-d after
    projection). The tensor rule of the joint would evaluate the integrand at n^(r_s + r_t) nodes; here
    each side is evaluated on its own n^r grid (whitened marginal: y = μ + B z) and the joint comes in
    through the Gaussian kernel K(u, v) = p(u, v)/(φ(u)φ(v)) = det M^(−½) exp(−½ wᵀ(M⁻¹ − I)w),
    M = [[I, R], [Rᵀ, I]], R = B_s⁻¹ Σ_st B_t⁻¹: E[φ(x_s) ψ(x_t)] = Σ_ij w_i w_j φ_i K_ij ψ_j, the same
    rule and the same nodes per dimension as the tensor rule — only ≈ 2n^r integrand evaluations
    instead of n^(2r). Falls back to the tensor rule where R is near-singular (|R| > 0.95)."""

    def __post_init__(self):
        super().__post_init__()
        idx = {v: i for i, v in enumerate(self.variables)}
        self.index_s, self.index_t = ([idx[v] for v in side[0]] for side in self.sides)

    @property
    def sides(self):
        """Both sides' variables, projections and lambdified [f, ∇f, ∇²f] (``_separable_sides``)."""
        return _separable_sides(self.expr, tuple(self.variables))

    @staticmethod
    def usable(expr, variables) -> bool:
        """Separable, smooth (symbolic.jumps), and at least two directions on each side."""
        return smoothness(expr, tuple(variables)) == "smooth" and _separable_sides(expr, tuple(variables)) is not None

    def _side(self, j, mu, cov, n_dim, kind):
        """(whitened nodes z, weights, B⁻¹, projection, values per pair (f, ∇f, ∇²f)); None when the
        side's covariance is singular."""
        vs, Pv, fn, npairs = self.sides[j]
        mu_y, cov_y = Pv @ mu, Pv @ cov @ Pv.T
        lam, Q = np.linalg.eigh(cov_y)
        if lam.min() <= 1e-12 * max(lam.max(), 1e-300):
            return None
        B = (Q * np.sqrt(lam)) @ Q.T
        Binv = (Q / np.sqrt(lam)) @ Q.T
        z, w = gauss_rule(n_dim, Pv.shape[0], self.half_width, kind)
        X = (mu_y + z @ B.T) @ Pv
        k = len(vs)
        with np.errstate(all="ignore"):
            vals = fn([X[:, a] for a in range(k)])
        vals = [np.broadcast_to(np.asarray(v, dtype=float), w.shape) for v in vals]
        per = 1 + k + k * k
        out = []
        for m in range(npairs):
            v = vals[m * per:(m + 1) * per]
            out.append((v[0], np.stack(v[1:1 + k], axis=1), np.stack(v[1 + k:], axis=1).reshape(-1, k, k)))
        return z, w, Binv, Pv, out

    def _expectations(self, theta, order, rule=None):
        n_dim, kind = rule or self.rule(order)
        mu = self.mu0 + theta @ self.mu_theta
        cov = self.cov0 + np.tensordot(theta, self.cov_theta, axes=1)
        s, t = self.index_s, self.index_t
        S = self._side(0, mu[s], cov[np.ix_(s, s)], n_dim, kind)
        T = self._side(1, mu[t], cov[np.ix_(t, t)], n_dim, kind)
        if S is None or T is None:
            return super()._expectations(theta, order, rule)
        zs, ws, Bsi, Ps, fs = S
        zt, wt, Bti, Pt, gt = T
        R = Bsi @ (Ps @ cov[np.ix_(s, t)] @ Pt.T) @ Bti
        if np.linalg.norm(R, 2) > 0.95:
            return super()._expectations(theta, order, rule)
        rs, rt = R.shape
        M = np.block([[np.eye(rs), R], [R.T, np.eye(rt)]])
        Mi = np.linalg.inv(M)
        A, C, D = Mi[:rs, :rs] - np.eye(rs), Mi[:rs, rs:], Mi[rs:, rs:] - np.eye(rt)
        a = -0.5 * np.einsum("ia,ab,ib->i", zs, A, zs)
        b = -0.5 * np.einsum("ja,ab,jb->j", zt, D, zt)
        logK = a[:, None] + b[None, :] - zs @ C @ zt.T
        K = np.exp(logK) / np.sqrt(np.linalg.det(M))
        Kw = (ws[:, None] * K) * wt[None, :]
        n = len(self.variables)
        Ef, Eg, EH = 0.0, np.zeros(n), np.zeros((n, n))
        for (f, df, hf), (g, dg, hg) in zip(fs, gt):
            Kg = Kw @ g                                        # (N_s,)
            fK = f @ Kw                                        # (N_t,)
            Ef += f @ Kg
            if self.gradient:
                Eg[s] += df.T @ Kg
                Eg[t] += dg.T @ fK
                EH[np.ix_(s, s)] += np.einsum("iab,i->ab", hf, Kg)
                EH[np.ix_(t, t)] += np.einsum("jab,j->ab", hg, fK)
                cross = df.T @ Kw @ dg                          # (n_s, n_t)
                EH[np.ix_(s, t)] += cross
                EH[np.ix_(t, s)] += cross.T
        if not self.gradient:
            return Ef, None, None
        return Ef, Eg, EH


@cache
def _separable_sides(expr, variables: tuple):
    """Both sides of a usable separable term (``SeparableTerm.usable``), each (variables, projection,
    lambdified [f, ∇f, ∇²f per pair], number of pairs); None when the term is not usable. Cached:
    ``usable`` and the term's construction share one derivation."""
    split = separable_split(expr, list(variables))
    if split is None:
        return None
    pairs, xs, xt = split
    mods = [{"Heaviside": lambda x, h0=0.5: np.heaviside(x, h0)}, "numpy"]
    sides = []
    for vs, exprs in ((xs, [f for f, _ in pairs]), (xt, [g for _, g in pairs])):
        outs = []
        for e in exprs:
            d = [sp.diff(e, a) for a in vs]
            hess = [sp.diff(x, b) for x in d for b in vs]
            if any(h.has(sp.DiracDelta) for h in hess):
                return None
            outs += [e] + d + hess
        rng = np.random.default_rng(777)          # directions every f_m is constant along
        comb = sum(float(c) * e for c, e in zip(rng.uniform(1.0, 2.0, len(exprs)), exprs))
        Pv = canonical_basis(invariant_projection(comb, vs))
        if Pv.shape[0] < 2:
            return None
        sides.append((vs, Pv, sp.lambdify([vs], outs, modules=mods, cse=True), len(exprs)))
    return tuple(sides)
