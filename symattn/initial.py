"""Initial conditions of the limit dynamics (docs/theory.md §3, §7).

``free``: exact d → ∞ moments of asymptotically free initial laws (free probability).
``sample``: the moments of the very matrices ``simulate`` draws for (d, seed), so that theory and
one simulation share their initial state (``draw_initial``).

**Seed policy.** Every random stream of a simulation derives from (seed, d, what it is for)
through ``numpy.random.SeedSequence``: index k's initial matrices from ``stream(seed, d,
INITIAL, k)``, the batches from ``stream(seed, d, BATCHES)``, the test-loss samples from
``stream(seed, d, TEST)``. Runs at different d are therefore independent (``compare --dims`` fits
1/d through independent points), and an index's matrices do not change when another index is
added to the spec. ``draw_initial(spec, d, s)`` with an integer s reproduces seed s's initial
state; with a ``numpy.random.Generator`` it draws every index in spec order from that generator.
"""
from __future__ import annotations

import numpy as np

from .spec import Spec, load_spec, require_spec
from .symbolic import freeprob


def laws(spec: Spec) -> list:
    """The initial law of every index, in spec order."""
    return [ix.kind.law(ix) for ix in spec.indices]


def free_moments(spec, words) -> np.ndarray:
    """μ_w(0) for each word (the empty word is 1), exact free-probability values as floats; with a feature
    covariance, of the whitened words in the letters S̃_k and Σ (``symbolic.metric``)."""
    spec = require_spec(spec, "free_moments")
    if not spec.features.identity:
        from .symbolic.metric import WhitenedMoments
        phi = WhitenedMoments(laws(spec), spec.features.moment)
        return np.array([phi(w) for w in words])
    return np.array([1.0 if not w else freeprob.free_moment_value(w, laws(spec)) for w in words])


def sample_moments(spec, words, dim: int, seed: int = 0) -> np.ndarray:
    """μ_w(0) measured on the initial matrices of simulation seed ``seed`` at dimension ``dim``."""
    spec = require_spec(spec, "sample_moments")
    factors = draw_initial(spec, dim, int(seed))
    if not spec.features.identity:                         # the letter Σ = (K, "S") of the whitened words
        factors.append({"S": np.diag(spec.features.eigenvalues(dim))})
    out = np.ones(len(words))
    full = [i for i, w in enumerate(words) if w]          # the empty word is 1
    if full:                                               # batched: products shared between words
        out[full] = freeprob.sample_moments([words[i] for i in full], factors)
    return out


def initial_order_parameters(spec) -> dict:
    """Free-probability values of the order parameters of Φ (names as in ``Potential.names``) of a spec (a path, a
    dict, an example's name or a Spec: notebooks call it directly)."""
    from .symbolic.gaussian import OrderParameters

    spec = load_spec(spec)
    out, words = {}, {}
    for name in OrderParameters(spec).names:
        kind, *pair = name.split("_")
        ks = [spec.names.index(n) for n in pair]
        if kind == "m":
            out[name] = 0.0
            continue
        a, b = ks
        words[name] = ((a, "S"), (b, {"q": "S", "q1": "T", "q2": "S"}[kind]))     # whitened with Σ (free_moments)
    out.update((n, float(v)) for n, v in zip(words, free_moments(spec, list(words.values()))))
    return out


BATCHES, INITIAL, TEST = 0, 1, 7919      # the purposes of a simulation's random streams


def stream(seed: int, dim: int, purpose: int, index: int | None = None) -> np.random.Generator:
    """The generator of one purpose of simulation seed ``seed`` at dimension ``dim`` (module docstring)."""
    key = [int(seed), int(dim), int(purpose)] + ([] if index is None else [int(index)])
    return np.random.default_rng(np.random.SeedSequence(key))


def draw_initial(spec: Spec, dim: int, rng) -> list:
    """Initial (student) / frozen (teacher) matrices of every index, docs/theory.md §3 laws, spec order.

    ``rng``: a seed (int: seed policy of the module docstring) or a Generator (drawn in order)."""
    out = []
    seeded = isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)
    seed = int(rng) if seeded else None
    root = None if spec.features.identity else spec.features.root(dim)
    for k, ix in enumerate(spec.indices):
        if seeded:
            rng = stream(seed, dim, INITIAL, k)
        state = ix.kind.draw(ix, dim, rng)
        out.append(state if root is None else ix.kind.whiten(state, root))     # whitened (symattn.features)
    return out
