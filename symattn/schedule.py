"""Training schedules: a factor s(t) ≥ 0 on the SGD step (and so on ε), optionally on the weight decay γ
(docs/theory.md §3, "Schedules").

The time axis stays the nominal one, t = n·α₀/d with α₀ = ε₀B/d the spec's step (the number of samples
seen is t·d²/ε₀), and step n of SGD uses α_n = α₀ s(t_n) (and γ_n = γ₀ s(t_n) when the schedule also
applies to γ). Per unit of t the drift of every limit equation is then multiplied by s(t), the weight
decay inside it is γ₀ s(t) (or γ₀), and the O(ε) SGD-noise terms, whose covariance per step is ∝ α_n²,
carry ε(t) = ε₀ s(t) inside the drift's factor: per unit of t, ε₀ s(t)² ν. At ε → 0 a schedule is a
change of clock, θ_s(t) = θ_1(∫₀ᵗ s) — the check ``tests/test_schedule.py`` uses.

Kinds (``training.schedule`` in the spec; times in units of t):

* ``{kind = "constant"}``: s = 1 (the default);
* ``{kind = "cosine", horizon = T, floor = f}``: s = f + (1 − f)(1 + cos(π min(t, T)/T))/2;
* ``{kind = "step", milestones = [t₁, t₂, …], factor = r}``: s = r^(number of milestones ≤ t);
* ``{kind = "linear_warmup", warmup = t_w, start = s₀}``: s = s₀ + (1 − s₀) min(1, t/t_w);

each also takes ``weight_decay = true`` (γ scheduled too; default false).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import SpecError

KINDS = {"constant": {}, "cosine": {"horizon": None, "floor": 0.0},
         "step": {"milestones": None, "factor": 0.5}, "linear_warmup": {"warmup": None, "start": 0.0}}
COMMON = {"kind", "weight_decay"}
MAX_TIME = 1e6


@dataclass(frozen=True)
class Schedule:
    """s(t) of one ``training.schedule`` table (module docstring)."""

    kind: str = "constant"
    params: tuple = field(default=())          # sorted (name, value) pairs
    weight_decay: bool = False

    @property
    def constant(self) -> bool:
        return self.kind == "constant"

    def _p(self, name):
        return dict(self.params)[name]

    def __call__(self, t):
        """s(t), elementwise for an array."""
        t = np.asarray(t, dtype=float)
        if self.kind == "constant":
            out = np.ones_like(t)
        elif self.kind == "cosine":
            T, f = self._p("horizon"), self._p("floor")
            out = f + (1.0 - f) * 0.5 * (1.0 + np.cos(np.pi * np.minimum(t, T) / T))
        elif self.kind == "step":
            ms, r = np.asarray(self._p("milestones"), dtype=float), self._p("factor")
            out = r ** np.searchsorted(ms, t, side="right").astype(float)
        else:
            tw, s0 = self._p("warmup"), self._p("start")
            out = s0 + (1.0 - s0) * np.minimum(1.0, t / tw)
        return out if out.ndim else float(out)

    def gamma_factor(self, t):
        """The factor on γ at t: s(t) when the schedule applies to the weight decay, else 1."""
        return self(t) if self.weight_decay else (np.ones_like(np.asarray(t, dtype=float)) if np.ndim(t) else 1.0)

    def mean_square(self, a: float, b: float) -> float:
        """(1/(b − a)) ∫_a^b s² (Simpson on 8 panels; the noise of an interval [a, b] is ε₀ times this)."""
        if b <= a:
            return float(self(a)) ** 2
        x = np.linspace(a, b, 17)
        w = np.ones(17)
        w[1:-1:2], w[2:-1:2] = 4.0, 2.0
        return float(w @ self(x) ** 2) / 48.0

    def clock(self, t):
        """∫₀ᵗ s (the ε → 0 equivalence: a schedule is this change of time), by the trapezoidal rule on a
        fine grid (exact for piecewise-linear s)."""
        t = float(t)
        if t <= 0:
            return 0.0
        x = np.linspace(0.0, t, 4001)
        trapezoid = getattr(np, "trapezoid", None) or np.trapz      # NumPy < 2 has only trapz
        return float(trapezoid(self(x), x))

    def describe(self) -> str:
        if self.constant:
            return "constant"
        args = ", ".join(f"{k} = {v}" for k, v in self.params)
        return f"{self.kind} ({args}{', on γ too' if self.weight_decay else ''})"

    def as_dict(self) -> dict:
        out = {"kind": self.kind, **{k: (list(v) if isinstance(v, tuple) else v) for k, v in self.params}}
        if self.weight_decay:
            out["weight_decay"] = True
        return out


def parse_schedule(src: str, raw) -> Schedule:
    """The Schedule of ``training.schedule`` (a table, or a kind name for the parameter-free constant);
    SpecError naming the key for anything else."""
    key = "training.schedule"
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, dict):
        raise SpecError(f"{src}: {key}: expected a table such as {{kind = \"cosine\", horizon = 1.0}}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise SpecError(f"{src}: {key}.kind: {kind!r}; allowed: {', '.join(KINDS)}")
    allowed = COMMON | set(KINDS[kind])
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise SpecError(f"{src}: {key}.{unknown[0]}: unknown key for kind {kind!r}; allowed: "
                        f"{', '.join(sorted(allowed))}")
    wd = raw.get("weight_decay", False)
    if not isinstance(wd, bool):
        raise SpecError(f"{src}: {key}.weight_decay: expected true or false, got {wd!r}")
    params = {}
    for name, default in KINDS[kind].items():
        if name not in raw:
            if default is None:
                raise SpecError(f"{src}: {key}.{name}: required for kind {kind!r}")
            params[name] = default
            continue
        v = raw[name]
        if name == "milestones":
            if not isinstance(v, list) or not v or not all(_number(x) for x in v):
                raise SpecError(f"{src}: {key}.milestones: expected a non-empty list of times, got {v!r}")
            v = tuple(float(x) for x in v)
            if any(x <= 0 or x > MAX_TIME for x in v) or list(v) != sorted(set(v)):
                raise SpecError(f"{src}: {key}.milestones: times must be increasing, in (0, {MAX_TIME:g}]")
        else:
            if not _number(v):
                raise SpecError(f"{src}: {key}.{name}: expected a number, got {v!r}")
            v = float(v)
            if name in ("horizon", "warmup") and not (0 < v <= MAX_TIME):
                raise SpecError(f"{src}: {key}.{name}: must be in (0, {MAX_TIME:g}], got {v:g}")
            if name in ("floor", "start") and not (0 <= v <= 1):
                raise SpecError(f"{src}: {key}.{name}: must be in [0, 1], got {v:g}")
            if name == "factor" and not (0 <= v <= 10):
                raise SpecError(f"{src}: {key}.factor: must be in [0, 10] (0 stops the training), got {v:g}")
        params[name] = v
    return Schedule(kind, tuple(sorted(params.items())), wd)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


CONSTANT = Schedule()
