"""Online SGD at finite d (THEORY.md §1, §3): ``simulate(spec, dim, seeds, time, points)``.

Modules: ``init`` (initial matrices, §3/§7), ``sgd`` (one batched SGD step), ``measure`` (order
parameters, test loss), ``run`` (seeds in parallel, table/CSV), ``cli`` (``simulate`` command).
"""
from .init import dense, draw_initial
from .measure import column_names, order_parameters
from .run import SimulationResult, run_seed, simulate
from .sgd import Model

__all__ = ["simulate", "SimulationResult", "draw_initial", "dense", "Model", "order_parameters",
           "column_names", "run_seed"]


# ``import symattn.simulate`` rebinds the attribute ``symattn.simulate`` (the function of
# symattn/__init__.py) to this sub-package; making the module callable keeps
# ``symattn.simulate(spec, dim=...)`` working either way.
import sys as _sys
import types as _types


class _CallableModule(_types.ModuleType):
    def __call__(self, spec, dim, seeds=1, time=1.0, points=21, **kw):
        return simulate(spec, dim=dim, seeds=seeds, time=time, points=points, **kw)


_sys.modules[__name__].__class__ = _CallableModule
