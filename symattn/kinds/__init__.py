"""Parameterisation kinds: one class per way of representing and training an index matrix S_k.

``KINDS`` maps the spec's ``parameterization`` name to the kind; ``Index.kind`` (symattn.spec)
is the one place a name becomes a kind. A new kind is a module here and a line in ``KINDS``.
"""
from __future__ import annotations

from .base import Kind, diagonal_view, factor_width, transpose
from .direct import Direct, goe
from .identity import Identity
from .tied import Tied
from .untied import Untied

KINDS: dict = {k.name: k for k in (Direct(), Tied(), Untied(), Identity())}

__all__ = ["KINDS", "Kind", "Direct", "Tied", "Untied", "Identity", "factor_width", "goe", "transpose",
           "diagonal_view"]
