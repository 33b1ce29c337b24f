"""Helpers shared by the notebooks of ``notebooks/`` (their jupytext sources import this module).

``SYMATTN_QUICK=1`` selects the quick mode (small d, few seeds, short horizons; the tests execute the
notebooks so), ``SYMATTN_FIGDIR`` where figures go (default ``notebooks/figures`` of the checkout).
Prose that quotes a measured number is written with :func:`reading`, an f-string rendered as
Markdown, so every number in it is computed by the notebook that shows it.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .comparison import deviations

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = Path(__file__).resolve().parent / "examples"
QUICK = os.environ.get("SYMATTN_QUICK", "0") == "1"


class Notebook:
    """One notebook's bookkeeping: its name (figure file names), start time, figure directory."""

    def __init__(self, name: str):
        self.name = name
        self.quick = QUICK
        self.figdir = Path(os.environ.get("SYMATTN_FIGDIR", ROOT / "notebooks" / "figures"))
        self.figdir.mkdir(parents=True, exist_ok=True)
        self._n = 0
        self._t0 = time.time()
        from .version import __version__
        print("QUICK =", QUICK, "| symattn", __version__)

    def savefig(self, fig) -> Path:
        """Save ``fig`` as ``<figdir>/<name>_<k>.png`` (k = 1, 2, … in call order)."""
        self._n += 1
        path = self.figdir / f"{self.name}_{self._n}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        print("saved figures/" + path.name)
        return path

    def states(self, label: str, value: float, stated: str, tol: float) -> None:
        """Check a number the notebook's text states (``stated``, as written in its Markdown) against the value the
        notebook computes: prints ``states: <label> = <value> (text: <stated>)`` and raises AssertionError beyond
        ``tol`` (tests/test_notebooks.py reads these lines and finds ``stated`` in the notebook's Markdown)."""
        ok = abs(float(value) - float(stated)) <= tol
        print(f"states: {label} = {float(value):.6g} (text: {stated}){'' if ok else '  MISMATCH'}")
        if not ok:
            raise AssertionError(f"{label}: the notebook computes {value!r}, its text states {stated} (±{tol:g})")

    def footer(self) -> None:
        print(f"notebook run time: {time.time() - self._t0:.1f} s (QUICK={QUICK})")


def report(theory, sim, cols, until=None, label="") -> dict:
    """Print max |theory − SGD| (and in units of the seed s.e.m.) per column up to ``until``; return
    :func:`symattn.comparison.deviations`."""
    dev = deviations(theory, sim, until)
    for c in cols:
        if c in dev and dev[c]["max_abs_dev"] is not None:
            r = dev[c]["max_dev_over_sem"]
            extra = f"  ({r:.1f} s.e.m.)" if r is not None else ""
            lo, hi = dev[c]["theory_range"]
            print(f"{label}{c:>22s}: max|theory-SGD| = {dev[c]['max_abs_dev']:.4f}"
                  f"  theory range [{lo:.3f}, {hi:.3f}]{extra}")
    return dev


def reading(text: str):
    """Render ``text`` (an f-string of computed numbers) as Markdown in the notebook; print it elsewhere."""
    try:
        from IPython.display import Markdown, display
    except ImportError:                                   # pragma: no cover - IPython ships with ipykernel
        print(text)
        return
    display(Markdown(text))
