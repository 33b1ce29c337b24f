"""Model specification: TOML file or dict -> validated :class:`Spec` (docs/interface.md, "Model specification").

Every malformed input raises :class:`SpecError` with one line naming the file, the key and
what is allowed; the command line turns it into exit status 2.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import SpecError
from .features import IDENTITY, FeatureCovariance, parse_features
from .kinds import KINDS
from .schedule import CONSTANT, Schedule, parse_schedule
from .validation import fail, finite_at, not_real_on, number, short, table

ACTIVATIONS = ("linear", "h1", "h2", "h3", "softmax", "relu", "tanh")
PARAMETERIZATIONS = tuple(KINDS)          # the registered kinds (symattn.kinds)
ROLES = ("student", "teacher")
READOUTS = ("sum", "mean")

_TOP_KEYS = {"name", "model", "indices", "training", "theory"}
_MODEL_KEYS = {"tokens", "token_covariance", "activation", "beta", "readout", "label_noise", "loss",
               "feature_covariance"}
_INDEX_KEYS = {"name", "role", "parameterization", "width", "init_scale", "scale", "symbol"}
_TRAINING_KEYS = {"batch_size", "noise_ratio", "learning_rate", "weight_decay", "schedule"}
_THEORY_KEYS = {"truncation"}

# sizes beyond which the derivation or the simulation cannot run on one machine: refused up front
MAX_TOKENS = 16            # L: the loss has L²K Gaussian pre-activations, softmax Φ needs L-dim rules
MAX_INDICES = 8            # K: the hierarchy has ~K^M/(2M) words
MAX_BATCH = 2**24          # B: one batch is B·L·d numbers
MAX_BETA = 50.0            # |β|: exp(β G) overflows double precision for β·|G| > 709
MAX_TRUNCATION = 16        # M: words of length ≤ M
MAX_MOMENTS = 200_000      # estimated hierarchy size refused beyond this
MAX_WIDTH = 64.0           # κ = d_k/d
MAX_SCALE = 1e3            # σ, scale, label noise, ε, α, γ: beyond, every order parameter overflows


@dataclass(frozen=True)
class Index:
    """One d×d matrix S_k of the model (docs/theory.md §1)."""

    name: str
    role: str
    parameterization: str
    width: float = 1.0
    init_scale: tuple = (1.0,)
    scale: float = 1.0
    symbol: str | None = None       # its short symbol in equations (symbolic.names; default: its initial)

    @property
    def trainable(self) -> bool:
        return self.role == "student"

    @property
    def kind(self):
        """The parameterisation kind (symattn.kinds): the one place a name becomes a kind."""
        return KINDS[self.parameterization]

    @property
    def symmetric(self) -> bool:
        """S_k = S_k^T."""
        return self.kind.symmetric

    @property
    def centred(self) -> bool:
        """G is centred by C Tr S/√d (docs/theory.md §1)."""
        return self.kind.centred

    @property
    def sigma(self) -> float:
        return self.init_scale[0]

    @property
    def sigmas(self) -> tuple:
        """(σ_U, σ_V) of an untied index."""
        return self.init_scale if len(self.init_scale) == 2 else (self.init_scale[0],) * 2


@dataclass(frozen=True)
class Spec:
    """A validated model specification: immutable, comparable and hashable (``digest``: a stable
    SHA-256 of its validated content). ``covariance`` is a tuple of rows (``np.asarray`` gives the
    matrix); ``raw`` is a private deep copy of the input, never the caller's dict."""

    name: str
    tokens: int
    covariance: tuple
    activation: str
    beta: float
    readout: str
    label_noise: float
    loss: str | None
    indices: tuple
    batch_size: int
    noise_ratio: float | None
    learning_rate: float | None
    weight_decay: float
    truncation: int
    schedule: Schedule = CONSTANT          # a factor s(t) on the step (and ε), optionally on γ (symattn.schedule)
    features: FeatureCovariance = IDENTITY  # the d×d covariance Σ of every token's features (symattn.features)
    source: str = field(default="<dict>", compare=False)
    raw: dict = field(default=None, repr=False, compare=False)

    @property
    def K(self) -> int:
        return len(self.indices)

    @property
    def structure(self) -> dict:
        """What the limit equations' right-hand side depends on — the model's structure: tokens,
        covariance, activation, readout, whether there is label noise, custom loss, and per index
        its name, role and parameterization. Not the spec's name, the initial laws (width,
        init_scale), the training parameters (ε, B, α, γ), the label-noise variance or the softmax
        inverse temperature β (run-time arguments of a generated module), or the truncation. The
        generated module's identity is this structure (docs/interface.md)."""
        return {"tokens": self.tokens, "token_covariance": [list(r) for r in self.covariance],
                "activation": self.activation,
                "readout": self.readout, "label_noise": self.label_noise > 0 and self.loss is None, "loss": self.loss,
                "indices": [{"name": ix.name, "role": ix.role, "parameterization": ix.parameterization}
                            for ix in self.indices],
                **({} if self.features.identity else {"feature_covariance": True})}

    @property
    def inverse_temperature(self) -> float:
        """The β the loss reads: the softmax's inverse temperature, 1 where the loss has none."""
        return float(self.beta) if self.activation == "softmax" and self.loss is None else 1.0

    @property
    def label_noise_variance(self) -> float:
        """The label-noise variance s² the loss reads (0 for a custom loss, which has no label noise)."""
        return float(self.label_noise) if self.loss is None else 0.0

    @property
    def expression_loss(self) -> bool:
        """Whether the loss is built from a user's expression (a custom loss or activation), which only SymPy can
        check (continuity, ``Loss.require_pathwise_gradient``); a named activation's loss needs no check."""
        return self.loss is not None or self.activation not in ACTIVATIONS

    @property
    def initial_laws(self) -> str:
        """The initial laws — every index's width, init_scale and scale, and the features' Σ — as canonical JSON:
        what the free initial state depends on beyond the structure (the state at which a Gaussian quadrature
        is calibrated, ``derivation.potential``)."""
        laws = [{"width": ix.width, "init_scale": list(ix.init_scale), "scale": ix.scale} for ix in self.indices]
        if not self.features.identity:
            laws.append({"features": self.features.describe(),
                         "moments": [self.features.moment(n) for n in range(2, 9)]})
        return json.dumps(laws, sort_keys=True)

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the validated content (not of the file's spelling or path)."""
        fields = {k: v for k, v in self.__dict__.items() if k not in ("source", "raw")}
        fields["indices"] = [ix.__dict__ for ix in self.indices]
        text = json.dumps(fields, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def students(self) -> list:
        return [k for k, ix in enumerate(self.indices) if ix.role == "student"]

    @property
    def teachers(self) -> list:
        return [k for k, ix in enumerate(self.indices) if ix.role == "teacher"]

    @property
    def names(self) -> list:
        return [ix.name for ix in self.indices]

    def step_size(self, dim: int | None) -> float:
        """SGD step α: ε·B/d from noise_ratio, or learning_rate itself."""
        if self.learning_rate is not None:
            return self.learning_rate
        if dim is None:
            raise SpecError(f"{self.source}: training.noise_ratio: a dimension is needed to turn ε into a step")
        return self.noise_ratio * self.batch_size / dim

    def epsilon(self, dim: int | None = None) -> float:
        """Noise ratio ε = α·d/B (docs/theory.md §3, §7)."""
        if self.noise_ratio is not None:
            return self.noise_ratio
        if dim is None:
            raise SpecError(f"{self.source}: training.learning_rate: ε = α·d/B depends on d; pass --dim D")
        return self.learning_rate * dim / self.batch_size


def check_activation(src, value):
    """The activation string, or SpecError: a named activation or an expression in z, finite and real for every real z."""
    if not isinstance(value, str) or not value.strip():
        fail(src, "model.activation", f"expected one of {', '.join(ACTIVATIONS)} or an expression in z")
    if value in ACTIVATIONS:
        return value
    import sympy as sp  # an expression: validated by SymPy (a named activation needs none)

    from .expressions import ExpressionError, Z, activation_sympy
    try:
        expr = activation_sympy(value)
    except ExpressionError as exc:
        fail(src, "model.activation", str(exc))
    bad = finite_at(expr, [{Z: sp.Float(v)} for v in (0.0, -0.5, 0.5, -1.0, 1.0, -2.5, 2.5, -6.0, 6.0)])
    if bad is not None:
        fail(src, "model.activation", f"{short(repr(value))} is not a finite real number in double precision at {bad}; the activation "
                                       f"must be finite for every real z")
    gap = not_real_on(expr, Z)
    if gap is not None:
        fail(src, "model.activation", f"{short(repr(value))} is not a real number for z in {short(gap)}; the "
                                       f"activation must be real for every real z")
    return value


_GSYM = re.compile(r"^G_(\d+)_(\d+)_(\d+)$")


def _check_loss(src, value, L, K):
    if not isinstance(value, str):
        fail(src, "model.loss", f"expected an expression in G_i_j_k, got {value!r}")
    import sympy as sp

    from .expressions import ExpressionError, loss_sympy
    try:
        expr = loss_sympy(value, L, K)
    except ExpressionError as exc:
        msg = str(exc)
        if "unknown name" in msg:
            msg += f"; use G_i_j_k with 1 <= i, j <= {L}, 1 <= k <= {K}"
        fail(src, "model.loss", msg)
    if not expr.free_symbols:
        fail(src, "model.loss", "the loss must depend on some G_i_j_k")
    rng = np.random.default_rng(0)
    syms = sorted(expr.free_symbols, key=lambda s: s.name)
    points = [{s: sp.Float(0.0) for s in syms}] + [
        {s: sp.Float(float(x)) for s, x in zip(syms, rng.standard_normal(len(syms)))} for _ in range(3)]
    bad = finite_at(expr, points)
    if bad is not None:
        fail(src, "model.loss", f"not a finite real number at {short(bad)}")
    return value


def _covariance(src, value, L):
    key = "model.token_covariance"
    if value == "identity":
        return np.eye(L)
    def numeric(v):
        return (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
            isinstance(v, list) and all(numeric(x) for x in v))

    if not isinstance(value, list) or not numeric(value):
        fail(src, key, f"expected \"identity\" or an {L}x{L} matrix of numbers")
    try:
        C = np.array(value, dtype=float)
    except (TypeError, ValueError):
        fail(src, key, f"expected \"identity\" or an {L}x{L} matrix of numbers")
    if C.shape != (L, L):
        fail(src, key, f"expected \"identity\" or an {L}x{L} matrix, got shape {C.shape}")
    if not np.all(np.isfinite(C)):
        fail(src, key, "entries must be finite")
    if np.abs(C).max() > MAX_SCALE:
        fail(src, key, f"entries must be at most {MAX_SCALE:g} in magnitude (as every other scale), got "
                        f"{np.abs(C).max():.3g}")
    if not np.allclose(C, C.T, atol=1e-12):
        fail(src, key, "must be symmetric")
    if np.linalg.eigvalsh(C).min() < -1e-12:
        fail(src, key, "must be positive semi-definite")
    return C


def parse_index(src, n, raw, seen, key=None, keys=_INDEX_KEYS):
    """The ``Index`` of the n-th entry of a spec's ``indices`` (``raw``), or SpecError naming its key; ``seen``: the
    names so far."""
    """One validated :class:`Index` from its table (``key``: its place in the file for messages)."""
    key = key or f"indices[{n}]"
    raw = table(src, key, raw, keys)
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name or ""):
        fail(src, f"{key}.name", f"expected an alphanumeric name starting with a letter, got {name!r}")
    if name in seen:
        fail(src, f"{key}.name", f"duplicate index name {name!r}")
    role = raw.get("role")
    if role not in ROLES:
        fail(src, f"{key}.role", f"expected one of {', '.join(ROLES)}, got {role!r}")
    par = raw.get("parameterization")
    if par not in PARAMETERIZATIONS:
        fail(src, f"{key}.parameterization", f"expected one of {', '.join(PARAMETERIZATIONS)}, got {par!r}")
    kind = KINDS[par]
    if role == "student" and not kind.trainable:
        trainable = ", ".join(n for n, k in KINDS.items() if k.trainable)
        fail(src, f"{key}.parameterization", f"{par} is teacher-only; a student is {trainable}")
    width = number(src, f"{key}.width", raw.get("width", 1.0), low=0.0, strict=True, high=MAX_WIDTH)
    if "width" in raw and not kind.uses_width:
        allowed = " and ".join(n for n, k in KINDS.items() if k.uses_width)
        fail(src, f"{key}.width", f"not used by a {par} index; allowed for {allowed}")
    if "init_scale" in raw and not kind.uses_init_scale:
        fail(src, f"{key}.init_scale", f"not used by a {par} index (S = scale·I); give scale")
    init = raw.get("init_scale", 1.0)
    if isinstance(init, list):
        if not kind.init_pair or len(init) != 2:
            allowed = " and ".join(n for n, k in KINDS.items() if k.init_pair)
            fail(src, f"{key}.init_scale", f"a pair [σ_U, σ_V] is allowed only for {allowed} indices")
        init = tuple(number(src, f"{key}.init_scale", v, low=0.0, high=MAX_SCALE) for v in init)
    else:
        init = (number(src, f"{key}.init_scale", init, low=0.0, high=MAX_SCALE),)
    if kind.positive_init and min(init) == 0.0:
        fail(src, f"{key}.init_scale", f"must be > 0 for a {par} index (zero factors never move)")
    if "scale" in raw and not kind.uses_scale:
        allowed = " and ".join(n for n, k in KINDS.items() if k.uses_scale)
        fail(src, f"{key}.scale", f"only an {allowed} teacher has a scale")
    scale = number(src, f"{key}.scale", raw.get("scale", 1.0), high=MAX_SCALE)
    symbol = raw.get("symbol")
    if symbol is not None and (not isinstance(symbol, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,7}", symbol)):
        fail(src, f"{key}.symbol", f"expected a short alphanumeric symbol starting with a letter (at most 8 "
                                    f"characters, e.g. \"s\" or \"h1\"), got {symbol!r}")
    return Index(name=name, role=role, parameterization=par, width=width, init_scale=init, scale=scale, symbol=symbol)


def parse_setting(item: str) -> tuple:
    """``KEY=VALUE`` of ``--set``: the value read as a TOML value (number, string, array, …), a
    bare word as a string. Returns (key, value); SpecError when there is no ``=``."""
    if "=" not in str(item):
        raise SpecError(f"--set {item}: expected KEY=VALUE, e.g. training.noise_ratio=0.005")
    key, text = (x.strip() for x in str(item).split("=", 1))
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return key, value


def apply_settings(raw: dict, settings, src: str = "<dict>") -> dict:
    """A deep copy of the raw spec with ``settings`` ({dotted key: value} or KEY=VALUE strings)
    applied. Keys address the spec by dotted path (``training.noise_ratio``, ``model.beta``,
    ``theory.truncation``, ``name``), indices by name (``indices.student.init_scale``); an
    unknown path is refused naming it. The result is validated like any spec."""
    raw = copy.deepcopy(raw)
    items = settings.items() if isinstance(settings, dict) else [parse_setting(x) for x in settings]
    tables = {"model": _MODEL_KEYS, "training": _TRAINING_KEYS, "theory": _THEORY_KEYS}
    for key, value in items:
        parts = str(key).split(".")
        if parts[0] == "name" and len(parts) == 1:
            raw["name"] = value
        elif parts[0] in tables and len(parts) == 2:
            if parts[1] not in tables[parts[0]]:
                raise SpecError(f"{src}: --set {key}: unknown key; allowed: "
                                f"{', '.join(parts[0] + '.' + k for k in sorted(tables[parts[0]]))}")
            raw.setdefault(parts[0], {})
            if not isinstance(raw[parts[0]], dict):
                raise SpecError(f"{src}: --set {key}: {parts[0]} is not a table in this spec")
            raw[parts[0]][parts[1]] = value
        elif parts[0] == "indices" and len(parts) == 3:
            found = [ix for ix in raw.get("indices", []) if isinstance(ix, dict) and ix.get("name") == parts[1]]
            if not found:
                names = [ix.get("name") for ix in raw.get("indices", []) if isinstance(ix, dict)]
                raise SpecError(f"{src}: --set {key}: no index named {parts[1]!r}; indices: {', '.join(map(str, names))}")
            if parts[2] not in _INDEX_KEYS or parts[2] == "name":
                raise SpecError(f"{src}: --set {key}: unknown index key; allowed: "
                                f"{', '.join(sorted(_INDEX_KEYS - {'name'}))}")
            found[0][parts[2]] = value
        else:
            raise SpecError(f"{src}: --set {key}: unknown key; use name, model.KEY, training.KEY, theory.KEY "
                            f"or indices.NAME.KEY")
    return raw


def read_raw(source) -> tuple:
    """(raw table, source label) of a spec: a dict as it is, else a TOML path or a shipped example's name,
    read and parsed with one-line SpecErrors (unreadable, too large, not UTF-8, malformed TOML)."""
    if isinstance(source, dict):
        return source, "<dict>"
    src = str(source)
    if not Path(source).exists():
        from .examples import example_path
        shipped = example_path(src)
        source = shipped if shipped is not None else source
    from .files import read_input_or_refuse
    data = read_input_or_refuse(source, 1_000_000, "spec", src)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"{src}: not a UTF-8 text file (a spec is TOML text)") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{src}: malformed TOML ({exc})") from None
    return raw, src


def is_residual(source) -> bool:
    """True for a residual-attention spec (a ``student`` table instead of ``indices``: ``symattn.architecture``).
    Here, not in the architecture package, so that asking it of every command's spec imports nothing of that
    package (SymPy among it)."""
    if isinstance(source, dict):
        return "student" in source
    if isinstance(source, (str, os.PathLike)):
        try:
            return "student" in read_raw(source)[0]
        except SpecError:
            return False
    arch = sys.modules.get("symattn.architecture.spec")      # a ResidualSpec exists only once that is imported
    return arch is not None and isinstance(source, arch.ResidualSpec)


def require_spec(spec, where: str) -> Spec:
    """The spec of an inner layer: a loaded ``Spec``. A spec is read and validated once, by the entry points (the
    CLI, the public functions of ``symattn``, the notebook helpers) with :func:`load_spec`; below them every
    function takes the ``Spec`` (a path, a dict or an example's name there is a programming error)."""
    if not isinstance(spec, Spec):
        raise TypeError(f"{where} takes a loaded Spec (symattn.load_spec), not {type(spec).__name__}")
    return spec


def load_spec(source, settings=None) -> Spec:
    """Read and validate a spec from a TOML path (or a shipped example's name), a dict or a Spec.

    ``settings``: overrides applied before validation, {dotted key: value} or ``KEY=VALUE``
    strings (see ``apply_settings``)."""
    if isinstance(source, Spec):
        if not settings:
            return source
        return load_spec(source.raw, settings)
    raw, src = read_raw(source)
    if isinstance(raw, dict) and "student" in raw and "indices" not in raw:
        fail(src, "student", "a residual-attention spec (student/teacher networks): the commands potential, "
                              "theory, simulate and compare take it; in Python symattn.architecture (docs/interface.md)")
    raw = table(src, "", raw, _TOP_KEYS)
    if settings:
        raw = apply_settings(raw, settings, src)
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_\-]+", name or ""):
        fail(src, "name", f"expected a file-name-safe string ([A-Za-z0-9_-]+), got {name!r}")
    model = table(src, "model", raw.get("model", {}), _MODEL_KEYS)
    L = number(src, "model.tokens", model.get("tokens", 1), low=1, integer=True)
    if L > MAX_TOKENS:
        fail(src, "model.tokens", f"at most {MAX_TOKENS} tokens are supported (the loss has L²K Gaussian "
                                   f"pre-activations), got {L}")
    C = _covariance(src, model.get("token_covariance", "identity"), L)
    activation = check_activation(src, model.get("activation", "linear"))
    beta = number(src, "model.beta", model.get("beta", 1.0))
    if abs(beta) > MAX_BETA:
        fail(src, "model.beta", f"|β| must be <= {MAX_BETA:g} (exp(β·G) overflows beyond), got {beta:g}")
    if "beta" in model and activation != "softmax":
        fail(src, "model.beta", "only the softmax activation has an inverse temperature")
    readout = model.get("readout", "sum")
    if readout not in READOUTS:
        fail(src, "model.readout", f"expected one of {', '.join(READOUTS)}, got {readout!r}")
    noise = number(src, "model.label_noise", model.get("label_noise", 0.0), low=0.0, high=MAX_SCALE)
    base = Path(src).parent if not isinstance(source, dict) and Path(src).exists() else None
    features = parse_features(src, model["feature_covariance"], base) if "feature_covariance" in model else IDENTITY
    if "indices" not in raw:
        fail(src, "indices", "at least one [[indices]] table is required")
    if not isinstance(raw["indices"], list) or not raw["indices"]:
        fail(src, "indices", "expected a non-empty array of tables [[indices]]")
    indices, seen = [], set()
    for n, item in enumerate(raw["indices"]):
        ix = parse_index(src, n, item, seen)
        seen.add(ix.name)
        indices.append(ix)
    if len(indices) > MAX_INDICES:
        fail(src, "indices", f"at most {MAX_INDICES} indices are supported, got {len(indices)}")
    given = [ix.symbol for ix in indices if ix.symbol is not None]
    if len(set(given)) < len(given):
        twice = next(x for x in given if given.count(x) > 1)
        fail(src, f"indices.{next(ix.name for ix in indices if ix.symbol == twice)}.symbol",
              f"symbol {twice!r} is given to two indices")
    if not features.identity:
        for ix in indices:
            if not ix.kind.whitens:
                fail(src, f"indices.{ix.name}.parameterization", f"{ix.parameterization} (S = c·I) is not supported "
                                                                 f"with model.feature_covariance (use a tied or direct teacher)")
    if not any(ix.role == "student" for ix in indices):
        fail(src, "indices", "at least one index must have role = \"student\"")
    loss = model.get("loss")
    if loss is not None:
        loss = _check_loss(src, loss, L, len(indices))
    elif not any(ix.role == "teacher" for ix in indices):
        fail(src, "indices", "the MSE loss needs a teacher index (or give model.loss)")
    if activation == "softmax" and L < 2 and loss is None:
        fail(src, "model.tokens", "softmax over a single token is constant; use tokens >= 2")
    training = table(src, "training", raw.get("training", {}), _TRAINING_KEYS)
    B = number(src, "training.batch_size", training.get("batch_size", 1), low=1, integer=True)
    if B > MAX_BATCH:
        fail(src, "training.batch_size", f"at most {MAX_BATCH} samples per batch, got {B}")
    if "noise_ratio" in training and "learning_rate" in training:
        fail(src, "training.learning_rate", "give either noise_ratio or learning_rate, not both")
    eps = lr = None
    if "learning_rate" in training:
        lr = number(src, "training.learning_rate", training["learning_rate"], low=0.0, strict=True,
                     high=1e6)
    else:
        eps = number(src, "training.noise_ratio", training.get("noise_ratio", 0.01), low=0.0, high=MAX_SCALE)
    gamma = number(src, "training.weight_decay", training.get("weight_decay", 0.0), low=0.0, high=MAX_SCALE)
    schedule = parse_schedule(src, training["schedule"]) if "schedule" in training else CONSTANT
    theory = table(src, "theory", raw.get("theory", {}), _THEORY_KEYS)
    M = number(src, "theory.truncation", theory.get("truncation", 4), low=2, integer=True)
    if M > MAX_TRUNCATION:
        fail(src, "theory.truncation", f"at most {MAX_TRUNCATION}, got {M}")
    return Spec(name=name, tokens=L, covariance=tuple(tuple(float(x) for x in row) for row in C),
                activation=activation, beta=beta, readout=readout,
                label_noise=noise, loss=loss, indices=tuple(indices), batch_size=B, noise_ratio=eps,
                learning_rate=lr, weight_decay=gamma, truncation=M, schedule=schedule, features=features, source=src,
                raw=copy.deepcopy(raw))
