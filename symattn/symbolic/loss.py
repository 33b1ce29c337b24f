"""The per-sample loss 𝓛(G) as a SymPy expression (docs/theory.md §1).

Symbols: ``G_i_j_k`` (1-based, k in spec order) for the pre-activations and ``xi_i_j`` for the
label noise added to each teacher output (Gaussian, variance = model.label_noise).
MSE family: ``𝓛 = ½ Σ_{ij} (y^s_ij − y^t_ij − ξ_ij)²`` with ``y = readout_heads F(G_head)``, F
element-wise or a row-wise softmax of inverse temperature β.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import sympy as sp

from ..expressions import activation_expr, activation_sympy, loss_sympy

if TYPE_CHECKING:
    from ..spec import Spec

# the softmax inverse temperature β: a run-time parameter, like the label-noise variance. The MSE loss
# depends on G only through βG, so a quadrature term is integrated at β = 1 over N(βμ, β²Σ)
# (``quadrature_rule.term_data``)
BETA = sp.Symbol("beta", positive=True)


def g_symbol(i: int, j: int, k: int) -> sp.Symbol:
    """G_{ijk} for 0-based i, j, k (named 1-based, as in a custom loss)."""
    return sp.Symbol(f"G_{i + 1}_{j + 1}_{k + 1}", real=True)


def xi_symbol(i: int, j: int) -> sp.Symbol:
    return sp.Symbol(f"xi_{i + 1}_{j + 1}", real=True)


def beta_of(spec: Spec) -> float:
    """The value of ``BETA`` for a spec: its softmax inverse temperature, 1 where the loss has none."""
    return spec.inverse_temperature


def head_output(spec: Spec, k: int):
    """L×L matrix F(G_k) of SymPy expressions for index k; a softmax's inverse temperature is the
    symbol ``BETA`` (a run-time parameter, ``Loss.beta`` its value)."""
    L = spec.tokens
    G = [[g_symbol(i, j, k) for j in range(L)] for i in range(L)]
    if spec.activation == "softmax":
        b = BETA
        out = []
        for i in range(L):
            den = sum(sp.exp(b * G[i][j]) for j in range(L))
            out.append([sp.exp(b * G[i][j]) / den for j in range(L)])
        return out
    F = activation_expr(spec.activation)
    z = sp.Symbol("z")
    if F is None:
        F = activation_sympy(spec.activation)
    return [[F.subs(z, G[i][j]) for j in range(L)] for i in range(L)]


@dataclass
class Loss:
    """𝓛(G, ξ) of one spec with its symbols; ``G[i][j][k]`` 0-based."""

    spec: Spec
    expr: sp.Expr
    terms: list            # 𝓛 written as a sum of terms, each integrated on its own variables

    @property
    def L(self):
        return self.spec.tokens

    @property
    def K(self):
        return self.spec.K

    @property
    def beta(self) -> float:
        """The value of ``BETA`` (``beta_of``)."""
        return beta_of(self.spec)

    @cached_property
    def g_symbols(self) -> list:
        """All G symbols in the order (i, j, k), C-contiguous like an L×L×K array."""
        L, K = self.L, self.K
        return [g_symbol(i, j, k) for i in range(L) for j in range(L) for k in range(K)]

    @cached_property
    def xi_symbols(self) -> list:
        if self.spec.label_noise == 0 or self.spec.loss is not None:
            return []
        return [xi_symbol(i, j) for i in range(self.L) for j in range(self.L)]

    def require_pathwise_gradient(self) -> None:
        """SpecError unless 𝓛 is continuous along every trainable G (symbolic.jumps): where it jumps, the
        per-sample gradient online SGD takes is zero on the jump set's complement and misses the jump's
        Dirac mass, so its mean is not ∇Φ (SGD does not follow the population gradient), and the noise term
        E|∇𝓛|² holds the square of a Dirac mass (infinite). Φ and its gradient still exist (``potential``)."""
        from ..errors import SpecError
        from .jumps import smoothness
        gs, train = tuple(self.g_symbols), set(self.spec.students)
        along = tuple(s for n, s in enumerate(gs) if (n % self.K) in train)
        if smoothness(self.expr, gs + tuple(self.xi_symbols), along) == "jump":
            key = "model.loss" if self.spec.loss is not None else "model.activation"
            raise SpecError(f"{key}: the loss jumps across a hyperplane of the trainable pre-activations; online "
                            f"SGD's per-sample gradient then misses the jump (its mean is not the gradient of Φ) "
                            f"and the SGD-noise term is infinite, so the dynamics are not defined — only "
                            f"'symattn potential' (Φ and its gradient) is; use a continuous activation or loss")

    def pathwise_gradient(self, symbols=None) -> list:
        """∂𝓛/∂G of the given G symbols (default ``g_symbols``) almost everywhere (``symbolic.jumps.ae_gradient``:
        no Dirac terms, so a kinked loss such as z·Heaviside(z) compiles), after ``require_pathwise_gradient``."""
        from .jumps import ae_gradient
        self.require_pathwise_gradient()
        return ae_gradient(self.expr, self.g_symbols if symbols is None else symbols)

    def compile_gradient(self, backend: str = "numpy"):
        """Per-sample (𝓛, ∂𝓛/∂G) on a batch: f(G[..., L, L, K], xi[..., L, L]) -> (loss[...], grad[..., L, L, K]).

        The same SymPy expression as the theory, differentiated symbolically and lambdified
        with common-subexpression elimination for NumPy arrays or (``backend="torch"``) torch
        tensors on any device; only G entries of trainable indices get a gradient.
        """
        L, K = self.L, self.K
        gs, xs = self.g_symbols, self.xi_symbols
        train = set(self.spec.students)
        b = {BETA: sp.nsimplify(self.beta, rational=True)}
        expr = self.expr.xreplace(b)
        mine = [s for n, s in enumerate(gs) if (n % K) in train]
        grad = dict(zip(mine, self.pathwise_gradient(mine)))
        grads = [grad[s].xreplace(b) if s in grad else sp.Integer(0) for s in gs]
        exprs = [expr] + grads
        if backend == "torch":     # numeric constants as floats: torch.sqrt(2) of an int is refused
            exprs = [sp.nfloat(e, n=17, exponent=False) for e in exprs]
        fn = sp.lambdify([gs, xs], exprs, modules=backend, cse=True)

        def columns(G, xi):
            cols = [G[..., i, j, k] for i in range(L) for j in range(L) for k in range(K)]
            xcols = [] if not xs else [xi[..., i, j] for i in range(L) for j in range(L)]
            return fn(cols, xcols)

        if backend == "torch":
            import torch

            def loss_and_grad_torch(G, xi=None):
                vals = columns(G, xi)
                ref = G[..., 0, 0, 0]
                full = [v if torch.is_tensor(v) and v.shape == ref.shape else torch.full_like(ref, float(v))
                        if not torch.is_tensor(v) else v.expand_as(ref) for v in vals]
                return full[0], torch.stack(full[1:], dim=-1).reshape(*ref.shape, L, L, K)

            return loss_and_grad_torch

        def loss_and_grad(G, xi=None):
            batch = G.shape[:-3]
            vals = columns(G, xi)
            loss = np.broadcast_to(np.asarray(vals[0], dtype=float), batch)
            grad = np.empty(batch + (L * L * K,), dtype=G.dtype)
            for n, v in enumerate(vals[1:]):
                grad[..., n] = v
            return loss, grad.reshape(batch + (L, L, K))

        return loss_and_grad


def build_loss(spec: Spec) -> Loss:
    """The loss expression of a spec (custom ``model.loss`` or the MSE family)."""
    if spec.loss is not None:
        expr = loss_sympy(spec.loss, spec.tokens, spec.K)
        return Loss(spec, expr, list(sp.Add.make_args(sp.expand(expr))))
    L = spec.tokens
    outs = {k: head_output(spec, k) for k in range(spec.K)}

    def readout(ks):
        norm = sp.Integer(len(ks)) if spec.readout == "mean" else sp.Integer(1)
        return [[sum(outs[k][i][j] for k in ks) / norm for j in range(L)] for i in range(L)]

    ys, yt = readout(spec.students), readout(spec.teachers)
    noisy = spec.label_noise > 0
    terms, expr = [], sp.Integer(0)
    for i in range(L):
        for j in range(L):
            diff = ys[i][j] - yt[i][j] - (xi_symbol(i, j) if noisy else 0)
            expr += diff**2 / 2
            # ½(a − b)² = ½a² − ab + ½b²: each product is integrated over its own variables
            parts = sp.Add.make_args(sp.expand(diff, deep=False, mul=True, multinomial=False))
            for p in parts:
                terms.append(p**2 / 2)
            for a in range(len(parts)):
                for b in range(a + 1, len(parts)):
                    terms.append(parts[a] * parts[b])
    return Loss(spec, expr, terms)
