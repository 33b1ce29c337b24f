"""Residual attention networks (docs/theory.md §10, ``symattn.architecture``): the matrix-level all-time limit at
size N, extrapolated in 1/N with ``<col>_err``, without SGD-noise terms (the ε → 0 limit)."""
from __future__ import annotations

from .method import Method
from .options import Option
from .table import TheoryTable


def run(spec, o) -> TheoryTable:
    from ..architecture import commands
    table = commands.theory(spec, o["time"], o["points"], size=o["size"], seed=o["seed"], rotations=o["rotations"])
    return TheoryTable(table, "residual", o, getattr(spec, "name", ""), result=table)


METHOD = Method("residual", "a residual network's matrix-level flow", run=run, flag="a residual network",
                options={"size": Option(200, "the matrix size N (with N/2 for the extrapolation)", "whole", low=8),
                         "rotations": Option(1, "independent draws averaged", "whole", low=1),
                         "noise": Option(False, "always False: the residual flow has no SGD-noise terms", "choice",
                                         choices=(False,))})
