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


def test_entry_points_are_plain_picklable_functions():
    """symattn.simulate & co. are functions (not modules made callable): they pickle by reference,
    show their real signatures, and the package root imports none of SymPy / Numba / matplotlib."""
    import inspect
    import pickle
    import subprocess
    import sys
    import types

    import cloudpickle
    for name in ("potential", "derive", "integrate", "simulate", "compare", "load_spec"):
        f = getattr(symattn, name)
        assert isinstance(f, types.FunctionType), name
        assert pickle.loads(pickle.dumps(f)) is f
        assert cloudpickle.loads(cloudpickle.dumps(f)) is f
    assert "dim" in inspect.signature(symattn.simulate).parameters
    assert "truncation" in inspect.signature(symattn.derive).parameters
    assert not (ROOT / "symattn" / "_callable.py").exists()
    code = "import sys, symattn; print(sorted(m for m in ('sympy', 'numba', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    # results pickle too (process pools, cluster executors)
    sim = symattn.simulate(SPEC, dim=20, seeds=1, time=0.002, points=2, progress=False)
    again = pickle.loads(pickle.dumps(sim))
    assert np.array_equal(again.table["q_student_teacher"], sim.table["q_student_teacher"])


def test_spec_is_immutable_comparable_hashable_and_private():
    a = symattn.load_spec("tied_softmax_L2")                     # shipped example by name
    b = symattn.load_spec(ROOT / "examples" / "tied_softmax_L2.toml")
    assert a == b and hash(a) == hash(b) and a.digest == b.digest and len(a.digest) == 64
    raw = {"name": "x", "model": {"tokens": 2, "activation": "softmax", "token_covariance": [[1, 0.3], [0.3, 1]]},
           "indices": [{"name": "s", "role": "student", "parameterization": "tied"},
                       {"name": "t", "role": "teacher", "parameterization": "tied"}]}
    s = symattn.load_spec(raw)
    assert s == s and {s: 1}[s] == 1
    raw["model"]["tokens"] = 5                                   # the caller's dict is not aliased
    assert s.raw["model"]["tokens"] == 2 and s.tokens == 2
    other = symattn.load_spec({**raw, "model": {**raw["model"], "tokens": 2, "beta": 2.0}})
    assert other != s and other.digest != s.digest
    import dataclasses
    try:
        s.tokens = 3
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("Spec is mutable")
