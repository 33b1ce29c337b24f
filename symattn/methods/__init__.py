"""The limit theory in one call: ``theory(spec, method="auto", **options) -> TheoryTable`` (docs/interface.md).

Every caller — the ``theory`` command, ``compare``, ``sweep``, the notebooks and benchmarks — runs the theory
through here, so a method and its defaults are decided in one place. The methods (``METHODS``), one file each:

* ``moments`` — the moment hierarchy at word length M (``moments.py``);
* ``spectral`` — the matrix-level flow at size N, all times (``matrix_level.py``);
* ``finite_d`` — the exact expected-gradient flow at finite d (``finite_d.py``);
* ``fast_phase`` — untied students' fast phase of the means (``fast_phase.py``);
* ``residual`` — a residual network's matrix-level flow (``residual.py``).

``auto`` (the default, :func:`resolve`) picks the closed hierarchy where it is exact (every student's flow closes:
direct, general, at identity feature covariance), the hierarchy where a truncation or log-spaced times are asked
for, the residual flow for a residual network, and the matrix-level flow everywhere else — as accurate as the
hierarchy inside its truncation window and valid beyond it.

A new method is a file here that defines ``METHOD`` (``method.Method``: its options with their defaults, where it
applies, how it runs) and a line in ``METHODS``; an option a method does not declare is refused by name, for every
caller alike.
"""
from __future__ import annotations

from ..errors import UsageError
from . import fast_phase, finite_d, matrix_level, moments, residual
from .matrix_level import DEFAULT_ROTATIONS, DEFAULT_SIZE, QUICK_SIZE
from .method import Method, Plan, make_plan
from .options import COMMON, Option
from .table import TheoryTable

METHODS: dict = {m.name: m for m in (moments.METHOD, matrix_level.METHOD, finite_d.METHOD, fast_phase.METHOD,
                                     residual.METHOD)}
CHOICES = ("auto", *METHODS)


def resolve(spec, method: str = "auto", truncation=None, log_time: bool = False) -> str:
    """The method ``auto`` (or a named ``method``) runs on ``spec`` (module docstring)."""
    if method not in CHOICES:
        raise UsageError(f"method {method!r}: must be one of {', '.join(CHOICES)}")
    if method != "auto":
        return method
    from ..spec import is_residual
    if is_residual(spec):
        return "residual"
    if truncation is not None or log_time:
        return "moments"
    if not spec.features.identity:
        return "spectral"                  # with Σ no hierarchy closes (docs/theory.md §1)
    if all(spec.indices[k].kind.closes for k in spec.students):
        return "moments"
    return "spectral"


def plan(spec, method: str = "auto", cli: bool = False, **options) -> Plan:
    """The run ``theory`` would make: the method ``auto`` resolves to, every option with its default (``cli``: errors
    name the command-line flags). Raises UsageError naming an option the method does not take or an invalid value."""
    from ..spec import is_residual
    if not is_residual(spec):
        from ..spec import load_spec
        spec = load_spec(spec)
    name = resolve(spec, method, options.get("truncation"), bool(options.get("log_time")))
    return make_plan(spec, METHODS[name], options, cli=cli, auto=method == "auto")


def theory(spec, method: str = "auto", **options) -> TheoryTable:
    """The limit theory of ``spec`` (a path, an example's name, a dict or a ``Spec``) by ``method`` (module
    docstring) with ``options``: ``time`` (1.0), ``points`` (51), ``seed`` (0), and each method's own —
    ``describe()`` lists them with their defaults."""
    return plan(spec, method, **options).run()


def describe(method: str | None = None) -> str:
    """The methods (or one) with their options and defaults, as text."""
    lines = []
    for m in ([METHODS[method]] if method else METHODS.values()):
        lines.append(f"{m.name}: {m.summary}")
        for k, o in m.all_options.items():
            d = "its help" if callable(o.default) else repr(o.default)
            lines.append(f"    {k} (default: {d}): {o.help}")
    return "\n".join(lines)


__all__ = ["theory", "plan", "resolve", "describe", "METHODS", "CHOICES", "Method", "Option", "Plan", "TheoryTable",
           "COMMON", "DEFAULT_SIZE", "DEFAULT_ROTATIONS", "QUICK_SIZE"]
