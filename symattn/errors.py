"""Errors the command line reports in one line (INTERFACE.md): bad input (exit 2), numerical failure (exit 3)."""
from .spec import SpecError

__all__ = ["SpecError", "NumericalFailure"]


class NumericalFailure(RuntimeError):
    """A diverging integration or simulation (NaN, inf, exploding norm), with the time where it happened."""

    def __init__(self, message: str, time: float | None = None):
        super().__init__(message)
        self.time = time
