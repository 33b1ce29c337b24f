"""The package's exceptions, one base class (the command line maps them to exit statuses).

- :class:`SpecError` (exit 2): an invalid model specification, file or dict; one line naming
  the file, the key and what is allowed.
- :class:`UsageError` (exit 2): an invalid command-line option or an impossible request (a size
  beyond this machine's memory, an unwritable output path), one line naming the option.
- :class:`NumericalFailure` (exit 3): a diverging integration or simulation (NaN, inf,
  exploding norm), with the time where it happened; :class:`ExpectationUndefined`, a Gaussian
  expectation of the loss that does not exist at the order parameters reached.
"""
from __future__ import annotations

__all__ = ["SymattnError", "SpecError", "UsageError", "NumericalFailure", "ExpectationUndefined"]


class SymattnError(Exception):
    """Base class of every error this package raises on purpose."""


class SpecError(SymattnError, ValueError):
    """An invalid model specification (one line: file, key, what is allowed)."""


class UsageError(SymattnError, ValueError):
    """An invalid option or an impossible request (one line naming the option)."""


class NumericalFailure(SymattnError, RuntimeError):
    """A diverging integration or simulation (NaN, inf, exploding norm), with the time where it happened."""

    def __init__(self, message: str, time: float | None = None):
        super().__init__(message)
        self.time = time


class ExpectationUndefined(NumericalFailure):
    """A Gaussian expectation of the loss that does not exist at the current order parameters (an integrand
    growing as fast as the Gaussian decays, ``symbolic.growth``): never a trial-step artefact to retry."""
