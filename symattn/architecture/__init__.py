"""Attention-only residual transformers with value matrices (paper App. B.1; docs/theory.md §10).

spec (``load_residual``) → unroll (word indices, the unrolled loss) → limit (Φ and ∇Φ in the
Gaussian limit, by the Gaussian engine's covariance) → flow (the matrix-level all-time limit on the
factors); network (factors and the residual recursion at finite d) → sgd (online SGD on it, torch);
commands (what ``potential``, ``theory``, ``simulate`` and ``compare`` run on a residual spec).
``GaussianLimit`` is imported on first use: the CLI asks ``is_residual`` of every spec, and that must
not import SciPy's QMC (≈ 1 s).
"""
from .spec import ResidualSpec, is_residual, load_residual
from .unroll import Unrolled, unroll

__all__ = ["GaussianLimit", "ResidualSpec", "Unrolled", "is_residual", "load_residual", "unroll"]


def __getattr__(name):
    if name == "GaussianLimit":
        from .limit import GaussianLimit
        return GaussianLimit
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
