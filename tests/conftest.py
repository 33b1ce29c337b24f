"""Test configuration: single-threaded BLAS (reproducible sums, no oversubscription on 2 cores)."""
import os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("MPLBACKEND", "Agg")
