"""Test configuration: single-threaded BLAS (reproducible sums, no oversubscription on 2 cores), and the
``torch`` marker: a test that needs the optional PyTorch extra is skipped, with the reason, where it is not
installed (the README's test command runs on ``pip install -e '.[test]'`` alone; ``.ci/run`` runs the
``torch`` tests in a second step with the extra)."""
import importlib.util
import os

import pytest

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("MPLBACKEND", "Agg")

HAS_TORCH = importlib.util.find_spec("torch") is not None


def pytest_collection_modifyitems(config, items):
    if HAS_TORCH:
        return
    skip = pytest.mark.skip(reason="needs the optional torch extra (pip install -e '.[torch]')")
    for item in items:
        if "torch" in item.keywords:
            item.add_marker(skip)
