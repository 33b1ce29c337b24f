"""Execute every notebook of ``notebooks/`` in quick mode (issue 7).

Each notebook is run with nbclient in a fresh kernel of the interpreter running the tests (a private
kernelspec, see ``private_kernel``) with ``SYMATTN_QUICK=1`` (small d, few seeds, short horizons) and
``OPENBLAS_NUM_THREADS=1``; figures and the executed copy go to a temporary
directory, so the committed outputs in ``notebooks/`` are never touched. A cell raising fails the test.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NB_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("[0-9][0-9]_*.ipynb"))
TIMEOUT = 240          # per cell, seconds (quick mode needs far less)


def test_notebooks_present():
    assert len(NOTEBOOKS) >= 7, NOTEBOOKS


def private_kernel(root: Path, monkeypatch) -> str:
    """A kernelspec running this interpreter, found first via JUPYTER_PATH (a user-level ``python3``
    kernelspec may point to another environment, e.g. a CI venv with its own checkout of the package)."""
    kdir = root / "kernels" / "symattn-python"
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (symattn)", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join([str(root)] + [p for p in [os.environ.get("JUPYTER_PATH")] if p]))
    return "symattn-python"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_executes(name, tmp_path, monkeypatch):
    monkeypatch.setenv("SYMATTN_QUICK", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.setenv("SYMATTN_FIGDIR", str(tmp_path / "figures"))
    kernel = private_kernel(tmp_path / "jupyter", monkeypatch)
    nb = nbformat.read(NB_DIR / name, as_version=4)
    for cell in nb.cells:                      # run from a clean state, not the committed outputs
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    client = nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name=kernel,
                                     resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.time()
    client.execute()                           # raises CellExecutionError if a cell fails
    nbformat.write(nb, tmp_path / name)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    figs = list((tmp_path / "figures").glob(f"{name[:-6]}_*.png"))
    assert figs, f"{name} saved no figure"
    print(f"{name}: {time.time() - t0:.1f} s")
