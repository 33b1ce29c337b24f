"""The Python surface of docs/interface.md: the documented entry points are callable from ``symattn``,
their tables carry the CSV columns, and compare's summary.json holds per-column deviations."""
import json
from pathlib import Path

import numpy as np

import symattn

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "examples" / "tied_linear_L1.toml"


def test_entry_points_and_tables(tmp_path):
    spec = symattn.load_spec(SPEC)
    P = symattn.potential(spec)
    assert P.names == ["q_student_student", "q_student_teacher", "q_teacher_teacher"]
    system = symattn.derive(spec, truncation=4)
    res = symattn.integrate(system, time=0.005, points=3, init="free")
    for col in ["time", "tr_student", "q_student_teacher", "p_student_teacher", "loss"]:
        assert col in res.table and len(res.table[col]) == 3
    # Φ column = Φ at the integrated order parameters (two routes to the same number)
    th = {n: res.table[n][-1] for n in P.names}
    assert np.isclose(res.table["loss"][-1], P.value(th), rtol=1e-12)
    sim = symattn.simulate(spec, dim=30, seeds=2, time=0.005, points=3, progress=False)
    assert "q_student_teacher_sem" in sim.table and sim.table["time"][0] == 0.0
    out = tmp_path / "cmp"
    summary = symattn.compare(spec, dim=30, seeds=2, time=0.005, points=3, out=out, progress=False)
    saved = json.loads((out / "summary.json").read_text())
    for col in ["tr_student", "q_student_teacher", "loss"]:
        assert set(saved[col]) >= {"max_abs_dev", "theory_range"}
        assert saved[col] == saved["columns"][col]
    assert (out / "comparison.png").stat().st_size > 0
    assert summary["dim"] == 30
