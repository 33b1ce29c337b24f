"""Parameterisation kinds: one class per way of representing and training an index matrix S_k.

``KINDS`` maps the spec's ``parameterization`` name to the kind; ``Index.kind`` (symattn.spec)
is the one place a name becomes a kind. A new kind is a module here and a line in ``KINDS``.
"""
from __future__ import annotations

from .base import Kind, diagonal_view, factor_width, transpose
from .direct import Direct, goe
from .general import General
from .identity import Identity
from .tied import Tied
from .untied import Untied

KINDS: dict = {k.name: k for k in (Direct(), General(), Tied(), Untied(), Identity())}


def alphabet_of(spec):
    """The word alphabet of a spec: each index's letters as its kind declares them, and with a feature
    covariance the frozen symmetric letter Σ = (K, "S") after them (docs/theory.md §1)."""
    from ..symbolic.words import Alphabet
    extra = [] if spec.features.identity else [True]
    return Alphabet([ix.symmetric for ix in spec.indices] + extra,
                    ["".join(op for _, op in ix.kind.letters(k)) for k, ix in enumerate(spec.indices)] + ["S"] * len(extra))


def metric_letters(spec) -> tuple:
    """The preconditioner's letters in the whitened hierarchy: () for Σ = I, else (Σ,) (``alphabet_of``)."""
    return () if spec.features.identity else ((spec.K, "S"),)

__all__ = ["KINDS", "Kind", "alphabet_of", "metric_letters", "Direct", "General", "Tied", "Untied", "Identity", "factor_width", "goe", "transpose",
           "diagonal_view"]
