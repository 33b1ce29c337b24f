"""Gaussian structure of the pre-activations G and exact Gaussian expectations (docs/theory.md §2).

    E[G_ijk] = C_ij m_k   (0 for centred indices),
    Cov(G_ijk, G_i'j'l) = C_ii' C_jj' Ω_kl + C_ij' C_ji' Ψ_kl,
    Ω_kl = Tr(S_k S_l^T)/d,  Ψ_kl = Tr(S_k S_l)/d.

Order-parameter symbols carry the CSV column names of docs/interface.md: ``m_a`` (untied indices),
``q_a_b`` for pairs where Ω = Ψ (at least one symmetric matrix), ``q1_a_b`` (Ω) and ``q2_a_b`` (Ψ)
for pairs of untied indices. Label-noise symbols ξ are independent N(0, Δ).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import sympy as sp

from .loss import BETA, Loss, g_symbol  # noqa: F401  (BETA: with LABEL_NOISE, the law's symbols)

if TYPE_CHECKING:
    from ..spec import Spec


def pair_name(spec: Spec, k: int, l: int) -> str:
    a, b = sorted((k, l))
    return f"{spec.names[a]}_{spec.names[b]}"


# the label-noise variance s² (ξ ~ N(0, s²) on every output entry): a run-time parameter, not a number in
# the derived expressions (``model.label_noise`` > 0 is structure, its value is not)
LABEL_NOISE = sp.Symbol("label_noise_variance", nonnegative=True)


def integrate_label_noise(term, xis) -> list:
    """[(k, h_k)] with E_ξ term = Σ_k s^{2k} h_k(G), for ξ independent of G and N(0, s²) i.i.d.: the heat
    kernel E f(ξ) = exp(½ s² Δ_ξ) f |_{ξ=0}, i.e. h_k = Δ^k f(0)/(2^k k!), exact and finite for a loss
    polynomial in ξ (no expansion of the non-polynomial factors is needed)."""
    present = [x for x in xis if term.has(x)]
    if not present:
        return [(0, term)]
    zero = {x: 0 for x in present}
    out, cur, k = [], term, 0
    while cur != 0:
        h = cur.subs(zero) / (2**k * sp.factorial(k))
        if h != 0:
            out.append((k, h))
        cur = sum((sp.diff(cur, x, 2) for x in present), sp.Integer(0))
        k += 1
    return out


@dataclass
class OrderParameters:
    """The symbols θ of Φ(θ) and the matrices m, Ω, Ψ written in them."""

    spec: Spec

    @cached_property
    def symbols(self) -> list:
        sp_, out = self.spec, []
        for k, ix in enumerate(sp_.indices):
            if not ix.centred:
                out.append(sp.Symbol(f"m_{ix.name}", real=True))
        for k in range(sp_.K):
            for l in range(k, sp_.K):
                if self.split(k, l):
                    out += [sp.Symbol(f"q1_{pair_name(sp_, k, l)}", real=True),
                            sp.Symbol(f"q2_{pair_name(sp_, k, l)}", real=True)]
                else:
                    out.append(sp.Symbol(f"q_{pair_name(sp_, k, l)}", real=True))
        return out

    @property
    def names(self) -> list:
        return [s.name for s in self.symbols]

    def split(self, k: int, l: int) -> bool:
        """Ω_kl ≠ Ψ_kl is possible only when both matrices are non-symmetric (untied)."""
        return not (self.spec.indices[k].symmetric or self.spec.indices[l].symmetric)

    def sym(self, name: str) -> sp.Symbol:
        return sp.Symbol(name, real=True)

    def m(self, k: int):
        ix = self.spec.indices[k]
        return sp.Integer(0) if ix.centred else self.sym(f"m_{ix.name}")

    def omega(self, k: int, l: int):
        p = pair_name(self.spec, k, l)
        return self.sym(f"q1_{p}" if self.split(k, l) else f"q_{p}")

    def psi(self, k: int, l: int):
        p = pair_name(self.spec, k, l)
        return self.sym(f"q2_{p}" if self.split(k, l) else f"q_{p}")


def wick(expr, variables, mu, cov) -> sp.Expr:
    """E[P(x)] of a polynomial P over x ~ N(mu, cov) by Isserlis/Wick with means (exact): on every monomial
    E[x_a X] = μ_a E[X] + Σ_{b∈X} Σ_ab E[X∖b], memoised on the multiset of exponents."""
    poly = sp.Poly(expr, *variables) if variables else None
    if poly is None:
        return sp.sympify(expr)
    memo = {}

    def moment(counts):
        if counts in memo:
            return memo[counts]
        first = next((a for a, c in enumerate(counts) if c), None)
        if first is None:
            return sp.Integer(1)
        rest = list(counts)
        rest[first] -= 1
        val = mu[first] * moment(tuple(rest)) if mu[first] != 0 else sp.Integer(0)
        for b, c in enumerate(rest):
            if c and cov[first][b] != 0:
                r2 = list(rest)
                r2[b] -= 1
                val += c * cov[first][b] * moment(tuple(r2))
        memo[counts] = sp.expand(val)
        return memo[counts]

    return sp.expand(sum(coeff * moment(tuple(mon)) for mon, coeff in poly.terms()))


def rational_matrix(C):
    return [[sp.nsimplify(float(c), rational=True) for c in row] for row in C]


@dataclass
class GaussianG:
    """Mean and covariance of (G, ξ) as SymPy expressions linear in the order parameters."""

    loss: Loss
    op: OrderParameters

    @cached_property
    def C(self):
        return rational_matrix(self.loss.spec.covariance)

    @cached_property
    def index(self) -> dict:
        """symbol -> ('G', i, j, k) or ('xi', i, j)."""
        out = {}
        L, K = self.loss.L, self.loss.K
        for i in range(L):
            for j in range(L):
                for k in range(K):
                    out[g_symbol(i, j, k)] = ("G", i, j, k)
        for s in self.loss.xi_symbols:
            _, i, j = s.name.split("_")
            out[s] = ("xi", int(i) - 1, int(j) - 1)
        return out

    def mean(self, s):
        t = self.index[s]
        if t[0] == "xi":
            return sp.Integer(0)
        _, i, j, k = t
        return self.C[i][j] * self.op.m(k)

    def cov(self, s1, s2):
        t1, t2 = self.index[s1], self.index[s2]
        if t1[0] == "xi" or t2[0] == "xi":
            return LABEL_NOISE if s1 == s2 else sp.Integer(0)
        _, i, j, k = t1
        _, a, b, l = t2
        C = self.C
        return C[i][a] * C[j][b] * self.op.omega(k, l) + C[i][b] * C[j][a] * self.op.psi(k, l)

    def expect_polynomial(self, expr) -> sp.Expr:
        """E[P(G, ξ)] for a polynomial P by Isserlis/Wick with means (exact): :func:`wick` over the entries of
        G and ξ it contains."""
        variables = sorted(expr.free_symbols & set(self.index), key=lambda s: s.name)
        return wick(expr, variables, [self.mean(v) for v in variables],
                    [[self.cov(a, b) for b in variables] for a in variables])
