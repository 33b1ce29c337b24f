"""symattn: exact high-dimensional learning dynamics of attention-indexed models.

Pipeline: spec -> symbolic (Gaussian expectations, word algebra, free probability) -> derive
(potential, hierarchies) -> codegen -> integrate; simulate; compare; cli.
"""
__version__ = "0.1.0"

from . import compare, derive, integrate, simulate  # callable modules: symattn.derive(spec, truncation=M) …
from .errors import NumericalFailure
from .spec import Spec, SpecError, load_spec


def potential(spec, tol: float = 1e-8):
    """Φ(θ) and its gradient for a spec (see ``symattn.derive.potential``)."""
    from .derive.potential import Potential
    return Potential(spec, tol=tol)


__all__ = ["Spec", "SpecError", "NumericalFailure", "load_spec", "potential", "derive", "integrate",
           "simulate", "compare"]
