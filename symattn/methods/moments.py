"""The moment hierarchy (docs/theory.md §4, §5): exact at M = 2 where the student's flow closes (direct, general),
else truncated at word length M and valid while it and the companion truncation agree (``valid_until``)."""
from __future__ import annotations

from ..errors import UsageError
from .method import Method
from .options import START, Option
from .table import TheoryTable


def _truncation(options, spec):
    return spec.truncation


def check_start(o, given, say) -> None:
    """The start's options together: a sampled start needs its dimension."""
    if o.get("init") == "sample" and o.get("dim") is None:
        raise UsageError(f"{say('init')} sample: needs {say('dim')} D (the dimension of the sampled matrices)")


def _check(o, given, say):
    from ..spec import MAX_TRUNCATION
    check_start(o, given, say)
    M = o.get("truncation")
    if M is not None and not 2 <= M <= MAX_TRUNCATION:
        raise UsageError(f"{say('truncation')} {M}: must be a whole number in [2, {MAX_TRUNCATION}]")


def run(spec, o) -> TheoryTable:
    from ..codegen.warm import runnable
    from ..integration import integrate
    eps = spec.epsilon(o["dim"]) if o["noise"] else 0.0
    system = runnable(spec, o["truncation"])
    r = integrate(system, time=o["time"], points=o["points"], init=o["init"], dim=o["dim"], seed=o["seed"],
                  epsilon=eps, log_time=o["log_time"], check_truncation=o["check_truncation"])
    return TheoryTable(r.table, "moments", o, spec.name, valid_until=r.valid_until, diverged_at=r.diverged_at,
                       info=r.summary(), result=r)


METHOD = Method(
    "moments", "the moment hierarchy at word length M", run=run, flag="--method moments", check=_check,
    options={**START,
             "truncation": Option(_truncation, "word length M (default: the spec's theory.truncation)", "whole",
                                  low=2),
             "log_time": Option(False, "0 and points − 1 log-spaced times from time/1000 to time", "bool"),
             "check_truncation": Option(True, "integrate the companion truncation too: its window valid_until",
                                        "bool")})
