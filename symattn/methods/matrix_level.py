"""The matrix-level limit (docs/theory.md §5–§7, ``symattn.spectral``): the d → ∞ flow of the trained matrices at
size N, valid at all times up to its O(1/N) error. By default the mean over ``DEFAULT_ROTATIONS`` independent
realisations of the initial laws at N = ``DEFAULT_SIZE``, with ``<col>_err`` from their spread and from the same
at N/2."""
from __future__ import annotations

from ..errors import UsageError
from .method import Method
from .moments import check_start
from .options import START, Option
from .table import TheoryTable

DEFAULT_SIZE = 128       # N of the default matrix-level run (and N/2 = 64 for the error estimate)
DEFAULT_ROTATIONS = 4    # independent realisations of the initial laws averaged (free start)
QUICK_SIZE = 96          # N of ``quick`` (64 is cheaper by only 25 % and its N/2 = 32 run no longer estimates the
                         # systematic error: README example outside <col>_err at 21 % of the points)
# Measured against the mean of 4 realisations at N = 1024 (README example, τ ≤ 0.25, benchmarks/theory_accuracy.py,
# three base seeds): N = 128 × 4 is within 2.4e-3–3.2e-3, inside <col>_err everywhere; the former default, one
# realisation at N = 256 and 128 extrapolated in 1/N, was up to 2.3e-2 off, outside its <col>_err at 24–64 % of the
# points (the extrapolation doubles the random O(1/N) error of the rotations instead of removing it).


def _size(o, spec):
    return o["dim"] if o["init"] == "sample" else (QUICK_SIZE if o["quick"] else DEFAULT_SIZE)


def _rotations(o, spec):
    return 1 if o["init"] == "sample" else DEFAULT_ROTATIONS


def _check(o, given, say):
    check_start(o, given, say)
    if o.get("quick") and o.get("size") is not None:
        raise UsageError(f"{say('quick')}: sets the size (N = {QUICK_SIZE}); give {say('quick')} or {say('size')}, "
                         f"not both")
    if o.get("size") is not None and o.get("init") == "sample":
        raise UsageError(f"{say('size')}: not used with {say('init')} sample (the matrices are simulate's, N = "
                         f"{say('dim')})")


def run(spec, o) -> TheoryTable:
    from ..spectral import solve_spectral
    eps = spec.epsilon(o["dim"]) if o["noise"] else 0.0
    paths = o["realisations"]
    r = solve_spectral(spec, time=o["time"], points=o["points"], size=o["size"], seed=o["seed"], spectra=o["spectra"],
                       error_estimate=o["error_estimate"], epsilon=eps or None, noise_realisations=paths,
                       noise_antithetic=eps > 0 and paths % 2 == 0, rotations=o["rotations"], init=o["init"])
    return TheoryTable(r.table, "spectral", o, spec.name, info=r.info, spectra=r.spectra or None, result=r)


METHOD = Method(
    "spectral", "the matrix-level flow at size N", run=run, flag="--method spectral", check=_check,
    options={**START,
             "quick": Option(False, f"interactive use: N = {QUICK_SIZE}", "bool"),
             "size": Option(_size, f"the matrix size N (default {DEFAULT_SIZE}; with init='sample' the dimension)",
                            "whole", low=4),
             "rotations": Option(_rotations, f"independent realisations of the initial laws averaged (default "
                                             f"{DEFAULT_ROTATIONS}, 1 with init='sample')", "whole", low=1),
             "realisations": Option(1, "noise paths per realisation (an even number: antithetic pairs)", "whole",
                                    low=1),
             "error_estimate": Option(True, "the N/2 run that fills the <col>_err columns", "bool",
                                      flag="--no-error-estimate"),
             "spectra": Option(False, "record the students' eigenvalues at the output times", "bool")})
