"""``TheoryTable``: the one result type of every theory method (docs/interface.md, "Python API")."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TheoryTable:
    """The theory's columns on its time grid (``time``, ``tr_a``, ``q_a_b``, ``p_a_b``, ``loss``, …, docs/interface.md)
    and, where the method estimates one, ``<col>_err``; with the run's validity and what produced it.

    ``valid_until``: the moment hierarchy's window (the first time its truncation and the companion one disagree);
    ``diverged_at``: the time a run stopped (rows after it are omitted); ``method`` and ``options``: the method that
    ran and every option it ran with (defaults filled in); ``info``: the method's own diagnostics; ``spectra``:
    the matrix-level method's eigenvalues per student (when asked for); ``result``: the method's own result object.
    """

    table: dict
    method: str
    options: dict
    spec_name: str = ""
    valid_until: float | None = None
    diverged_at: float | None = None
    info: dict = field(default_factory=dict)
    spectra: dict | None = None
    result: object = None

    def __getitem__(self, column: str) -> np.ndarray:
        return self.table[column]

    def __contains__(self, column: str) -> bool:
        return column in self.table

    @property
    def time(self) -> np.ndarray:
        return self.table["time"]

    @property
    def columns(self) -> list:
        """The value columns (``time`` first), without the ``_err`` columns."""
        return [c for c in self.table if not c.endswith("_err")]

    @property
    def errors(self) -> dict:
        """column → its ``_err`` (empty where the method estimates none)."""
        return {c[:-4]: v for c, v in self.table.items() if c.endswith("_err")}

    def to_csv(self, path, digits: int | None = 10):
        """The table as CSV, written atomically (``digits`` significant digits; None: exact round trip)."""
        from ..integration import write_csv
        write_csv(self.table, path, digits=digits)
        return path

    def to_pandas(self):
        """A ``pandas.DataFrame`` (needs pandas)."""
        pd = _optional("pandas", "to_pandas")
        return pd.DataFrame({c: np.asarray(v) for c, v in self.table.items()})

    def to_xarray(self):
        """An ``xarray.Dataset`` on the ``time`` coordinate, each ``_err`` column as the attribute-linked variable
        ``<col>_err``; the method and its options as attributes (needs the ``netcdf`` extra)."""
        xr = _optional("xarray", "to_xarray")
        t = np.asarray(self.time)
        data = {c: ("time", np.asarray(v)) for c, v in self.table.items() if c != "time"}
        attrs = {"method": self.method, "spec": self.spec_name,
                 **{f"option_{k}": (str(v) if v is None or isinstance(v, bool) else v) for k, v in self.options.items()}}
        for k in ("valid_until", "diverged_at"):
            if getattr(self, k) is not None:
                attrs[k] = float(getattr(self, k))
        return xr.Dataset(data, coords={"time": t}, attrs=attrs)

    def __repr__(self):
        n = len(self.table.get("time", ()))
        what = {"moments": f"moment hierarchy M = {self.options.get('truncation')}",
                "spectral": f"matrix-level limit, N = {self.options.get('size')} × {self.options.get('rotations')} "
                            f"realisation(s)"}.get(self.method, self.method)
        window = f", valid until τ = {self.valid_until:.4g}" if self.valid_until is not None else ""
        stop = f", diverged at τ = {self.diverged_at:.4g}" if self.diverged_at is not None else ""
        return f"<TheoryTable {self.spec_name}: {what}, {n} rows{window}{stop}>"

    def _repr_html_(self):
        from ..integration import table_html
        return table_html(self.table, repr(self)[1:-1])


def _optional(module: str, what: str):
    import importlib

    from ..errors import UsageError
    try:
        return importlib.import_module(module)
    except ImportError:
        extra = " (pip install 'symattn[netcdf]')" if module == "xarray" else ""
        raise UsageError(f"{what}: needs {module}, which is not installed{extra}") from None
