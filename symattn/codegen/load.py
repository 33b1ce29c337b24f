"""Write generated modules and import them through a cache that cannot be poisoned or torn.

The compiled-module cache is the per-user folder of ``symattn.cache`` (``$SYMATTN_CACHE`` or
``$XDG_CACHE_HOME/symattn``, a subfolder per package and Numba version, mode 0700). A module is stored as ``m_<sha256 of its source>.py``,
written to a temporary file and renamed into place, so a concurrent job never reads half a
module. On load the file's bytes are hashed again and compared with its name: a planted,
edited or truncated file is never executed — it is rewritten from the source in hand. The
verified bytes themselves are compiled (not re-read), so what runs is what was checked. A module's
compiled quadrature kernels are stored apart (``k_<sha256>.py``), shared by every truncation.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from ..cache import cache_dir
from ..errors import UsageError
from ..files import atomic_write


def default_path(spec, truncation: int, root: str | Path = "generated") -> Path:
    return Path(root) / f"{spec.name}_M{truncation}.py"


def write_module(source: str, path: str | Path) -> Path:
    """Write a generated module where the user asked (``derive --out``), atomically."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write(path, source)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot write ({exc.strerror or exc})") from None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _exec_verified(name: str, path: Path, data: bytes, names: dict | None = None):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    mod.__dict__.update(names or {})
    code = compile(data, str(path), "exec")
    sys.modules[name] = mod
    try:
        exec(code, mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def import_module(path: str | Path):
    """Import a generated module from a file the user wrote (``derive --out``) or the cache."""
    path = Path(path).resolve()
    data = path.read_bytes()
    name = f"symattn_generated_{path.stem}_{_digest(str(path).encode())[:10]}"
    return _exec_verified(name, path, data)


# the compiled expectations of a model depend on its potential only, not on the truncation: the module
# cache stores the block between these lines (``emit`` writes them) as a file of its own, shared by every truncation
KERNELS_BEGIN = "# ---- compiled quadrature kernels ----\n"
KERNELS_END = "\n# ---- end of compiled quadrature kernels ----\n"
KERNEL_HEADER = ('"""Compiled quadrature kernels of a generated module (symattn; shared by every truncation of '
                 'its model)."""\nimport math\n\nimport numpy as np\nfrom numba import njit\n\n'
                 'from symattn.codegen import runtime as _rt\n\n')


def cached_module(source: str):
    """Import generated ``source`` through content-addressed, verified files in the cache. Its block of
    compiled quadrature kernels (``emit.KERNELS_BEGIN`` … ``KERNELS_END``) becomes a file of its own,
    ``k_<hash>.py``, whose functions the module receives: the kernels depend on the potential only, so
    every truncation of a model shares one file and Numba compiles them once."""
    start, end = source.find(KERNELS_BEGIN), source.find(KERNELS_END)
    if start < 0 or end < start:
        return _cached("m", source)
    kernels = _cached("k", KERNEL_HEADER + source[start + len(KERNELS_BEGIN):end])
    shared = {k: v for k, v in vars(kernels).items() if k.startswith("_expect_")}
    rest = (source[:start] + f"# compiled quadrature kernels: {kernels.__file__.rsplit('/', 1)[-1]} "
            f"({', '.join(sorted(shared))})\n" + source[end + len(KERNELS_END):])
    return _cached("m", rest, shared)


def _cached(prefix: str, source: str, names: dict | None = None):
    """Import ``source`` through its file ``<prefix>_<sha256>.py`` in the cache (verified)."""
    data = source.encode()
    digest = _digest(data)[:20]
    name = f"symattn_generated_{prefix}_{digest}"
    if name in sys.modules:                     # same content, already compiled in this process
        return sys.modules[name]
    folder = cache_dir()
    path = folder / f"{prefix}_{digest}.py"
    try:
        ok = path.is_file() and _digest(path.read_bytes())[:20] == digest
    except OSError:
        ok = False
    if not ok:                                  # absent, planted, edited or torn: write it anew
        from ..progress import note
        note(f"compiling the generated right-hand side ({source.count(chr(10))} lines; first use of "
             f"this model, cached in {folder})")
        atomic_write(path, data, mode=0o600)
    return _exec_verified(name, path, data, names)
