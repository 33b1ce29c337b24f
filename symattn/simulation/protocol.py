"""The interface every SGD model implements (the NumPy ``sgd.Model``, one seed; the PyTorch
``torch_backend.TorchModel``, every seed in a leading axis): what the executors and the measurements call."""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class SGDModel(Protocol):
    """Online SGD on the trained matrices of a spec at dimension ``d`` with step ``alpha`` (docs/theory.md §3)."""

    d: int
    alpha: float

    def set_state(self, state) -> None:
        """Load the initial matrices (``simulation.init.draw_initial``; torch: one list per seed)."""

    def get_state(self) -> list:
        """The matrices as NumPy arrays."""

    def sample(self, rng, B=None):
        """A fresh batch (X, label noise ξ) from the generator ``rng``."""

    def forward(self, X):
        """The preactivations G_ijk of the batch."""

    def per_sample_loss(self, X, xi=None):
        """The loss of each sample."""

    def step(self, X, xi=None):
        """One SGD step on the batch; returns its loss (torch: one per seed)."""

    def norm_bound(self):
        """A cheap bound on the matrices' size (the divergence check; torch: one per seed)."""


METHODS = ("set_state", "get_state", "sample", "forward", "per_sample_loss", "step", "norm_bound")
