"""Output files that are either absent or complete, and output paths checked before the work.

Every file the package writes goes through :func:`atomic_write` or :func:`atomic_target`: the
data goes to a temporary file in the destination's folder, which is then renamed onto the
destination (``os.replace``, atomic on POSIX). An interrupted or failing run therefore leaves
either no file or the previous complete one, never a truncated file, and a concurrent reader
never sees half a file.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from .errors import UsageError

# Signals whose exception may have been swallowed: a KeyboardInterrupt raised inside a finaliser
# (``__del__``, e.g. of a Numba/LLVM object) is printed as "Exception ignored" and lost, and the run
# would go on to write its outputs and exit 0. The command line's handlers record the exception type
# here; ``atomic_target`` re-raises it before it renames a file into place, and ``main`` before it exits.
PENDING_SIGNALS: list = []


def raise_pending_signal() -> None:
    """Re-raise the first recorded, possibly swallowed, interrupt (no-op when none was received)."""
    if PENDING_SIGNALS:
        raise PENDING_SIGNALS[0]()


@contextlib.contextmanager
def atomic_target(path, mode: int | None = None):
    """Yield a temporary path next to ``path``; on success rename it onto ``path``, else remove it.

    ``mode``: permission bits of the final file (default: those of a new file under the umask)."""
    path = Path(path)
    # hidden, and not ending in the destination's suffix: no reader globbing "*.csv" ever sees it
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    os.close(fd)
    try:
        yield Path(tmp)
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        raise_pending_signal()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path, data, mode: int | None = None) -> Path:
    """Write ``data`` (str or bytes) to ``path`` atomically (module docstring)."""
    path = Path(path)
    with atomic_target(path, mode) as tmp:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
    return path


def check_output_file(path, option: str = "--out") -> Path:
    """Refuse, before any work, an output file that cannot be written: a folder, a missing
    parent folder, an unwritable place. Returns the path."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: not writable here")
    return path


def check_output_dir(path, option: str = "--out") -> Path:
    """Refuse, before any work, an output folder that is an existing file or cannot be created
    or written. The folder itself is created only when results are written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: exists and is not a directory")
    probe = path
    while not probe.exists():
        probe = probe.parent if str(probe.parent) else Path(".")
        if probe == probe.parent and not probe.exists():
            break
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot create or write this folder (in {probe})")
    return path


def make_output_dir(path, option: str = "--out") -> Path:
    """Create the output folder (checked first, OSError as a one-line UsageError)."""
    path = check_output_dir(path, option)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot create ({exc.strerror or exc})") from None
    return path
