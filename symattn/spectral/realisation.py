"""The size-N start of the matrix-level flow (docs/theory.md §7): realisations of the free initial laws.

The first frozen, non-identity index is diagonal with exact quantile eigenvalues ``λ_i = F^{-1}((i − ½)/N)`` of
its law; every other index is ``O diag(λ) Oᵀ`` with its own quantile eigenvalues and an independent Haar rotation O
(QR of a Gaussian matrix with sign fix), so the family is asymptotically free. Laws: tied (Wishart ``W Wᵀ``, W
N×κN with entries N(0, σ²/N)) = free Poisson of rate κ and jump σ² (Marchenko–Pastur, atom 1 − κ at 0 when κ < 1);
direct (``σ·GOE`` with ``Tr Z²/N → 1``) = semicircle of radius 2σ; identity teacher = ``scale·I``. Each kind
realises its own law (``Kind.realise``); ``init="sample"`` starts from the very matrices a simulation seed draws.
"""
from __future__ import annotations

import math

import numpy as np

from ..matrix import Mat, NDense, Pair, Scalar, from_state, stack
from ..spec import require_spec
from .field import Flow

BLOWUP = 1e12          # |q| beyond this is a divergence
MIN_STEP = 1e-14        # a step below this (relative to the horizon) cannot advance the time: a numerical failure
FLOAT32_RANGE = (1e-8, 1e8)   # entries of the trained matrices in which the noisy flow's float32 products neither
                              # underflow nor overflow (cubes of the entries stay within 1e±24); else float64
CHEAP_BOUND = 1e3      # entries below this/N keep every order parameter below BLOWUP: the largest is
                        # quartic in a factor's entries, Tr((WWᵀ)²)/N ≤ N (N·(1e3/N)²)² = 1e12/N


def initial_realisation(spec, size: int, seed: int = 0, init: str = "free", odd=()) -> list:
    """The size-N matrices :func:`solve_spectral` starts from (list of :class:`symattn.matrix.Mat`).

    ``init="free"``: the quantile realisation of the free initial laws (module docstring; the first
    frozen index with factors is diagonal, the rotations come from
    ``numpy.random.default_rng(SeedSequence([seed, size]))`` in spec order). ``init="sample"``: the
    very matrices ``simulate`` draws for dimension d = ``size`` and seed ``seed``. ``odd``: frozen
    indices decoupled from the students (:func:`decoupled_teachers`); then every index is built
    from two independent realisations of size N/2, block-diagonally, and those in ``odd``
    off-diagonally (:func:`join_halves`)."""
    spec = require_spec(spec, "initial_realisation")
    if init == "sample":
        from ..initial import draw_initial
        return [from_state(ix.kind, s) for ix, s in zip(spec.indices, draw_initial(spec, int(size), int(seed)))]
    if init != "free":
        raise ValueError(f"init {init!r}: must be 'free' or 'sample'")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(size)]))
    f = spec.features
    if odd:
        n = int(size) // 2
        mats = [join_halves(ix.kind.realise(ix, n, rng, False), ix.kind.realise(ix, n, rng, False), k in odd)
                for k, ix in enumerate(spec.indices)]
        return mats if f.identity else [m.whitened(np.tile(f.root(n, matched=True), 2)) for m in mats]
    # Σ (diagonal) is free from every index: then no index may be diagonal in Σ's basis
    diag_k = next((k for k in spec.teachers if spec.indices[k].kind.factors), None) if f.identity else None
    mats = [ix.kind.realise(ix, size, rng, k == diag_k) for k, ix in enumerate(spec.indices)]
    return mats if f.identity else [m.whitened(f.root(size, matched=True)) for m in mats]


ODD_FORMS = (Pair, NDense)     # the realisations :func:`join_halves` can write off-diagonally


def join_halves(a: Mat, b: Mat, odd: bool) -> Mat:
    """Two independent size-n realisations of one law joined into a size-2n one: block-diagonal
    diag(a, b), or (``odd``) off-diagonal [[0, a], [b, 0]] — an untied pair as U = [[0, U_a], [U_b, 0]],
    V = [[V_b, 0], [0, V_a]], so that M = UVᵀ = [[0, U_a V_aᵀ], [U_b V_bᵀ, 0]]. With O = diag(I, −I),
    O M Oᵀ = −M for the odd indices and = M for the others (docs/theory.md §7)."""
    from scipy.linalg import block_diag
    if isinstance(a, Scalar):
        return a
    if isinstance(a, Pair):
        (Ua, Va), (Ub, Vb) = a.value, b.value
        if not odd:
            return Pair((block_diag(Ua, Ub), block_diag(Va, Vb)))
        U = np.block([[np.zeros((Ua.shape[0], Ub.shape[1])), Ua], [Ub, np.zeros((Ub.shape[0], Ua.shape[1]))]])
        return Pair((U, block_diag(Vb, Va)))
    if odd:
        if not isinstance(a, NDense):
            raise ValueError(f"an index realised as {a.form!r} cannot be odd")
        z = np.zeros_like(a.value)
        return NDense(np.block([[z, a.value], [b.value, z]]))
    return type(a)(block_diag(a.value, b.value))


def decoupled_teachers(spec, P, trials: int = 4) -> list:
    """The frozen indices t of the free start that the students do not see at zero overlap: t's law
    has mean 0 and can be realised odd (``ODD_FORMS``), and on the set {Ω_st = Ψ_st = 0 for every
    student s and every such t, m_t = 0} Φ's coupling vanishes, GΩ_st = GΨ_st = 0 — checked at
    ``trials`` random points of the set (odd realisations at N = 8, random student means). The flow
    then leaves the set invariant, so in the limit the overlap with t stays exactly 0 (the paper's
    uninformative h2 teacher); a Haar realisation at finite N starts O(1/N) off the set, and
    where the set is unstable it escapes (docs/theory.md §7)."""
    cand = []
    rng = np.random.default_rng(0)
    for k in spec.teachers:
        ix = spec.indices[k]
        if isinstance(ix.kind.realise(ix, 4, rng, False), ODD_FORMS):
            cand.append(k)
    if not cand or not spec.students:
        return []
    names = {n: i for i, n in enumerate(P.names)}
    fresh = P.has_quadrature and P.order is None        # calibrated here for the check only
    flow = Flow(spec, initial_realisation(spec, 8, seed=1000, odd=cand), 8, P)   # reads the order parameters
    for trial in range(trials):
        mats = [stack([m]) for m in initial_realisation(spec, 8, seed=1000 + trial, odd=cand)]
        th = flow.theta(mats, 0.0, slave=False)[0][0]
        for k in spec.students:
            if not spec.indices[k].centred:
                th[names[P.op.m(k).name]] = rng.uniform(-0.7, 0.7)
        G = P.gradients(th)
        scale = 1.0 + max(float(np.max(np.abs(G.omega))), float(np.max(np.abs(G.psi))))
        cand = [t for t in cand if all(abs(G.omega[s, t]) + abs(G.psi[s, t]) <= 1e-10 * scale
                                       for s in spec.students)]
        if not cand:
            break
    if fresh:
        P.order = None
    return cand


def start(spec, P, N, seeds, init, odd=()):
    """The flow of the realisations of ``seeds`` (one batch; a seed repeated gives the same initial
    matrices) at their first slow-phase state: matrices, calibrated quadrature, relaxed means."""
    seeds = [seeds] if isinstance(seeds, (int, np.integer)) else seeds
    made = {}
    for s in seeds:
        if s not in made:
            made[s] = initial_realisation(spec, N, s, init, odd=odd)
    mats = [made[s] for s in seeds]
    means = {k: np.array([math.sqrt(N) * float(m[k].trace(N)) for m in mats])
             for k, ix in enumerate(spec.indices) if not ix.centred} if init == "sample" else {}
    flow = Flow(spec, mats, N, P, fixed_means=means)
    flow.blocks = N // 2 if odd else None         # two independent halves: the noise stays block-diagonal
    flow.set_metric(bool(odd), matched=init != "sample")
    if P.has_quadrature and P.order is None:
        P.calibrate(flow.theta(flow.mats, 0.0, slave=False)[0][0])
    flow.relax(flow.mats, initial_means=means)
    return flow
