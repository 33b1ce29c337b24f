"""The residual-attention specification: TOML file or dict -> validated :class:`ResidualSpec`
(docs/interface.md, "Residual attention"; docs/theory.md §10).

A network is a list of attention layers of the residual stream, each a list of heads with a
key–query matrix S (any parameterisation kind: tied, untied, direct, general, identity) and a
value matrix V (a kind too: ``general`` for a trained d×d matrix, ``identity`` for a frozen
scale·I), followed by readout heads (key–query matrices only) whose outputs are summed. Every
factor is an :class:`symattn.spec.Index`, validated by the same code as a one-layer spec; its role
is ``student`` when it is trained and ``teacher`` when it is frozen (the whole teacher network is).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

from ..errors import SpecError
from ..kinds import KINDS
from ..spec import (  # noqa: F401  (is_residual: part of this module's API)
    MAX_BATCH,
    MAX_BETA,
    MAX_SCALE,
    MAX_TOKENS,
    Index,
    check_activation,
    is_residual,
    parse_index,
    read_raw,
)
from ..validation import fail, number, table

_TOP_KEYS = {"name", "model", "student", "teacher", "training"}
_MODEL_KEYS = {"tokens", "activation", "beta", "label_noise"}
_NET_KEYS = {"layers", "readout"}
_LAYER_KEYS = {"heads"}
_HEAD_KEYS = {"key_query", "value"}
_FACTOR_KEYS = {"parameterization", "width", "init_scale", "scale", "trained"}
_TRAINING_KEYS = {"batch_size", "noise_ratio", "weight_decay"}
MAX_LAYERS = 3             # the stream has (1 + heads)^layers paths; the loss is unrolled symbolically
MAX_HEADS = 3


@dataclass(frozen=True)
class Head:
    """One attention head of a hidden layer: logits from ``key_query``, values through ``value``."""

    key_query: Index
    value: Index


@dataclass(frozen=True)
class Network:
    """Residual attention: ``layers`` (each a tuple of heads) then the summed ``readout`` heads."""

    layers: tuple
    readout: tuple

    @property
    def factors(self) -> tuple:
        """Every factor of the network as an Index, input layer first."""
        out = []
        for layer in self.layers:
            for h in layer:
                out += [h.key_query, h.value]
        return tuple(out) + tuple(self.readout)


@dataclass(frozen=True)
class ResidualSpec:
    """A validated residual-attention model (immutable, comparable, hashable)."""

    name: str
    tokens: int
    activation: str
    beta: float
    label_noise: float
    student: Network
    teacher: Network
    batch_size: int
    noise_ratio: float
    weight_decay: float
    source: str = field(default="<dict>", compare=False)
    raw: dict = field(default=None, repr=False, compare=False)

    @property
    def factors(self) -> dict:
        """name -> Index of every student and teacher factor."""
        return {ix.name: ix for ix in self.student.factors + self.teacher.factors}

    @property
    def trained(self) -> list:
        return [n for n, ix in self.factors.items() if ix.trainable]

    def step_size(self, dim: int) -> float:
        """SGD step α = ε B/d (docs/theory.md §3)."""
        return self.noise_ratio * self.batch_size / dim


def _factor(src, key, raw, name, frozen, seen, default_par):
    raw = table(src, key, raw if raw is not None else {"parameterization": default_par}, _FACTOR_KEYS)
    raw = dict(raw)
    kind = KINDS.get(raw.get("parameterization", default_par))
    trained = raw.pop("trained", not frozen and (kind is None or kind.trainable))
    if not isinstance(trained, bool):
        fail(src, f"{key}.trained", f"expected true or false, got {trained!r}")
    if frozen and trained:
        fail(src, f"{key}.trained", "a teacher factor is frozen")
    raw.update(name=name, role="student" if trained else "teacher")
    raw.setdefault("parameterization", default_par)
    ix = parse_index(src, 0, raw, seen, key=key, keys=_FACTOR_KEYS | {"name", "role"})
    seen.add(ix.name)
    return ix


def _array(src, key, value, limit, empty=False):
    """A TOML array of tables of at most ``limit`` entries (non-empty unless ``empty``)."""
    if not isinstance(value, list) or (not value and not empty):
        fail(src, key, f"expected a {'' if empty else 'non-empty '}array of tables [[{key}]]")
    if len(value) > limit:
        fail(src, key, f"at most {limit} entries are supported, got {len(value)}")
    return value


def _network(src, key, raw, prefix, frozen, seen):
    raw = table(src, key, raw, _NET_KEYS)
    layers = []
    for m, lr in enumerate(_array(src, f"{key}.layers", raw.get("layers", []), MAX_LAYERS, empty=True)):
        lk = f"{key}.layers[{m}]"
        heads_raw = _array(src, f"{lk}.heads", table(src, lk, lr, _LAYER_KEYS).get("heads"), MAX_HEADS)
        heads = []
        for h, hr in enumerate(heads_raw):
            hk = f"{lk}.heads[{h}]"
            hr = table(src, hk, hr, _HEAD_KEYS)
            tag = f"{m + 1}" + (chr(ord("a") + h) if len(heads_raw) > 1 else "")
            for part in ("key_query", "value"):
                if part not in hr:
                    fail(src, f"{hk}.{part}", "required (a table with parameterization, init_scale, …)")
            kq = _factor(src, f"{hk}.key_query", hr["key_query"], f"{prefix}S{tag}", frozen, seen, "tied")
            v = _factor(src, f"{hk}.value", hr["value"], f"{prefix}V{tag}", frozen, seen, "general")
            heads.append(Head(kq, v))
        layers.append(tuple(heads))
    ro = _array(src, f"{key}.readout", raw.get("readout"), MAX_HEADS)
    readout = [_factor(src, f"{key}.readout[{h}]", rr, f"{prefix}R" + (chr(ord("a") + h) if len(ro) > 1 else ""),
                       frozen, seen, "tied") for h, rr in enumerate(ro)]
    return Network(tuple(layers), tuple(readout))


def load_residual(source) -> ResidualSpec:
    """Read and validate a residual-attention spec from a TOML path, a shipped example's name or a dict."""
    if isinstance(source, ResidualSpec):
        return source
    raw, src = read_raw(source)
    raw = table(src, "", raw, _TOP_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name or ""):
        fail(src, "name", f"expected a file-name-safe string ([A-Za-z0-9_-]+), got {name!r}")
    model = table(src, "model", raw.get("model", {}), _MODEL_KEYS)
    L = number(src, "model.tokens", model.get("tokens", 2), low=1, integer=True)
    if L > MAX_TOKENS:
        fail(src, "model.tokens", f"at most {MAX_TOKENS} tokens, got {L}")
    activation = check_activation(src, model.get("activation", "softmax"))
    beta = number(src, "model.beta", model.get("beta", 1.0))
    if abs(beta) > MAX_BETA:
        fail(src, "model.beta", f"|β| must be <= {MAX_BETA:g}, got {beta:g}")
    if activation == "softmax" and L < 2:
        fail(src, "model.tokens", "softmax over a single token is constant; use tokens >= 2")
    noise = number(src, "model.label_noise", model.get("label_noise", 0.0), low=0.0, high=MAX_SCALE)
    seen = set()
    for part in ("student", "teacher"):
        if part not in raw:
            fail(src, part, "required: a table with [[" + part + ".layers]] and [[" + part + ".readout]]")
    student = _network(src, "student", raw["student"], "", False, seen)
    teacher = _network(src, "teacher", raw["teacher"], "T", True, seen)
    if not any(ix.trainable for ix in student.factors):
        fail(src, "student", "no factor is trained")
    training = table(src, "training", raw.get("training", {}), _TRAINING_KEYS)
    B = number(src, "training.batch_size", training.get("batch_size", 1), low=1, integer=True, high=MAX_BATCH)
    eps = number(src, "training.noise_ratio", training.get("noise_ratio", 0.01), low=0.0, strict=True,
                  high=MAX_SCALE)
    gamma = number(src, "training.weight_decay", training.get("weight_decay", 0.0), low=0.0, high=MAX_SCALE)
    return ResidualSpec(name=name, tokens=L, activation=activation, beta=beta, label_noise=noise,
                        student=student, teacher=teacher, batch_size=B, noise_ratio=eps, weight_decay=gamma,
                        source=src, raw=copy.deepcopy(raw))


__all__ = ["Head", "Network", "ResidualSpec", "load_residual", "is_residual", "SpecError"]
