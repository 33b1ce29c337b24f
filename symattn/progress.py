"""Visible long work: notes and progress on stderr (tqdm on a terminal, plain lines otherwise).

On a terminal a tqdm bar is drawn; when stderr is a file or a pipe (CI logs, SLURM output files)
a plain line ``symattn: <what>: 40% (12 s, ~18 s left)`` is printed instead — the first after
:data:`PLAIN_FIRST` seconds, then at most every :data:`PLAIN_EVERY` seconds — so captured logs
stay readable and no long step is silent for more than a few seconds. ``configure(quiet=True)``
(the CLI's ``--quiet``) silences both notes and progress. Notes (estimates before long work) are
printed only once the command line has called :func:`configure`; library calls stay silent
apart from the progress bars they ask for.
"""
from __future__ import annotations

import sys
import time as _time

PLAIN_FIRST = 5.0           # seconds before the first plain progress line
PLAIN_EVERY = 20.0          # seconds between later plain progress lines
_STATE = {"quiet": False, "notes": False}


def configure(quiet: bool = False) -> None:
    """Command-line mode: notes on unless ``quiet``; ``quiet`` also turns progress off."""
    _STATE["quiet"] = bool(quiet)
    _STATE["notes"] = not quiet


def quiet() -> bool:
    return _STATE["quiet"]


def notes_enabled() -> bool:
    """True in command-line mode unless --quiet (progress of work a library caller did not ask about)."""
    return _STATE["notes"]


def note(message: str) -> None:
    """One informative line on stderr (an estimate, what is being done), unless quiet."""
    if _STATE["notes"]:
        print(f"symattn: {message}", file=sys.stderr, flush=True)


class Progress:
    """``update(done)`` with the cumulative count of ``total`` units; ``close()`` at the end."""

    def __init__(self, total: int, desc: str, enabled: bool = True, unit: str = "it"):
        self.total, self.desc = max(int(total), 1), desc
        self.enabled = enabled and not _STATE["quiet"]
        self.t0 = self.last = _time.monotonic()
        self.done = 0
        self.bar = None
        if self.enabled and _isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc=f"symattn {desc}", unit=unit, file=sys.stderr,
                            leave=False, mininterval=0.5, delay=1.0, dynamic_ncols=True)

    def update(self, done: int) -> None:
        from .files import PENDING_SIGNALS, raise_pending_signal
        if PENDING_SIGNALS:                     # an interrupt swallowed by a C extension or a finaliser: stop here
            raise_pending_signal()
        if not self.enabled:
            return
        done = min(int(done), self.total)
        if self.bar is not None:
            self.bar.update(done - self.done)
        else:
            now = _time.monotonic()
            wait = PLAIN_FIRST if self.last == self.t0 else PLAIN_EVERY
            if now - self.last >= wait and done > 0:
                self.last = now
                el = now - self.t0
                left = el * (self.total - done) / done
                print(f"symattn: {self.desc}: {100 * done / self.total:.0f}% ({el:.0f} s, ~{left:.0f} s left)",
                      file=sys.stderr, flush=True)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _isatty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
