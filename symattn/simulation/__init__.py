"""Online SGD at finite d (docs/theory.md §1, §3): ``simulate(spec, dim, seeds, time, points)``.

Modules: ``init`` (initial matrices, §3/§7), ``sgd`` (one batched SGD step, NumPy), ``torch_backend`` (all seeds
batched on PyTorch), ``protocol`` (the interface both models implement), ``seed`` (one seed's loop and divergence
checks), ``plan`` (a call's arguments checked, its cost estimated and limited, its measurement steps),
``executors`` (sequential, forked pool, torch), ``run`` (``simulate``: plan → executor → table/CSV).
"""
from ..measure import column_names, order_parameters
from .init import dense, draw_initial
from .run import SimulationResult, run_seed, simulate
from .sgd import Model

__all__ = ["simulate", "SimulationResult", "draw_initial", "dense", "Model", "order_parameters",
           "column_names", "run_seed"]
