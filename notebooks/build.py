"""Execute the notebooks' jupytext sources (``NN_*.py``, py:percent) into their paired ``.ipynb``.

    python notebooks/build.py                 # every notebook, full quality (SYMATTN_QUICK=0)
    python notebooks/build.py 04 06           # only those whose name starts with 04 or 06
    python notebooks/build.py --quick         # quick mode (small d), as the tests run them

The ``.py`` file is the source one edits and reviews; the ``.ipynb`` is its executed copy, with the
outputs and figures (``notebooks/figures``). ``tests/test_notebooks.py`` checks that both hold the same
cells and executes each source in quick mode.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import jupytext
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent


def sources() -> list[Path]:
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def private_kernel(root: Path) -> str:
    """A kernelspec running *this* interpreter, found first through JUPYTER_PATH (a user-level
    ``python3`` kernelspec may point to another environment with its own checkout of the package)."""
    kdir = root / "kernels" / "symattn-python"
    kdir.mkdir(parents=True, exist_ok=True)
    (kdir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (symattn)", "language": "python"}))
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(root)] + [p for p in [os.environ.get("JUPYTER_PATH")] if p])
    return "symattn-python"


def execute(source: Path, quick: bool, cwd: Path = HERE, timeout: int = 1800):
    """Read ``source`` (py:percent) and run it in a fresh kernel (one BLAS thread); return the notebook."""
    nb = jupytext.read(source)
    saved = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "SYMATTN_QUICK", "JUPYTER_PATH")}
    os.environ["OPENBLAS_NUM_THREADS"] = "1"           # the kernel inherits this process's environment
    os.environ["SYMATTN_QUICK"] = "1" if quick else "0"
    try:
        with tempfile.TemporaryDirectory(prefix="symattn-kernel-") as kroot:
            kernel = private_kernel(Path(kroot))
            NotebookClient(nb, timeout=timeout, kernel_name=kernel,
                           resources={"metadata": {"path": str(cwd)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for i, cell in enumerate(nb.cells):                # stable cell ids: a rebuild diffs only where outputs change
        cell["id"] = f"{source.stem[:2]}-{i:03d}"
    return nb


def main(argv):
    quick = "--quick" in argv
    names = [a for a in argv if not a.startswith("--")]
    chosen = [p for p in sources() if not names or any(p.name.startswith(n) for n in names)]
    if names and not chosen:
        sys.exit(f"no notebook source matches {names}; known: {[p.stem for p in sources()]}")
    for src in chosen:
        t0 = time.time()
        nb = execute(src, quick)
        jupytext.write(nb, src.with_suffix(".ipynb"))
        print(f"{src.stem}: executed in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
