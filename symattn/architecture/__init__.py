"""Attention-only residual transformers with value matrices (paper App. B.1; docs/theory.md §10).

spec (``load_residual``) → unroll (word indices, the unrolled loss) → limit (Φ and ∇Φ in the
Gaussian limit, by the Gaussian engine's covariance) → flow (the matrix-level all-time limit on the
factors); network (factors and the residual recursion at finite d) → sgd (online SGD on it, torch).
"""
from .limit import GaussianLimit
from .spec import ResidualSpec, is_residual, load_residual
from .unroll import Unrolled, unroll

__all__ = ["GaussianLimit", "ResidualSpec", "Unrolled", "is_residual", "load_residual", "unroll"]
