"""Output files that are either absent or complete, output paths checked before the work, and inputs read
with a bound.

Every file the package writes goes through :func:`atomic_write` or :func:`atomic_target`: the
data goes to a temporary file in the destination's folder, which is then renamed onto the
destination (``os.replace``, atomic on POSIX). An interrupted or failing run therefore leaves
either no file or the previous complete one, never a truncated file, and a concurrent reader
never sees half a file. A symlinked destination is resolved first (the file it points to is
replaced, the link stays); a destination that exists and is not a regular file — /dev/null,
/dev/stdout, a named pipe, a device — is written through, never replaced (a pipe without a reader is
refused instead of blocking). A destination that is one of the run's inputs (``INPUTS``: the spec, its
feature-covariance file, a grid file) is refused. ``WRITTEN`` lists every file written, for the
interrupt and failure messages.

Inputs (:func:`read_input`) must be regular files and are read up to a size limit: /dev/zero or a named
pipe as a spec is refused at once instead of read forever.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import UsageError

# Signals whose exception may have been swallowed: a KeyboardInterrupt raised inside a finaliser
# (``__del__``, e.g. of a Numba/LLVM object) is printed as "Exception ignored" and lost, and the run
# would go on to write its outputs and exit 0. The command line's handlers record the exception type
# here; ``atomic_target`` re-raises it before it renames a file into place, and ``main`` before it exits.
PENDING_SIGNALS: list = []
INPUTS: set = set()            # resolved paths of the files this command read (refused as outputs)
WRITTEN: list = []             # the files this command wrote, in order (the interrupt message lists them)


def raise_pending_signal() -> None:
    """Re-raise the first recorded, possibly swallowed, interrupt (no-op when none was received)."""
    if PENDING_SIGNALS:
        raise PENDING_SIGNALS[0]()


def read_input(path, limit: int, what: str = "file") -> bytes:
    """The bytes of an input file, read at most ``limit`` (+1 to detect an excess): OSError for a missing or
    unreadable file, ValueError (with the reason) for one that is not a regular file or is larger than ``limit``.
    The resolved path joins ``INPUTS``."""
    real = os.path.realpath(path)
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"not a regular file ({_kind(st.st_mode)}); a {what} is read from a regular file")
    with open(real, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"file too large for a {what} (more than {limit} bytes)")
    INPUTS.add(real)
    return data


def read_input_or_refuse(path, limit: int, what: str, where: str) -> bytes:
    """``read_input``, its failures as one SpecError line prefixed by ``where`` (the file and key to name)."""
    from .errors import SpecError
    try:
        return read_input(path, limit, what)
    except OSError as exc:
        raise SpecError(f"{where}: cannot read file ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _kind(mode) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _special(real: str) -> bool:
    """Whether an existing destination is not a regular file (a device, a pipe, …): written through."""
    try:
        return not stat.S_ISREG(os.stat(real).st_mode) and not os.path.isdir(real)
    except OSError:
        return False


def _refuse_input(real: str, path) -> None:
    if real in INPUTS:
        raise UsageError(f"--out {path}: is an input of this run (the spec or a file it reads); refusing to "
                         f"overwrite it")


@contextlib.contextmanager
def atomic_target(path, mode: int | None = None):
    """Yield a temporary path next to ``path``; on success rename it onto ``path``, else remove it (module
    docstring: a symlink is resolved first, a special destination written through, an input refused).

    ``mode``: permission bits of the final file (default: those of a new file under the umask)."""
    shown = str(path)
    real = os.path.realpath(path)
    _refuse_input(real, path)
    if _special(real):
        fd, tmp = tempfile.mkstemp(prefix=".symattn-special.", suffix=".tmp")
        os.close(fd)
        try:
            yield Path(tmp)
            raise_pending_signal()
            _write_through(real, Path(tmp).read_bytes(), path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        WRITTEN.append(shown)
        return
    path = Path(real)
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
    WRITTEN.append(shown)


def _write_through(real: str, data: bytes, shown) -> None:
    """Write to an existing special file (device, pipe): opened without creating or truncating a file in its
    place; a named pipe without a reader is refused (O_NONBLOCK: ENXIO) instead of blocking forever."""
    flags = os.O_WRONLY | (os.O_NONBLOCK if stat.S_ISFIFO(os.stat(real).st_mode) else 0)
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UsageError(f"--out {shown}: a named pipe with no reader") from None
        raise
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


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
    """Refuse, before any work, an output file that cannot be written: an empty name, a folder, a missing
    parent folder, an unwritable place, an input of the run; a special file (/dev/null, a pipe) is fine (written
    through). Returns the path."""
    if str(path) == "":
        raise UsageError(f"{option} '': an empty file name (leave {option} out for standard output)")
    real = os.path.realpath(path)
    if real in INPUTS:
        raise UsageError(f"{option} {path}: is an input of this run (the spec or a file it reads); refusing to "
                         f"overwrite it")
    if _special(real):
        if not os.access(real, os.W_OK):
            raise UsageError(f"{option} {path}: not writable here")
        return Path(path)
    path = Path(real) if os.path.islink(path) else Path(path)
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
