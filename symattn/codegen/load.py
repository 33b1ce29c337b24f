"""Write generated modules to ``generated/`` and import them."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path


def default_path(spec, truncation: int, root: str | Path = "generated") -> Path:
    return Path(root) / f"{spec.name}_M{truncation}.py"


def write_module(source: str, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return path


def import_module(path: str | Path):
    """Import a generated module from its file (a content-addressed cache file is imported once)."""
    path = Path(path).resolve()
    # a stable name: numba's on-disk cache refers to the module by it. Cache files are named by
    # their content already; other files get a digest of their path.
    name = f"symattn_generated_{path.stem}"
    if path.parent == cache_dir().resolve():
        if name in sys.modules:                     # same content, already compiled
            return sys.modules[name]
    else:
        name += "_" + hashlib.sha256(str(path).encode()).hexdigest()[:10]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def cache_dir() -> Path:
    import numba

    from .. import __version__
    default = os.path.join(tempfile.gettempdir(), f"symattn-cache-{__version__}-numba{numba.__version__}")
    return Path(os.environ.get("SYMATTN_CACHE") or default)


def cached_module(source: str):
    """Import generated source through a content-addressed file in the cache directory."""
    path = cache_dir() / f"m_{hashlib.sha256(source.encode()).hexdigest()[:20]}.py"
    if not path.exists():
        write_module(source, path)
    return import_module(path)
