"""symattn: exact high-dimensional learning dynamics of attention-indexed models.

Pipeline: spec -> symbolic (Gaussian expectations, word algebra, free probability) -> derive
(potential, hierarchies) -> codegen -> integrate; simulate; compare; cli.
"""
from .errors import NumericalFailure
from .spec import Spec, SpecError, load_spec


def potential(spec, tol: float = 1e-8):
    """Φ(θ) and its gradient for a spec (see ``symattn.derive.potential``)."""
    from .derive.potential import Potential
    return Potential(spec, tol=tol)


def simulate(spec, dim, seeds=1, time=1.0, points=21, **kw):
    """Online SGD at finite d, order parameters averaged over seeds (``symattn.simulate``)."""
    from .simulate import simulate as _simulate
    return _simulate(spec, dim=dim, seeds=seeds, time=time, points=points, **kw)


__all__ = ["Spec", "SpecError", "NumericalFailure", "load_spec", "potential", "simulate"]

__version__ = "0.1.0"
