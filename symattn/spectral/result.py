"""The matrix-level flow's result: the theory columns, their ``_err``, the students' spectra."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class SpectralResult:
    """Columns of the theory CSV (docs/interface.md) plus ``<col>_err``; spectra of the students."""

    table: dict
    spectra: dict
    size: int
    seed: int
    spec_name: str = ""
    info: dict = field(default_factory=dict)

    @property
    def time(self) -> np.ndarray:
        return self.table["time"]

    def columns(self) -> list:
        return list(self.table)

    def to_csv(self, path):
        from ..integration import write_csv
        write_csv(self.table, path, digits=None)
        return Path(path)

    def __repr__(self):
        n = len(self.table.get("time", ()))
        return (f"<SpectralResult {self.spec_name}: matrix-level limit, N = {self.size}, "
                f"{self.info.get('rotations', 1)} realisation(s), ε = {self.info.get('epsilon') or 0:g}, {n} rows>")

    def _repr_html_(self):
        from ..integration import table_html
        return table_html(self.table, repr(self)[1:-1])

    def spectra_to_csv(self, path, quantiles=None, full: bool = False):
        """Rows (time, index); columns ``q_0.01 … q_0.99`` (empirical quantiles of the N eigenvalues),
        or with ``full=True`` all sorted eigenvalues ``e_0 … e_{N−1}``. Written atomically."""
        from ..files import atomic_write
        if quantiles is None:
            quantiles = np.round(np.arange(1, 100) / 100, 2)
        quantiles = np.asarray(quantiles, dtype=float)
        buf = io.StringIO()
        w = csv.writer(buf)
        n0 = next(iter(self.spectra.values())).shape[1] if self.spectra else 0
        head = [f"e_{i}" for i in range(n0)] if full else [f"q_{p:g}" for p in quantiles]
        w.writerow(["time", "index"] + head)
        for i, t in enumerate(self.time):
            for name, ev in self.spectra.items():
                vals = ev[i] if full else np.quantile(ev[i], quantiles)
                w.writerow([repr(float(t)), name] + [repr(float(v)) for v in vals])
        return atomic_write(path, buf.getvalue())
