"""Derivations from a spec: the potential Φ (``potential``) and the limit ODE systems (``hierarchy``)."""
from __future__ import annotations

from ..spec import load_spec


def derive(spec, truncation: int | None = None, tol: float = 1e-8):
    """The limit ODE system of a spec at truncation M (direct, tied; untied in ``untied``).

    Returns a system object with ``words``, sparse ``terms``, ``source()`` (generated module)
    and ``module()`` (the compiled right-hand side).
    """
    from .hierarchy import derive_symmetric
    from .potential import Potential

    spec = load_spec(spec)
    P = Potential(spec, tol=tol)
    if any(spec.indices[k].parameterization == "untied" for k in range(spec.K)):
        from .untied import derive_untied
        return derive_untied(spec, truncation, potential=P)
    return derive_symmetric(spec, truncation, potential=P)


from .._callable import make_callable  # noqa: E402

make_callable(__name__)   # symattn.derive(...) calls derive()
