"""The fast phase of untied students' means (docs/theory.md §6): dm/dt = −D ∂Φ/∂m on the fast axis nα, the moments
frozen; its fixed point m* starts the slow phase."""
from __future__ import annotations

from .method import Method
from .moments import check_start
from .options import Option
from .table import TheoryTable


def _applies(spec):
    if not any(spec.indices[k].kind.fast_phase for k in spec.students):
        return "the fast phase exists only for untied students (docs/theory.md §6)"
    return None


def run(spec, o) -> TheoryTable:
    from ..codegen.warm import runnable
    from ..derivation import min_truncation
    from ..derivation.state import fast_phase
    system = runnable(spec, max(2, min_truncation(spec)))      # Φ by the compiled module, warm without SymPy
    r = fast_phase(system, time=o["time"], points=o["points"], init=o["init"], dim=o["dim"], seed=o["seed"])
    return TheoryTable(r.table, "fast_phase", o, spec.name, info={"m_star": r.m_star, "rate": r.rate}, result=r)


METHOD = Method(
    "fast_phase", "the fast phase of the means, the moments frozen", run=run, flag="--fast", applies=_applies,
    check=lambda o, given, say: check_start(o, given, say),
    options={"init": Option("free", "free or sample (simulate's matrices at dim)", "choice", choices=("free", "sample")),
             "dim": Option(None, "with it the column time = nα/d as well; the dimension of sampled matrices",
                           "whole", low=1)})
