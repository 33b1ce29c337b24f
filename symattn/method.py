"""Which limit theory ``theory`` and ``compare`` use (``--method auto``, the default).

* ``moments``: the moment hierarchy. For students whose flow closes (direct, general: word length
  is preserved, docs/theory.md §4) it is exact at M = 2 for all times; otherwise it is truncated at
  M and valid only while the M/M−2 gap stays below tolerance (``valid_until``).
* ``spectral``: the matrix-level limit flow at size N (docs/theory.md §5, §6), valid at all times up
  to its O(1/N) error; by default the mean over ``DEFAULT_ROTATIONS`` independent realisations of the
  initial laws at N = ``DEFAULT_SIZE``, with ``<col>_err`` from their spread and from the same at N/2
  (``spectral.solve_spectral``; ``QUICK_SIZE`` for ``theory --quick``).

``auto`` picks the closed hierarchy where it is exact, the matrix level everywhere else (it is as
accurate as the hierarchy inside the truncation window and valid beyond it); an explicit
``truncation`` asks for the hierarchy.
"""
from __future__ import annotations

METHODS = ("auto", "moments", "spectral")
DEFAULT_SIZE = 128       # N of the default matrix-level run (and N/2 = 64 for the error estimate)
DEFAULT_ROTATIONS = 4    # independent realisations of the initial laws averaged (free start)
QUICK_SIZE = 96          # N of ``theory --quick`` (64 is cheaper by only 25 % and its N/2 = 32 run no longer
                         # estimates the systematic error: README example outside <col>_err at 21 % of the points)
# Measured against the mean of 4 realisations at N = 1024 (README example, τ ≤ 0.25, benchmarks/theory_accuracy.py,
# three base seeds): N = 128 × 4 is within 2.4e-3–3.2e-3, inside <col>_err everywhere; the former default, one
# realisation at N = 256 and 128 extrapolated in 1/N, was up to 2.3e-2 off, outside its <col>_err at 24–64 % of the
# points (the extrapolation doubles the random O(1/N) error of the rotations instead of removing it).


def resolve(spec, method: str = "auto", truncation=None) -> str:
    """'moments' or 'spectral' for a requested ``method`` (module docstring)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: must be one of {', '.join(METHODS)}")
    if not spec.features.identity and method == "auto" and truncation is None:
        return "spectral"                  # with Σ no hierarchy closes (docs/theory.md §1)
    if method != "auto":
        return method
    if truncation is not None or all(spec.indices[k].kind.closes for k in spec.students):
        return "moments"
    return "spectral"
