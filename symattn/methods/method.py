"""``Method``: a theory method as data (its options, where it applies, how it runs); ``Plan``: one run of it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import UsageError
from .options import COMMON, resolve_defaults


def _always(spec):
    return None


def _nothing(options, given, say):
    return None


@dataclass(frozen=True)
class Method:
    """A theory method: ``name``, a one-line ``summary``, its ``options`` beyond ``options.COMMON`` (name →
    ``Option``, in the order their defaults are resolved), ``run(spec, options) -> TheoryTable``; ``applies(spec)``:
    None, or why the method does not apply to the spec; ``check(options, given, say)``: a refusal that involves
    several options (``say(name)`` spells an option as the caller does); ``flag``: how the command line asks for
    it."""

    name: str
    summary: str
    options: dict
    run: Callable
    flag: str
    applies: Callable = _always
    check: Callable = _nothing

    @property
    def all_options(self) -> dict:
        return {**COMMON, **self.options}


@dataclass
class Plan:
    """One run of a method on a spec: every option with its default filled in (``options``), and those the caller
    gave (``given``). ``run()`` returns the ``TheoryTable``."""

    spec: object
    method: Method
    options: dict
    given: dict = field(default_factory=dict)

    def run(self):
        table = self.method.run(self.spec, self.options)
        table.method, table.options = self.method.name, dict(self.options)
        return table


def make_plan(spec, method: Method, given: dict, cli: bool = False, auto: bool = False) -> Plan:
    """Check ``given`` against ``method``'s declared options (an option it does not take is refused, naming it),
    then fill in the defaults. ``auto``: the method was chosen by ``auto`` (the refusal says so)."""
    opts = method.all_options

    def say(name):
        o = opts.get(name)
        return o.spelled(name, cli) if o is not None else (("--" + name.replace("_", "-")) if cli else name)

    given = {k: v for k, v in given.items() if v is not None}
    which = method.flag if cli else f"method {method.name!r}"
    chosen = f", what {'--method' if cli else 'method'} auto runs for this spec" if auto else ""
    for name in given:
        if name not in opts:
            raise UsageError(f"{say(name)}: not with {which} ({method.summary}{chosen}; its options: "
                             f"{', '.join(say(o) for o in opts)})")
    why = method.applies(spec)
    if why:
        raise UsageError(f"{which}: {why}")
    checked = {k: opts[k].check(k, v, cli) for k, v in given.items()}
    method.check(checked, given, say)
    return Plan(spec, method, resolve_defaults(opts, checked, spec), checked)
