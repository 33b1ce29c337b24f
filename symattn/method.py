"""Which limit theory ``theory`` and ``compare`` use (``--method auto``, the default).

* ``moments``: the moment hierarchy. For students whose flow closes (direct, general: word length
  is preserved, docs/theory.md §4) it is exact at M = 2 for all times; otherwise it is truncated at
  M and valid only while the M/M−2 gap stays below tolerance (``valid_until``).
* ``spectral``: the matrix-level limit flow at size N (docs/theory.md §5, §6), valid at all times up
  to its O(1/N) error; with ``auto`` it runs at N and N/2 and reports the 1/N extrapolation with
  ``<col>_err`` columns.

``auto`` picks the closed hierarchy where it is exact, the matrix level everywhere else (it is as
accurate as the hierarchy inside the truncation window and valid beyond it); an explicit
``truncation`` asks for the hierarchy.
"""
from __future__ import annotations

METHODS = ("auto", "moments", "spectral")
DEFAULT_SIZE = 256       # N of the auto matrix-level run (with N/2 = 128 for the extrapolation)


def resolve(spec, method: str = "auto", truncation=None) -> str:
    """'moments' or 'spectral' for a requested ``method`` (module docstring)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: must be one of {', '.join(METHODS)}")
    if method != "auto":
        return method
    if truncation is not None or all(spec.indices[k].kind.closes for k in spec.students):
        return "moments"
    return "spectral"
