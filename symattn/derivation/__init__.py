"""Derivations from a spec: the potential Φ (``potential``) and the limit ODE systems (``hierarchy``)."""
from __future__ import annotations

from ..spec import MAX_MOMENTS, load_spec

MAX_ENUMERATION = 20_000_000     # letter strings the word enumeration may visit


def min_truncation(spec) -> int:
    """The smallest truncation a spec's hierarchy can be built at: 2, or 3 for an untied index with a feature
    covariance (its mean force reads the words ΣM_lB_k, derivation.untied)."""
    untied = any(not ix.centred for ix in spec.indices)
    return 3 if untied and not spec.features.identity else 2


def closes(spec) -> bool:
    """Whether every student's flow preserves word length, closing the hierarchy at M = 2 (direct S,
    §4): not with a feature covariance, whose Σ letters lengthen every word (§1)."""
    return spec.features.identity and all(spec.indices[k].kind.closes for k in spec.students)


def require_moments(spec, M: int) -> None:
    """SpecError unless Σ's law has the moments φ(Σ^n), n ≤ M, that the whitened words of length ≤ M need
    (``symbolic.metric``; a power law's are infinite from n = 1/a on). Asked where a hierarchy's moments are
    used (``integrate``, ``derive`` on the command line), not where only its Φ, ∇Φ, ν are (the matrix level's
    compiled potential)."""
    top = spec.features.finite_moments()
    if M > top:
        from ..errors import SpecError
        raise SpecError(f"{spec.source}: model.feature_covariance = {spec.features.describe()}: the moment hierarchy "
                        f"at M = {M} needs φ(Σ^n) up to n = {M}, infinite for this law from n = {top + 1} on "
                        f"(the words themselves diverge as d → ∞); use --truncation ≤ {top} or the matrix-level "
                        f"theory (--method spectral, the default)")


def estimate_size(spec, truncation: int) -> dict:
    """Letters, estimated number of moments (canonical words up to length M, ≈ Σ_w n^w/(2w)) and
    letter strings visited by the enumeration (Σ_w n^w) of a hierarchy, before building it."""
    n = sum(len(ix.kind.letters(k)) for k, ix in enumerate(spec.indices)) + (not spec.features.identity)   # Σ
    M = int(truncation)
    if closes(spec):
        M = 2                                    # a length-preserving (direct) system closes at M = 2
    return {"letters": n, "moments": sum(n**w / (2 * w) for w in range(1, M + 1)),
            "strings": sum(n**w for w in range(1, M + 1)), "truncation": M}


def check_size(spec, truncation: int) -> dict:
    """Refuse (SpecError naming theory.truncation) a hierarchy too large to build; else its estimate."""
    from ..errors import SpecError
    est = estimate_size(spec, truncation)
    if est["moments"] > MAX_MOMENTS or est["strings"] > MAX_ENUMERATION:
        raise SpecError(f"{spec.source}: theory.truncation: M = {truncation} over {est['letters']} letters gives "
                        f"~{est['moments']:.2g} moments (at most {MAX_MOMENTS}); use a smaller truncation "
                        f"(--truncation) or the matrix-level solver (--method spectral)")
    return est


def derive(spec, truncation: int | None = None, tol: float = 1e-8):
    """The limit ODE system of a spec at truncation M (direct, tied; untied in ``untied``).

    Returns a ``derivation.system.System`` (data: state layout, sparse terms, coefficient rules,
    columns; ``derivation.state`` evaluates it in NumPy, ``codegen.systems.compiled`` gives its compiled
    right-hand side). A model derived before is read from the per-user store
    (``derivation.store``: keyed by structure, truncation and code, not by the initial laws, ε, B, γ or β).
    """
    from ..progress import note
    from .hierarchy import derive_symmetric
    from .potential import Potential

    spec = load_spec(spec)
    est = check_size(spec, truncation or spec.truncation)
    from . import store

    def build():
        big = f", of the order of {est['moments']:.2g} moments" if est["moments"] > 1e4 else ""
        note(f"deriving {spec.name} (M = {est['truncation']}, {est['letters']} letters{big})")
        P = Potential(spec, tol=tol)
        if not all(ix.symmetric for ix in spec.indices):   # Ω ≠ Ψ: the untied system (docs/theory.md §6)
            from .untied import derive_untied
            return derive_untied(spec, truncation, potential=P)
        return derive_symmetric(spec, truncation, potential=P)
    return store.cached(spec, truncation or spec.truncation, tol, build)


def retruncate(system, M: int):
    """The same model at truncation M, sharing ``system``'s potential and ν (no new quadrature)."""
    from .hierarchy import derive_symmetric
    from .untied import derive_untied
    build = derive_symmetric if all(system.alphabet.symmetric) else derive_untied
    return build(system.spec, M, potential=system.potential, nu=system.nu)
