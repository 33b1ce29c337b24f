"""symattn: exact high-dimensional learning dynamics of attention-indexed models.

Pipeline (folders follow it): spec -> symbolic (Gaussian expectations, word algebra, free
probability) -> kinds (one class per parameterisation) -> initial -> derivation (potential,
hierarchies, their equations) -> codegen -> integration (the hierarchy) / spectral (the matrix-level
flow) -> methods (``theory``: one entry to every limit theory); simulation beside them; architecture
(residual networks); comparison, sweep and cli on top.

The public entry points are plain functions with real signatures, documented in
docs/interface.md; they pickle (process pools, cluster executors). They are imported lazily, on
first use, so ``import symattn`` does not import SymPy, Numba or matplotlib.
"""
from __future__ import annotations

import importlib

from .version import __version__

# public name -> (module, attribute)
_PUBLIC = {
    "load_spec": ("symattn.spec", "load_spec"),
    "Spec": ("symattn.spec", "Spec"),
    "potential": ("symattn.derivation.potential", "potential"),
    "derive": ("symattn.derivation", "derive"),
    "matrix_flow": ("symattn.derivation.matrix_flow", "matrix_flow"),
    "recovery": ("symattn.derivation.recovery", "recovery"),
    "integrate": ("symattn.integration", "integrate"),
    "theory": ("symattn.methods", "theory"),
    "phase": ("symattn.phase_diagram", "phase"),
    "TheoryTable": ("symattn.methods", "TheoryTable"),
    "column_equations": ("symattn.derivation.equations", "column_equations"),
    "load_residual": ("symattn.architecture", "load_residual"),
    "solve_residual": ("symattn.architecture.flow", "solve_residual"),
    "simulate_residual": ("symattn.architecture.sgd", "simulate_residual"),
    "simulate": ("symattn.simulation.run", "simulate"),
    "compare": ("symattn.comparison", "compare"),
    "compare_dims": ("symattn.comparison", "compare_dims"),
    "sweep": ("symattn.sweeps", "sweep"),
    "collect": ("symattn.sweeps", "collect"),
    "SymattnError": ("symattn.errors", "SymattnError"),
    "SpecError": ("symattn.errors", "SpecError"),
    "UsageError": ("symattn.errors", "UsageError"),
    "NumericalFailure": ("symattn.errors", "NumericalFailure"),
}
__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name):
    if name in _PUBLIC:
        module, attr = _PUBLIC[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'symattn' has no attribute {name!r}")


def __dir__():
    return __all__
