"""The largest value each numeric option takes (docs/interface.md, Limits): beyond it a run would take days or
exhaust memory without saying so, so it is refused up front, naming the option. One table for the command line
and the Python API (``methods.options``)."""
from __future__ import annotations

LIMITS = {"time": 1e4, "points": 100_000, "seeds": 10_000, "realisations": 1024, "rotations": 1024, "size": 16_384,
          "jobs": 4096, "workers": 4096, "seed": 2**32 - 1, "seed0": 2**32 - 1, "dim": 1_000_000, "tol": 1e-1}
MIN_TOL = 1e-14            # below double-precision round-off a quadrature tolerance cannot be met


def limit_of(option: str):
    """The limit of an option spelled as a flag (``--seed0``) or a keyword (``seed0``), None if it has none."""
    return LIMITS.get(option.lstrip("-").replace("-", "_"))
