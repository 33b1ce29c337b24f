"""Unrolling a residual network into attention indices whose matrices are words in its factors
(docs/theory.md §10).

The residual stream after m layers is a sum of paths, X_m = Σ_p Π_p X R_p: Π_p an L×L product of
attention matrices (SymPy expressions), R_p a word in the value matrices. A layer with heads h maps
each path (Π, R) to itself and to (P^h Π, R V^h). The logits of a head with key–query matrix S are

    A = Σ_{p,q} Π_p G[R_p S R_qᵀ] Π_qᵀ,        G[M]_ij = (x_iᵀ M x_j − δ_ij Tr M)/√d,

each G[M] a centred index of the effective matrix M. G[Mᵀ] = G[M]ᵀ, so a word and its transpose
are one index (the canonical one of the pair). Frozen identity factors (scale·I) leave the word and
become a number. The loss ½ Σ_ij (y^s_ij − y^t_ij)² of the unrolled logits is an ordinary
attention-indexed loss: the word indices form a :class:`symattn.spec.Spec` (``direct`` for a
symmetric word, ``general`` for a non-symmetric one; role ``student`` when the word contains a
trained factor), so the Gaussian engine (``symbolic.gaussian``) gives its order parameters
Ω_kl = Tr(M_k M_lᵀ)/d, Ψ_kl = Tr(M_k M_l)/d and their covariance.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import sympy as sp

from ..spec import Index, Spec
from ..symbolic.loss import Loss, g_symbol
from .spec import Network, ResidualSpec

Letter = tuple      # (factor name, transposed: 0 or 1)


class Words:
    """The effective matrices met while unrolling, as canonical words over the factors."""

    def __init__(self, factors: dict):
        self.factors = factors          # name -> Index
        self.words: list = []           # canonical words, index order

    def transpose(self, w: tuple) -> tuple:
        return tuple((n, 0 if self.factors[n].symmetric else 1 - t) for n, t in reversed(w))

    def canonical(self, w: tuple) -> tuple:
        """(canonical word, flipped): the word or its transpose, whichever sorts first."""
        w = tuple((n, 0 if self.factors[n].symmetric else t) for n, t in w)
        wt = self.transpose(w)
        return (w, False) if w <= wt else (wt, True)

    def index(self, w: tuple) -> tuple:
        """(k, flipped) of a word, registering it on first use."""
        c, flipped = self.canonical(w)
        if c not in self.words:
            self.words.append(c)
        return self.words.index(c), flipped

    def name(self, w: tuple) -> str:
        return "".join(n + ("t" if t else "") for n, t in w) or "I"

    def symmetric(self, w: tuple) -> bool:
        return self.transpose(w) == w

    def trained(self, w: tuple) -> bool:
        return any(self.factors[n].trainable for n, _ in w)


class Program:
    """The loss as a straight-line program: each step ``s = e`` names one logit, attention weight or
    output entry, so no expression is ever substituted into the next; derivatives are taken by
    reverse accumulation over the steps (each ∂e/∂v is of one small expression), which keeps the
    cost linear in the depth where the substituted expression grows geometrically."""

    def __init__(self):
        self.steps: list = []

    def let(self, expr, prefix="t"):
        expr = sp.sympify(expr)
        if expr.is_Symbol or expr.is_Number:
            return expr
        s = sp.Symbol(f"{prefix}{len(self.steps)}", real=True)
        self.steps.append((s, expr))
        return s

    def adjoint_steps(self, out, inputs) -> tuple:
        """(steps, gradient expressions): the forward steps, then the reverse-accumulation steps
        ``bar_s = Σ_uses ∂e_use/∂s · bar_use``, then ∂out/∂x for each input x."""
        defined, wanted = {s for s, _ in self.steps}, set(inputs)
        contrib: dict = {out: [sp.Integer(1)]}
        rev = []
        for s, e in reversed(self.steps):
            terms = contrib.pop(s, None)
            if not terms:
                continue
            bar = sp.Symbol(f"bar_{s.name}", real=True)
            rev.append((bar, sp.Add(*terms)))
            for v in e.free_symbols:
                if v in defined or v in wanted:
                    contrib.setdefault(v, []).append(sp.diff(e, v) * bar)
        grads = [sp.Add(*contrib.get(x, [])) for x in inputs]
        return list(self.steps) + rev, grads

    def expression(self, out):
        """The substituted expression of ``out`` (grows geometrically with the depth)."""
        e = out
        for s, v in reversed(self.steps):
            e = e.xreplace({s: v})
        return e


def _strip(word: tuple, factors: dict) -> tuple:
    """(scale, word without frozen identity letters): scale·I factors leave the word as a number."""
    c, out = sp.Integer(1), []
    for n, t in word:
        ix = factors[n]
        if not ix.kind.trainable:          # identity: S = scale·I
            c *= sp.nsimplify(ix.scale, rational=True)
        else:
            out.append((n, t))
    return c, tuple(out)


def _softmax_rows(A, beta, prog: Program):
    """Row-wise softmax, each weight written against its row's first logit (exp of differences)."""
    b = sp.nsimplify(beta, rational=True)
    L = A.shape[0]
    out = sp.zeros(L, L)
    for i in range(L):
        e = [prog.let(sp.exp(b * (A[i, j] - A[i, 0])), "e") for j in range(L)]
        den = prog.let(sp.Add(*e), "n")
        for j in range(L):
            out[i, j] = prog.let(e[j] / den, "p")
    return out


def elementwise_activation(spec: ResidualSpec):
    """F(z) of an element-wise readout as a SymPy expression in ``z`` (None for the softmax)."""
    if spec.activation == "softmax":
        return None
    from ..expressions import activation_expr, activation_sympy
    F = activation_expr(spec.activation)
    return activation_sympy(spec.activation) if F is None else F


def _activation(spec: ResidualSpec, A, prog: Program):
    F = elementwise_activation(spec)
    if F is None:
        return _softmax_rows(A, spec.beta, prog)
    from ..expressions import Z
    return A.applyfunc(lambda a: prog.let(F.subs(Z, a), "y"))


@dataclass
class Unrolled:
    """The unrolled loss of a residual spec: word indices, their Spec and the loss 𝓛(G)."""

    spec: ResidualSpec
    words: Words
    program: Program
    out: sp.Symbol           # the program's loss symbol
    outputs: dict            # "student"/"teacher" -> L×L matrix of program symbols y

    @cached_property
    def index_spec(self) -> Spec:
        """The word indices as an ordinary Spec (identity token covariance, centred indices)."""
        W = self.words
        ixs = tuple(Index(name=W.name(w), role="student" if W.trained(w) else "teacher",
                          parameterization="direct" if W.symmetric(w) else "general")
                    for w in W.words)
        L = self.spec.tokens
        eye = tuple(tuple(1.0 if i == j else 0.0 for j in range(L)) for i in range(L))
        return Spec(name=self.spec.name, tokens=L, covariance=eye, activation="linear", beta=1.0, readout="sum",
                    label_noise=0.0, loss=None, indices=ixs, batch_size=self.spec.batch_size,
                    noise_ratio=self.spec.noise_ratio, learning_rate=None, weight_decay=self.spec.weight_decay,
                    truncation=2, source=self.spec.source)

    @cached_property
    def g_symbols(self) -> list:
        """The G symbols in (i, j, k) order, C-contiguous like an L×L×K array."""
        L, K = self.spec.tokens, self.K
        return [g_symbol(i, j, k) for i in range(L) for j in range(L) for k in range(K)]

    @cached_property
    def loss(self) -> Loss:
        """The substituted loss as the engine's :class:`Loss` (its size grows geometrically with the
        depth; the numerics use ``program``)."""
        e = self.program.expression(self.out)
        return Loss(self.index_spec, e, [e])

    @property
    def K(self) -> int:
        return len(self.words.words)

    def word_matrices(self, mats: dict) -> list:
        """The d×d matrix of every word from the factors' matrices (name -> d×d array)."""
        out = []
        for w in self.words.words:
            M = None
            for n, t in w:
                A = mats[n].T if t else mats[n]
                M = A if M is None else M @ A
            if M is None:
                M = np.eye(next(iter(mats.values())).shape[0])
            out.append(M)
        return out

    def word_pullback(self, mats: dict, grads: list) -> dict:
        """∂Φ/∂(factor matrix) from ∂Φ/∂M_w for every word (product rule along each word)."""
        out = {}
        for w, Gw in zip(self.words.words, grads, strict=True):
            letters = [mats[n].T if t else mats[n] for n, t in w]
            for i, (name, t) in enumerate(w):
                left = _chain(letters[:i])
                right = _chain(letters[i + 1:])
                g = Gw if left is None else left.T @ Gw
                g = g if right is None else g @ right.T
                g = g.T if t else g
                out[name] = out.get(name, 0) + g
        return out


def _chain(ms):
    M = None
    for A in ms:
        M = A if M is None else M @ A
    return M


def _logits(paths, S: Index, W: Words, L: int, prog: Program):
    """A = Σ_{p,q} Π_p G[R_p S R_qᵀ] Π_qᵀ (module docstring), each entry a step of the program."""
    A = sp.zeros(L, L)
    for Pp, Rp in paths:
        for Pq, Rq in paths:
            c, w = _strip(Rp + ((S.name, 0),) + W.transpose(Rq), W.factors)
            k, flipped = W.index(w)
            G = sp.Matrix(L, L, lambda i, j: g_symbol(j, i, k) if flipped else g_symbol(i, j, k))
            A += c * (Pp * G * Pq.T)
    return A.applyfunc(lambda a: prog.let(sp.expand(a), "a"))


def stream_outputs(spec: ResidualSpec, net: Network, W: Words, prog: Program):
    L = spec.tokens
    paths = [(sp.eye(L), ())]
    for layer in net.layers:
        new = []
        for head in layer:
            P = _softmax_rows(_logits(paths, head.key_query, W, L, prog), spec.beta, prog)
            new += [((P * Pp).applyfunc(lambda a: prog.let(a, "m")), Rp + ((head.value.name, 0),))
                    for Pp, Rp in paths]
        paths = paths + new
    y = sp.zeros(L, L)
    for S in net.readout:
        y += _activation(spec, _logits(paths, S, W, L, prog), prog)
    return y


def unroll(spec: ResidualSpec) -> Unrolled:
    """The unrolled attention-indexed loss of a residual spec (module docstring)."""
    W = Words(spec.factors)
    prog = Program()
    ys = stream_outputs(spec, spec.student, W, prog)
    yt = stream_outputs(spec, spec.teacher, W, prog)
    L = spec.tokens
    out = prog.let(sum(((ys[i, j] - yt[i, j]) ** 2 / 2 for i in range(L) for j in range(L)), sp.Integer(0)), "loss")
    return Unrolled(spec, W, prog, out, {"student": ys, "teacher": yt})
