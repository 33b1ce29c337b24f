"""The per-user cache folder of generated modules and stored derivations.

``$SYMATTN_CACHE`` or ``$XDG_CACHE_HOME/symattn`` (default ``~/.cache/symattn``), with a subfolder per package and
Numba version, created with mode 0700 and owned by this user; where none can be written (a read-only home), a
private temporary folder. ``codegen.load`` keeps its modules there, ``derivation.store`` its derivations.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

_FALLBACK: list = []


def _versions() -> str:
    import numba

    from .version import __version__
    return f"symattn-{__version__}-numba{numba.__version__}"


def _private_dir(path: Path) -> Path | None:
    """``path`` created with mode 0700, or None when it cannot be made private to this user."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = path.stat()
        if st.st_uid != os.getuid():
            return None
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, 0o700)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return path
    except OSError:
        return None


def cache_dir() -> Path:
    """The per-user module cache (module docstring); a private temporary folder as fallback."""
    root = os.environ.get("SYMATTN_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "symattn")
    got = _private_dir(Path(root) / _versions())
    if got is not None:
        return got
    if not _FALLBACK:
        _FALLBACK.append(Path(tempfile.mkdtemp(prefix="symattn-cache-")))
    return _FALLBACK[0]
