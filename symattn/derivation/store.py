"""A per-user store of derived systems, so that a second ``theory`` of the same model spends its time
integrating, not deriving (SymPy) and printing code.

A derived system depends on the model's structure (``Spec.structure``, and the indices' symbols its
equations are written in), the feature covariance's law (its φ(Σ²) centres the p_ columns), the truncation,
the quadrature tolerance, the package's code and SymPy's version — not on the indices' initial laws, the
training parameters (ε, B, γ), the label-noise variance or β,
which are run-time arguments. Those make the key; the stored object is the system with its generated
module's source, pickled. On load the caller's spec replaces the stored one (in the system, its
potential and its ν), so the initial laws, ε, B, γ and the label-noise variance are always the caller's.
The quadrature orders a system has calibrated are kept in it per (β, initial laws) — the state they
were calibrated at (``derivation.potential``) — so a store entry serves every initial law and β, and
one calibrated before is not calibrated again.

Files live in the module cache folder (``symattn.cache.cache_dir``: private to the user, mode 0700) as
``d_<key>.pkl``, written atomically (a concurrent job never reads half a file); each holds the SHA-256
of its payload, checked before unpickling, so a torn or edited file is ignored and rewritten. An
object that cannot be stored (an unpicklable piece) is simply not stored.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


@cache
def code_digest() -> str:
    """SHA-256 over the package's Python sources and code templates (a change re-derives)."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        if path.suffix in (".py", ".tmpl") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(PACKAGE)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@cache
def sympy_version() -> str:
    """SymPy's version from its installed metadata (importing SymPy to read it would cost a warm run 0.17 s)."""
    from importlib.metadata import version
    return version("sympy")


def key(spec, truncation: int, tol: float) -> str:
    """What a derivation depends on (module docstring), hashed."""
    f = spec.features                                   # its φ(Σ²) centres the p_ columns
    features = None if f.identity else {"law": f.describe(), "moments": [f.moment(n) for n in range(2, 9)]}
    text = json.dumps({"structure": spec.structure, "symbols": [ix.symbol for ix in spec.indices],
                       "features": features, "truncation": int(truncation), "tol": float(tol),
                       "code": code_digest(), "sympy": sympy_version()}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _path(k: str, prefix: str = "d") -> Path:
    from ..cache import cache_dir
    return cache_dir() / f"{prefix}_{k}.pkl"


def _read(path: Path):
    """The object pickled in ``path`` (its SHA-256 checked first), or None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, _, payload = data.partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    try:
        return pickle.loads(payload)
    except Exception:                                      # a stale class layout: derive anew
        return None


def _write(path: Path, obj) -> bool:
    """Pickle ``obj`` to ``path`` atomically, with the SHA-256 of its payload; False when it cannot be."""
    try:
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    from ..files import atomic_write
    try:
        atomic_write(path, hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload, mode=0o600)
    except OSError:
        return False
    return True


def load(spec, k: str):
    """The stored system of key k with ``spec`` put in place of the stored spec, or None."""
    system = _read(_path(k))
    if system is None:
        return None
    for holder in (system, system.potential, *system.nu.values()):
        holder.spec = spec                                  # ε, B, γ and the label-noise variance
    system._store_key = k
    return system


def cached(spec, truncation: int, tol: float, build):
    """The stored system of (spec, truncation, tol), else ``build()`` marked to be stored once its
    module source exists (``codegen.systems.compiled`` calls :func:`save`)."""
    k = key(spec, truncation, tol)
    system = load(spec, k)
    if system is None:
        system = build()
        system._store_key = k
    return system


def save(system) -> bool:
    """Store ``system`` (with its module source) under its key; False when it cannot be pickled."""
    k = getattr(system, "_store_key", None)
    return k is not None and _write(_path(k), system)


def load_record(k: str, prefix: str = "r"):
    """The plain record of key k (``r_<key>.pkl``: a system's ``codegen.warm.SystemRecord``; ``f_<key>.pkl``: the
    exact finite-d polynomial, ``finite_d_key``) — no SymPy object, so loading it imports no SymPy — or None."""
    return _read(_path(k, prefix))


def save_record(k: str, record, prefix: str = "r") -> bool:
    return _write(_path(k, prefix), record)


def finite_d_key(spec) -> str:
    """What the exact finite-d polynomial (``derivation.finite_d``) depends on, hashed: the structure, the
    label-noise variance and β (it bakes them in), the code and SymPy's version."""
    text = json.dumps({"finite_d": spec.structure, "label_noise": spec.label_noise_variance,
                       "beta": spec.inverse_temperature, "code": code_digest(), "sympy": sympy_version()},
                      sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:24]
