"""The options of a theory method, declared once: default, meaning, valid range, command-line flag.

A method lists its options (``Option``); ``theory`` fills the defaults, checks the values and refuses an option the
method does not take with one line naming it — the same check for every method and every caller.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..limits import LIMITS


@dataclass(frozen=True)
class Option:
    """One option: ``default`` (a value, or a function of the other options' values), ``help``, the valid values
    (``kind``: "whole" ≥ ``low``, "positive" number, "bool", "choice" of ``choices``, or "any"), and the flag that
    spells it on the command line (``--name`` with dashes unless given)."""

    default: Any
    help: str
    kind: str = "any"
    low: int = 0
    choices: tuple = ()
    flag: str | None = None

    def spelled(self, name: str, cli: bool) -> str:
        """How an error names the option: its flag on the command line, else its keyword."""
        return (self.flag or "--" + name.replace("_", "-")) if cli else name

    def check(self, name: str, value, cli: bool) -> Any:
        """The value, or UsageError naming the option."""
        if value is None:
            return value
        say = self.spelled(name, cli)
        if self.kind == "whole":
            if isinstance(value, bool) or not float(value).is_integer() or value < self.low:
                raise UsageError(f"{say} {value}: must be a whole number >= {self.low}")
            if name in LIMITS and value > LIMITS[name]:
                raise UsageError(f"{say} {value}: at most {LIMITS[name]:g} (docs/interface.md, Limits)")
            return int(value)
        if self.kind == "positive":
            if not (math.isfinite(value) and value > 0):
                raise UsageError(f"{say} {value}: must be a finite number > 0")
            if name in LIMITS and value > LIMITS[name]:
                raise UsageError(f"{say} {value:g}: at most {LIMITS[name]:g} (docs/interface.md, Limits)")
            return float(value)
        if self.kind == "choice" and value not in self.choices:
            raise UsageError(f"{say} {value!r}: must be one of {', '.join(map(str, self.choices))}")
        if self.kind == "bool" and not isinstance(value, bool):
            raise UsageError(f"{say} {value!r}: must be True or False")
        return value


# the options every method takes
COMMON = {
    "time": Option(1.0, "final package time nα/d", "positive"),
    "points": Option(51, "output times on [0, time]", "whole", low=2),
    "seed": Option(0, "seed of the realisation or of the sampled matrices", "whole"),
}
# the options of the methods that start from the spec's initial law or from a simulation seed's matrices
START = {
    "init": Option("free", "free: the free-probability initial law; sample: simulate's matrices at dim", "choice",
                   choices=("free", "sample")),
    "dim": Option(None, "d: of the sampled matrices (init='sample') and of ε = αd/B for a learning_rate spec",
                  "whole", low=1),
    "noise": Option(True, "the O(ε) SGD-noise terms (False: the paper's ε → 0 limit)", "bool"),
}


def resolve_defaults(options: dict, given: dict, spec) -> dict:
    """``given`` with every option's default filled in (a callable default sees the options resolved so far)."""
    out = {}
    for name, opt in options.items():
        if name in given and given[name] is not None:
            out[name] = given[name]
        elif callable(opt.default):
            out[name] = opt.default(out, spec)
        else:
            out[name] = opt.default
    return out

