"""The notebooks: jupytext sources (``notebooks/NN_*.py``) paired with executed ``.ipynb`` copies.

Each source is executed with nbclient in a fresh kernel of the interpreter running the tests (a
private kernelspec, see ``notebooks/build.py``) with ``SYMATTN_QUICK=1`` (small d, few seeds, short
horizons) and ``OPENBLAS_NUM_THREADS=1``; figures go to a temporary directory, so the committed
outputs are never touched. A cell raising fails the test. A second test checks that each committed
``.ipynb`` holds exactly the cells of its source (the pair is in sync).
"""
from __future__ import annotations

import importlib.util
import re
import time
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
SOURCES = sorted(p.name for p in NB_DIR.glob("[0-9][0-9]_*.py"))
NEEDS_TORCH = {"08_residual_two_layer.py"}          # SGD on the residual recursion (the torch extra)
EXECUTED = [pytest.param(n, marks=pytest.mark.torch) if n in NEEDS_TORCH else n for n in SOURCES]


def _build():
    spec = importlib.util.spec_from_file_location("nb_build", NB_DIR / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_notebooks_present():
    assert len(SOURCES) >= 7, SOURCES


@pytest.mark.parametrize("name", SOURCES)
def test_pair_in_sync(name):
    """The executed .ipynb holds the same cells (type and source) as its jupytext source."""
    src = jupytext.read(NB_DIR / name)
    ipynb = nbformat.read(NB_DIR / name.replace(".py", ".ipynb"), as_version=4)
    a = [(c.cell_type, c.source) for c in src.cells]
    b = [(c.cell_type, c.source) for c in ipynb.cells]
    assert a == b, f"{name}: the .ipynb is stale; run python notebooks/build.py {name[:2]}"


@pytest.mark.parametrize("name", EXECUTED)
def test_notebook_executes(name, tmp_path, monkeypatch):
    monkeypatch.setenv("SYMATTN_FIGDIR", str(tmp_path / "figures"))
    t0 = time.time()
    nb = _build().execute(NB_DIR / name, quick=True, cwd=tmp_path, timeout=240)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    figs = list((tmp_path / "figures").glob(f"{name[:-3]}_*.png"))
    assert figs, f"{name} saved no figure"
    # every notebook checks at least one number its text states (Notebook.states; a mismatch raises in the cell),
    # and that number is written in its Markdown
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                      if o.output_type == "stream")
    stated = re.findall(r"^states: .*\(text: ([^)]+)\)$", printed, flags=re.M)
    assert stated, f"{name} checks no number its text states"
    markdown = " ".join(c.source for c in nb.cells if c.cell_type == "markdown").replace("−", "-")
    for number in stated:
        assert re.search(rf"(?<![0-9.]){re.escape(number)}(?![0-9])", markdown), (name, number)
    print(f"{name}: {time.time() - t0:.1f} s")
