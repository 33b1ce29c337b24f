"""Every registered parameterisation kind (symattn.kinds.KINDS), looped over as diffrax loops over
its solvers: a kind is tested by registering it.

1. Its SGD gradient (the kind's backward pass and trace terms) equals central finite differences
   of the batch loss along a random direction of its parameter set, to 1e-6 relative.
2. Its free-probability initial moments agree with the moments of matrices it draws at
   d = 600 (two seeds): normalised traces of these laws fluctuate by O(1/d) around their limit,
   ≲ 0.01 here for words up to length 3 at unit scales; the tolerance is 0.03·(1 + |μ|).
3. The spec keys it accepts are the ones it declares (width, scale, a pair of init scales).
4. Its derived system (one data representation, ``derivation.system.System``) gives the same
   right-hand side in both backends: the NumPy reference and the generated module.
"""
from __future__ import annotations

import numpy as np
import pytest

from symattn.derivation import state as R
from symattn.errors import SpecError
from symattn.initial import free_moments, sample_moments
from symattn.kinds import KINDS, alphabet_of
from symattn.simulation.init import draw_initial
from symattn.simulation.sgd import Model
from symattn.spec import load_spec

ALL = sorted(KINDS)


def _index(name, role, kind, **extra):
    ix = {"name": name, "role": role, "parameterization": kind.name}
    if kind.uses_width:
        ix["width"] = 0.75
    if kind.uses_scale:
        ix["scale"] = 0.8
    else:
        ix["init_scale"] = 0.9
    return {**ix, **extra}


def spec_with(kind_name, activation="h2", tokens=1):
    """A student of this kind against a tied teacher, or (teacher-only kind) a tied student
    against a teacher of this kind."""
    kind, tied = KINDS[kind_name], KINDS["tied"]
    if kind.trainable:
        ixs = [_index("student", "student", kind), _index("teacher", "teacher", tied)]
    else:
        ixs = [_index("student", "student", tied), _index("teacher", "teacher", kind)]
    model = {"tokens": tokens, "activation": activation}
    if activation == "softmax":
        model["beta"] = 1.0
    return load_spec({"name": f"kind_{kind_name}", "model": model, "indices": ixs,
                      "training": {"batch_size": 8, "noise_ratio": 0.01}, "theory": {"truncation": 3}})


@pytest.mark.parametrize("activation,tokens", [("h2", 1), ("softmax", 2)])
@pytest.mark.parametrize("name", ALL)
def test_sgd_gradient_is_the_derivative_of_the_batch_loss(name, activation, tokens):
    spec = spec_with(name, activation, tokens)
    d = 24
    model = Model(spec, d)
    model.set_state(draw_initial(spec, d, 3))
    rng = np.random.default_rng(11)
    X, xi = model.sample(rng)
    grads = model.gradients(X, xi)
    base = model.get_state()
    for k in spec.students:
        kind = spec.indices[k].kind
        for nm in kind.factors:
            D = kind.tangent(nm, rng.standard_normal(base[k][nm].shape))
            h = 1e-5
            vals = []
            for sgn in (1, -1):
                st = [{a: v.copy() for a, v in s.items()} for s in base]
                st[k][nm] = st[k][nm] + sgn * h * D
                model.set_state(st)
                vals.append(model.batch_loss(X, xi))
            fd = (vals[0] - vals[1]) / (2 * h)
            an = float(np.sum(grads[k][nm] * D))
            assert abs(fd - an) <= 1e-6 * max(1.0, abs(an)), (name, nm, fd, an)
            model.set_state(base)


@pytest.mark.parametrize("name", ALL)
def test_free_initial_moments_match_drawn_matrices(name):
    spec = spec_with(name)
    alphabet = alphabet_of(spec)
    words = [()] + alphabet.words(3)
    free = free_moments(spec, words)
    sampled = np.mean([sample_moments(spec, words, 600, seed) for seed in (0, 1)], axis=0)
    bad = np.abs(free - sampled) > 0.03 * (1 + np.abs(free))
    assert not bad.any(), [(words[i], free[i], sampled[i]) for i in np.nonzero(bad)[0]]


@pytest.mark.parametrize("name", ALL)
def test_spec_keys_follow_the_kind(name):
    kind = KINDS[name]
    role = "student" if kind.trainable else "teacher"
    other = _index("t2", "teacher", KINDS["tied"])
    base = {"name": "keys", "model": {"tokens": 1, "activation": "h2"}, "training": {"batch_size": 8}}

    def check(ix, ok):
        raw = {**base, "indices": [ix, other] if role == "student" else [_index("s", "student", KINDS["tied"]), ix]}
        if ok:
            load_spec(raw)
        else:
            with pytest.raises(SpecError):
                load_spec(raw)

    ix = _index("x", role, kind)
    check(ix, True)
    check({**ix, "width": 0.5}, kind.uses_width)
    check({**{k: v for k, v in ix.items() if k != "init_scale"}, "scale": 2.0}, kind.uses_scale)
    if kind.uses_init_scale:
        check({**ix, "init_scale": [0.7, 0.8]}, kind.init_pair)
    check({**ix, "role": "student"}, kind.trainable)


@pytest.mark.parametrize("name", ALL)
def test_sgd_step_applies_its_gradient(name):
    """One fused/own-update step equals θ ← (1 − αγ/d)θ − α∇θ with ∇ from ``gradients``."""
    spec = load_spec({**spec_with(name).raw, "training": {"batch_size": 8, "noise_ratio": 0.01, "weight_decay": 0.3}})
    d = 20
    model = Model(spec, d)
    model.set_state(draw_initial(spec, d, 5))
    X, xi = model.sample(np.random.default_rng(2))
    before, grads = model.get_state(), model.gradients(X, xi)
    model.step(X, xi)
    after = model.get_state()
    a, decay = model.alpha, 1 - model.alpha * spec.weight_decay / d
    for k in range(spec.K):
        for nm, v in before[k].items():
            want = decay * v - a * grads[k][nm] if spec.indices[k].trainable else v
            assert np.allclose(after[k][nm], want, rtol=1e-10, atol=1e-12), (name, k, nm)


def _population_loss(spec, state, dim):
    """Exact finite-d population ½-MSE of the linear L = 1 model: with Δ = S_student − S_teacher,
    E[xᵀAx] = Tr A and Var(xᵀAx) = Tr A² + Tr AAᵀ for x ~ N(0, I_d), centred indices shifted by
    their trace (docs/theory.md §1) — an independent formula, not the engine's Φ."""
    from symattn.simulation.init import dense
    A = [dense(s) for s in state]
    s, t = spec.students[0], spec.teachers[0]
    mean = sum(sign * (0.0 if spec.indices[k].centred else np.trace(A[k]) / np.sqrt(dim))
               for sign, k in ((1, s), (-1, t)))
    D = A[s] - A[t]
    return 0.5 * (mean ** 2 + (np.trace(D @ D) + np.sum(D * D)) / dim)


@pytest.mark.parametrize("name", [n for n in ALL if not KINDS[n].fast_phase])
def test_limit_drift_is_the_exact_population_drift_of_a_quadratic_loss(name):
    """dμ_w/dτ of the derived system at the moments of concrete d = 16 matrices equals the drift
    of μ_w under the exact population gradient flow dθ/dτ = −d ∇_θ Φ_d (finite differences of the
    formula above; ε = 0), for every word the truncation keeps exact (|w| < M, or all when the
    kind's flow closes). Kinds with a fast phase (untied) are excluded: their slow system is the
    adiabatic reduction with the mean slaved (docs/theory.md §6), not the raw drift."""
    from symattn.derivation import derive
    from symattn.symbolic import freeprob

    spec = spec_with(name, "linear")
    d, seed, M = 16, 7, 3
    system = derive(spec, truncation=M)
    words = system.words
    mu = R.initial(system, "sample", dim=d, seed=seed)
    rhs = R.rhs(system, 0.0, mu, R.params(system, 0.0))[:len(words)]
    state = draw_initial(spec, d, seed)
    k = spec.students[0]
    kind = spec.indices[k].kind
    h = 1e-6
    flow = {}
    for nm in kind.factors:                                  # θ̇ = −d ∇_θ Φ_d, entry by entry
        X = state[k][nm]
        g = np.zeros_like(X)
        for idx in np.ndindex(X.shape):
            vals = []
            for sgn in (1, -1):
                st = [dict(s) for s in state]
                Y = X.copy()
                Y[idx] += sgn * h
                st[k] = {**st[k], nm: Y}
                vals.append(_population_loss(spec, st, d))
            g[idx] = (vals[0] - vals[1]) / (2 * h)
        flow[nm] = -d * kind.tangent(nm, g)
    step = 1e-4
    moved = []
    for sgn in (1, -1):
        st = [dict(s) for s in state]
        st[k] = {nm: state[k][nm] + sgn * step * flow[nm] for nm in kind.factors}
        moved.append(freeprob.sample_moments(words[1:], st))
    drift = (moved[0] - moved[1]) / (2 * step)
    keep = [i for i, w in enumerate(words[1:], 1) if kind.closes or len(w) < system.truncation]
    assert keep
    got, want = rhs[keep], drift[[i - 1 for i in keep]]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-7 * (1 + np.abs(want).max())), (name, got, want)


@pytest.mark.parametrize("name", ALL)
def test_reference_and_generated_backends_agree(name):
    """The reference backend (``symattn.derivation.state``: NumPy, the Python expectations, the Newton of
    ``derivation.means`` with the exact Hessian) and the generated module (printed coefficient lines,
    compiled closed forms, the same Newton text with a finite-difference Jacobian) evaluate the one
    ``System`` of this kind's model alike: at a d = 16 sampled state, with and without SGD noise, to
    1e-9 relative — the closed forms agree to rounding, and the slaved means (untied) are converged to
    1e-12 with Jacobians that differ by O(1e-10)."""
    from symattn.codegen.systems import compiled
    from symattn.derivation import derive
    system = derive(spec_with(name, "linear"), truncation=3)
    mod = compiled(system)
    y = R.initial(system, "sample", dim=16, seed=3)
    for eps in (0.0, 0.05):
        p = R.params(system, eps, y)
        ref = R.rhs(system, 0.0, y, p)
        np.testing.assert_allclose(mod.rhs(0.0, y, p), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


# ------------------------------------------------------------------ the matrix-level protocol (symattn.spectral.protocol)
def _protocol_cases():
    """Every trainable kind, the tied one in both of its size-N forms (a factor W at width 0.5, S itself at 0.75)."""
    cases = [(n, None) for n in ALL if KINDS[n].trainable]
    return cases + [("tied", 0.5)] if any(KINDS[n].uses_width for n in ALL) else cases


def _letter_matrices(spec, mats, N) -> dict:
    """Every index's letters as dense N×N matrices: S (M = UVᵀ for a pair), T = Sᵀ, and a pair's A = UUᵀ, B = VVᵀ."""
    out = {}
    for l, M in enumerate(mats):
        S = M.dense(N)
        out[(l, "S")], out[(l, "T")] = S, S.T
        if M.form == "pair":
            U, V = M.value
            out[(l, "A")], out[(l, "B")] = U @ U.T, V @ V.T
    return out


def _product(letters, word, N):
    P = np.eye(N)
    for x in word:
        P = P @ letters[x]
    return P


class _Keys(dict):
    def __missing__(self, key):                       # letter_flow asks for coefficient indices: the names themselves
        return key


def _protocol_setup(name, width):
    from symattn.spectral import initial_realisation
    settings = {"indices.student.width": width} if width is not None else None
    spec = load_spec(spec_with(name).raw, settings=settings)
    N = 8
    mats = initial_realisation(spec, N, seed=3)
    return spec, N, mats


@pytest.mark.parametrize("name", ALL)
def test_every_kind_implements_the_matrix_level_protocol(name):
    """Each kind is a ``MatrixLevelKind`` and realises its law at size N = 64 as one of the engine's representations,
    with Tr S/N and Tr S²/N at the law's free moments within 3/N·(1 + |μ|) (quantile spectra: the discretisation
    and, for a product of two factors, the O(1/N) of their rotations)."""
    from symattn.matrix import Mat
    from symattn.spectral import MatrixLevelKind
    from symattn.symbolic import freeprob
    kind = KINDS[name]
    assert isinstance(kind, MatrixLevelKind)
    spec = spec_with(name)
    k = next(i for i, ix in enumerate(spec.indices) if ix.kind is kind)
    M = kind.realise(spec.indices[k], 64, np.random.default_rng(0), False)
    assert isinstance(M, Mat) and M.form in ("scalar", "diag", "factor", "dense", "ndense", "pair")
    mu = freeprob.free_moments_float([((0, "S"),), ((0, "S"), (0, "S"))], [kind.law(spec.indices[k])])
    S = M.dense(64)
    got = [np.trace(S) / 64, np.trace(S @ S) / 64]
    assert np.all(np.abs(np.array(got) - mu) <= 3.0 / 64 * (1 + np.abs(mu))), (name, got, mu)


@pytest.mark.parametrize("name,width", _protocol_cases())
def test_matrix_velocity_is_the_letter_flow(name, width):
    """The size-N velocity of each trainable kind (``matrix_velocity``) moves its letters as the hierarchy's letter
    flow says (``letter_flow``): at random gradient matrices GΩ, GΨ (Γ = GΩ + GΨ) and a weight decay γ = 0.3, the
    derivative of every letter along the velocity (central differences: the letters are at most quadratic in the
    parts, so exact to round-off) equals Σ coefficient·factor·(its word of letters), to 1e-9 relative. An untied
    kind's force β (docs/theory.md §6: it balances the gradient's push on tr M) is solved from the letter flow's own
    gradient terms, tr Ṁ = 0 without the decay, independently of the velocity's formula for it."""
    from symattn.matrix import stack
    from symattn.spectral.field import Context
    spec, N, mats = _protocol_setup(name, width)
    k, K = spec.students[0], spec.K
    kind = spec.indices[k].kind
    rng = np.random.default_rng(5)
    omega, psi, wd = rng.standard_normal((1, K, K)), rng.standard_normal((1, K, K)), 0.3
    batch = [stack([m]) for m in mats]
    parts = kind.matrix_velocity(k, Context(batch, (omega, psi), {}, wd, K))
    vel = [np.asarray(p)[0] for p in parts]
    h = 1e-6
    moved = [_letter_matrices(spec, [m if i != k else m.with_parts([p + s * h * v for p, v in zip(m.parts(), vel)])
                                     for i, m in enumerate(mats)], N) for s in (1, -1)]
    letters = _letter_matrices(spec, mats, N)
    values = {"gamma": wd}
    for l in range(K):
        values.update({f"GO_{k}_{l}": omega[0, k, l], f"GP_{k}_{l}": psi[0, k, l],
                       f"Gamma_{k}_{l}": omega[0, k, l] + psi[0, k, l]})
    flows = kind.letter_flow(k, K, _Keys(), [ix.symmetric for ix in spec.indices])

    def rate(items, beta):
        return sum(c * (beta if key == f"beta_{k}" else values[key]) * _product(letters, word, N)
                   for key, word, c in items)
    beta = 0.0
    if any(key == f"beta_{k}" for items in flows.values() for key, _, _ in items):
        push = [it for it in flows[(k, "S")] if it[0] != "gamma"]      # β balances the gradient's push on tr M
        r0, r1 = np.trace(rate(push, 0.0)), np.trace(rate(push, 1.0))
        beta = -r0 / (r1 - r0)
    for letter, items in flows.items():
        want = rate(items, beta)
        got = (moved[0][letter] - moved[1][letter]) / (2 * h)
        scale = 1.0 + np.abs(want).max()
        assert np.abs(got - want).max() <= 1e-6 * scale, (name, letter, np.abs(got - want).max())


@pytest.mark.parametrize("name,width", _protocol_cases())
def test_noise_map_is_the_fluctuation_form(name, width):
    """The size-N noise map of each trainable kind (``noise_map``, an increment X symmetric for a symmetric kind)
    changes its letters at first order as the hierarchy's fluctuation forms say (``fluctuation_forms``:
    Σ coefficient·(left word)·X or Xᵀ·(right word)), central differences in X to 1e-8 relative; a zero increment
    leaves it unchanged. And ``split_degree``/``reads_square`` answer for its representation."""
    spec, N, mats = _protocol_setup(name, width)
    k = spec.students[0]
    kind, M = spec.indices[k].kind, mats[k]
    X = np.random.default_rng(8).standard_normal((N, N))
    if M.symmetric:
        X = 0.5 * (X + X.T)
    same = kind.noise_map(M, 0.0 * X)
    assert all(np.array_equal(a, b) for a, b in zip(same.parts(), M.parts()))
    h = 1e-5
    moved = [_letter_matrices(spec, [m if i != k else kind.noise_map(M, s * h * X) for i, m in enumerate(mats)], N)
             for s in (1, -1)]
    letters = _letter_matrices(spec, mats, N)
    for (l, op) in kind.letters(k):
        want = sum(c * _product(letters, left, N) @ (X if dt == "d" else X.T) @ _product(letters, right, N)
                   for left, dt, right, c in kind.fluctuation_forms((l, op)))
        got = (moved[0][(l, op)] - moved[1][(l, op)]) / (2 * h)
        assert np.abs(got - want).max() <= 1e-8 * (1 + np.abs(want).max()), (name, op)
    assert kind.split_degree(M) in (1, 2) and isinstance(kind.reads_square(M), bool)
