"""The exact expected-gradient flow at finite d (``derivation.finite_d``): SGD's mean step on simulate's initial
d×d matrices of ``seed``, for a loss polynomial in G (docs/theory.md §9)."""
from __future__ import annotations

from ..errors import UsageError
from .method import Method
from .options import Option
from .table import TheoryTable


def _check(o, given, say):
    if o.get("dim") is None:
        raise UsageError(f"{say('dim')}: needed by the exact finite-d flow (the dimension d of its matrices)")


def run(spec, o) -> TheoryTable:
    from ..derivation.finite_d import solve_finite_d
    table = solve_finite_d(spec, o["dim"], time=o["time"], points=o["points"], seed=o["seed"])
    return TheoryTable(table, "finite_d", o, spec.name, result=table)


METHOD = Method("finite_d", "the exact expected-gradient flow at d", run=run, flag="--exact-finite-d", check=_check,
                options={"dim": Option(None, "the dimension d of the exact flow", "whole", low=2)})
