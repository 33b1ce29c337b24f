"""The Gaussian rule of the quadrature (docs/theory.md §2), written once: the 1-d nodes, the node map
and Price's theorem. For one quadrature term,

    y = Pμ + Σ_y^½ z_q,  x = Pᵀy,  E f = Σ_q w_q f(x_q),
    ∂E f/∂θ_p = ∂μ/∂θ_p · E∇f + ½ ∂Σ/∂θ_p : E∇²f      (Price's theorem),

with z_q the nodes of the tensor rule built from the 1-d rule (``rule_1d``) in the r = P.shape[0]
effective directions and Σ_y^½ the symmetric root (the grid axes are the canonical basis P, see
``symbolic.quadrature``); E∇²f comes from the integrand's second derivatives or, where those hold a
Dirac mass, from Stein's lemma E∇²f = Pᵀ E[∇_y f ⊗ Σ_y⁻¹(y − μ_y)] P, and where already ∇f holds one (a
jump), both from f alone (``score_moments``). Two callers run these same
functions: the Python quadrature (``symbolic.quadrature``: the integrand vectorised over the nodes)
and the generated modules (``codegen``: ``_expect_<id>`` calls ``node_map`` once, runs the node loop
with its integrand written out, and forms the result with ``finish``; they import this module as
``symattn.codegen.runtime``). Compiled with Numba once per machine (its cache next to this file, or
its per-user cache where the package is read-only), not once per model.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

HALF_WIDTH = 8.0      # the rule covers |z| <= 8: the Gaussian tail beyond is below 1e-15


def rule_1d(n: int, half_width: float = HALF_WIDTH, kind: str = "trapezoid"):
    """Nodes and weights of the 1-d rule for the standard normal: trapezoidal on |z| ≤ half_width, or
    Gauss–Hermite (``kind="hermite"``); the tensor rules are built from it."""
    if kind == "hermite":
        x, w = np.polynomial.hermite_e.hermegauss(n)
        return x, w / np.sqrt(2 * np.pi)
    x = np.linspace(-half_width, half_width, n)
    return x, np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi) * (x[1] - x[0])


MIN_TRAPEZOID = 9    # below this many nodes per dimension the tensor rule is Gauss–Hermite


def rule_for(order: int, cap: int):
    """(nodes per dimension, kind) of a requested order for a term whose node cap is ``cap``: the
    trapezoidal rule capped at ``cap``, or Gauss–Hermite with ``cap`` nodes when fewer than
    MIN_TRAPEZOID fit."""
    if cap < MIN_TRAPEZOID:
        return cap, "hermite"
    return min(order, cap), "trapezoid"


def term_data(terms, orders, beta: float) -> tuple:
    """The packed data (``pack``) of quadrature terms at inverse temperature β and the given orders.
    ``terms``: (P, μ0, ∂μ/∂θ, Σ0, ∂Σ/∂θ, cap, half-width) of the β = 1 integrands. A loss that depends
    on G only through βG has E_{N(μ,Σ)} f(βG) = E_{N(βμ, β²Σ)} f(H): μ scales by β, Σ by β²
    (docs/theory.md §2), so β is a run-time argument, not part of the compiled integrand."""
    out = []
    for (P, mu0, mut, cov0, covt, cap, hw), order in zip(terms, orders):
        n, kind = rule_for(order, cap)
        out.append(pack(P, *scaled_law(beta, mu0, mut, cov0, covt), rule_1d(n, hw, kind)))
    return tuple(out)


def mean_term_data(terms, orders, beta: float, positions) -> tuple:
    """``term_data`` with the parameters extended by one per pair a ≤ b of ``positions`` (the means m_k: they shift μ
    only), whose ∂μ is 0 and ∂Σ = (μ_a μ_bᵀ + μ_b μ_aᵀ)/2 with μ_a = ∂μ/∂θ_a: at those parameters 0 a kernel computes
    the term's usual expectation, and its derivative along pair (a, b) is ½ μ_aᵀ E[∇²f] μ_b (Price's theorem) — so
    twice it is the exact ∂²E f/∂m_a∂m_b, from the same compiled kernels and E∇²f as the gradient
    (``QuadTerm.mean_hessian``, docs/theory.md §6)."""
    pos = [int(p) for p in positions]
    pairs = [(pos[i], pos[j]) for i in range(len(pos)) for j in range(i, len(pos))]
    out = []
    for (P, mu0, mut, cov0, covt, cap, hw), order in zip(terms, orders):
        if np.any(covt[pos]):
            raise ValueError("mean_term_data: a parameter in positions moves the covariance")
        nv = mut.shape[1]
        extra = np.array([0.5 * (np.outer(mut[a], mut[b]) + np.outer(mut[b], mut[a])) for a, b in pairs])
        mut_x = np.concatenate([mut, np.zeros((len(pairs), nv))])
        covt_x = np.concatenate([covt, extra.reshape(len(pairs), nv, nv)])
        n, kind = rule_for(order, cap)
        out.append(pack(P, *scaled_law(beta, mu0, mut_x, cov0, covt_x), rule_1d(n, hw, kind)))
    return tuple(out)


def scaled_law(beta: float, mu0, mut, cov0, covt) -> tuple:
    """The affine law of G scaled to that of βG: (βμ0, β∂μ/∂θ, β²Σ0, β²∂Σ/∂θ)."""
    b2 = beta * beta
    return beta * mu0, beta * mut, b2 * cov0, b2 * covt


VALUE, HESSIAN, STEIN = 0, 1, 2      # what the integrand outputs: [f] / [f, ∇f, upper ∇²f] / [f, ∇f]


@njit(cache=True)
def jacobi(C):
    """(λ, Q) of a small symmetric matrix by cyclic Jacobi rotations (plain loops: Numba's LAPACK-backed
    ``np.linalg.eigh`` took 3–6 s to compile, once per model before this module existed)."""
    r = C.shape[0]
    a = C.copy()
    Q = np.eye(r)
    for _ in range(50):
        off, tot = 0.0, 0.0
        for i in range(r):
            for j in range(r):
                tot += a[i, j] * a[i, j]
                if j > i:
                    off += a[i, j] * a[i, j]
        if off <= 1e-32 * (1.0 + tot):
            break
        for p in range(r):
            for q in range(p + 1, r):
                if a[p, q] == 0.0:
                    continue
                tau = (a[q, q] - a[p, p]) / (2.0 * a[p, q])
                t = (1.0 if tau >= 0.0 else -1.0) / (abs(tau) + math.sqrt(1.0 + tau * tau))
                c = 1.0 / math.sqrt(1.0 + t * t)
                s = t * c
                for k in range(r):
                    akp, akq = a[k, p], a[k, q]
                    a[k, p], a[k, q] = c * akp - s * akq, s * akp + c * akq
                for k in range(r):
                    apk, aqk = a[p, k], a[q, k]
                    a[p, k], a[q, k] = c * apk - s * aqk, s * apk + c * aqk
                for k in range(r):
                    qkp, qkq = Q[k, p], Q[k, q]
                    Q[k, p], Q[k, q] = c * qkp - s * qkq, s * qkp + c * qkq
    lam = np.empty(r)
    for i in range(r):
        lam[i] = a[i, i]
    return lam, Q


# Stein's lemma for a smooth integrand (E∇²f from ∇f alone: a third of the outputs of the Hessian route,
# and as accurate) divides by Σ_y^½; below this λ_min/λ_max of Σ_y the Hessian route is taken instead
# (measured on the softmax L = 2 cross term at its calibrated 47 nodes: error 2.9e-11 at ρ = 0.9999,
# 2.5e-10 at 1 − 1e-8 (λ ratio ≈ 5e-9), 2.5e-8 at 1 − 1e-12, 0.28 at ρ = 1; the Hessian route 1.4e-10 throughout)
STEIN_CONDITION = 1e-6


@njit(cache=True)
def node_map(P, mu0, mut, cov0, covt, theta):
    """(A, x0, Wh): node z ↦ x = x0 + A z, A = Pᵀ Σ_y^½, x0 = PᵀPμ, and Wh = Σ_y^(−½) (0 on a null
    direction), for μ = μ0 + θ·∂μ/∂θ, Σ = Σ0 + θ·∂Σ/∂θ, Σ_y = PΣPᵀ."""
    A, x0, Wh, ratio = node_map_conditioned(P, mu0, mut, cov0, covt, theta)
    return A, x0, Wh


@njit(cache=True)
def node_map_conditioned(P, mu0, mut, cov0, covt, theta):
    """``node_map`` and λ_min/λ_max of Σ_y (0 when Σ_y = 0)."""
    r, nv = P.shape
    mu = mu0.copy()
    cov = cov0.copy()
    for p in range(theta.shape[0]):
        if theta[p] != 0.0:
            for i in range(nv):
                mu[i] += theta[p] * mut[p, i]
                for j in range(nv):
                    cov[i, j] += theta[p] * covt[p, i, j]
    Cy = np.zeros((r, r))
    my = np.zeros(r)
    for a in range(r):
        for i in range(nv):
            if P[a, i] != 0.0:
                my[a] += P[a, i] * mu[i]
                for b in range(r):
                    for j in range(nv):
                        Cy[a, b] += P[a, i] * cov[i, j] * P[b, j]
    lam, Q = jacobi(Cy)
    root = np.zeros((r, r))
    Wh = np.zeros((r, r))
    for k in range(r):
        lk = max(lam[k], 0.0)
        sq = math.sqrt(lk)
        iv = 1.0 / sq if lk > 1e-300 else 0.0
        for a in range(r):
            for b in range(r):
                root[a, b] += Q[a, k] * sq * Q[b, k]
                Wh[a, b] += Q[a, k] * iv * Q[b, k]
    A = np.zeros((nv, r))
    x0 = np.zeros(nv)
    for i in range(nv):
        for a in range(r):
            x0[i] += P[a, i] * my[a]
            for b in range(r):
                A[i, b] += P[a, i] * root[a, b]
    top = max(np.max(lam), 0.0)
    ratio = max(np.min(lam), 0.0) / top if top > 0.0 else 0.0
    return A, x0, Wh, ratio


@njit(cache=True)
def tensor_points(x0, A, nodes, r):
    """x = x̄ + Σ_a A_a z_a at every node of the r-fold tensor rule of the 1-d ``nodes`` (rows in the order
    of ``symbolic.quadrature.gauss_rule``), accumulated as the generated node loop does it, level by
    level — the same rounding, so that an integrand's kink lying on a node lies on it in both."""
    n, nv = nodes.shape[0], x0.shape[0]
    X = np.empty((n ** r, nv))
    s = np.empty((r + 1, nv))
    idx = np.zeros(r, dtype=np.int64)
    for q in range(n ** r):
        rem = q
        for a in range(r - 1, -1, -1):
            idx[a] = rem % n
            rem //= n
        for i in range(nv):
            s[0, i] = x0[i]
        for a in range(r):
            for i in range(nv):
                s[a + 1, i] = s[a, i] + A[i, a] * nodes[idx[a]]
        for i in range(nv):
            X[q, i] = s[r, i]
    return X


def pack(P, mu0, mut, cov0, covt, rule) -> np.ndarray:
    """One quadrature term's data as one array [n, P, μ0, ∂μ/∂θ, Σ0, ∂Σ/∂θ, nodes, weights] (a compiled
    call with two arguments instead of seven: Numba's dispatch costs ≈ 0.2 µs per argument)."""
    nodes, weights = rule
    return np.concatenate([[float(len(nodes))], *(np.ravel(a) for a in (P, mu0, mut, cov0, covt, nodes, weights))])


@njit(cache=True)
def unpack(data, r, nv, p):
    """(P, μ0, ∂μ/∂θ, Σ0, ∂Σ/∂θ, nodes, weights) of ``pack``'s array (views) for r directions, nv
    variables and p order parameters."""
    o = 1
    P = data[o:o + r * nv].reshape((r, nv))
    o += r * nv
    mu0 = data[o:o + nv]
    o += nv
    mut = data[o:o + p * nv].reshape((p, nv))
    o += p * nv
    cov0 = data[o:o + nv * nv].reshape((nv, nv))
    o += nv * nv
    covt = data[o:o + p * nv * nv].reshape((p, nv, nv))
    o += p * nv * nv
    n = int(data[0])
    return P, mu0, mut, cov0, covt, data[o:o + n], data[o + n:o + 2 * n]


@njit(cache=True)
def exp_table(A, nodes):
    """T[i, a, m] = exp(A_ia z_m) over the 1-d nodes z_m: on an equispaced (trapezoidal) rule by the
    recurrence T[.., m + 1] = T[.., m] · exp(A_ia h) — two exponentials per (i, a) instead of n, at a
    relative rounding of ≲ n ulp — else one exponential each."""
    nv, r = A.shape
    n = nodes.shape[0]
    T = np.empty((nv, r, n))
    h = nodes[1] - nodes[0] if n > 1 else 0.0
    equi = n > 2 and abs(nodes[n - 1] - nodes[0] - (n - 1) * h) <= 1e-12 * (1.0 + abs(nodes[0]))
    for i in range(nv):
        for a in range(r):
            if equi:
                step = math.exp(A[i, a] * h)
                v = math.exp(A[i, a] * nodes[0])
                for m in range(n):
                    T[i, a, m] = v
                    v *= step
            else:
                for m in range(n):
                    T[i, a, m] = math.exp(A[i, a] * nodes[m])
    return T


@njit(cache=True)
def stein_hessian(Hy, P):
    """E∇²f = Pᵀ sym(H_y) P from H_y = E[(P∇f) ⊗ Σ_y^(−½) z] (Stein's lemma)."""
    r, nv = P.shape
    EH = np.zeros((nv, nv))
    for a in range(r):
        for b in range(r):
            h = 0.5 * (Hy[a, b] + Hy[b, a])
            for i in range(nv):
                for j in range(nv):
                    EH[i, j] += P[a, i] * h * P[b, j]
    return EH


@njit(cache=True)
def score_moments(Ef, Sz, Szz, Wh, P):
    """(acc, H_y) for ``finish`` in Stein mode from the sums of f alone (an integrand with a jump, whose
    derivatives hold Dirac masses): Sz = E[f z], Szz = E[f z zᵀ] over the whitened nodes z, Wh = Σ_y^(−½).
    Stein's lemma twice: E∇_y f = Wh E[f z], E∇²_y f = Wh (E[f z zᵀ] − E f I) Wh; acc = [E f, Pᵀ E∇_y f]."""
    r, nv = P.shape
    Ey = Wh @ Sz
    M = Szz.copy()
    for a in range(r):
        M[a, a] -= Ef
    Hy = Wh @ M @ Wh
    acc = np.zeros(1 + nv)
    acc[0] = Ef
    for i in range(nv):
        for a in range(r):
            acc[1 + i] += P[a, i] * Ey[a]
    return acc, Hy


@njit(cache=True)
def price_gradient(Eg, EH, mut, covt):
    """∂E f/∂θ_p = ∂μ/∂θ_p · E∇f + ½ ∂Σ/∂θ_p : E∇²f (Price's theorem)."""
    nv = Eg.shape[0]
    grad = np.zeros(mut.shape[0])
    for p in range(mut.shape[0]):
        for i in range(nv):
            grad[p] += mut[p, i] * Eg[i]
            for j in range(nv):
                grad[p] += 0.5 * covt[p, i, j] * EH[i, j]
    return grad


@njit(cache=True)
def finish(mode, acc, Hy, P, mut, covt):
    """(E f, ∂E f/∂θ) from the accumulated sums acc = [E f, E∇f, upper E∇²f] (∂ = 0 for a value-only
    term; E∇²f from ``stein_hessian`` in Stein mode)."""
    r, nv = P.shape
    if mode == VALUE:
        return acc[0], np.zeros(mut.shape[0])
    if mode == STEIN:
        EH = stein_hessian(Hy, P)
    else:
        EH = np.zeros((nv, nv))
        c = 1 + nv
        for i in range(nv):
            for j in range(i, nv):
                EH[i, j] = acc[c]
                EH[j, i] = acc[c]
                c += 1
    return acc[0], price_gradient(acc[1:1 + nv].copy(), EH, mut, covt)
