"""Sweeps: grid → tasks → per-task files → collected table (symattn sweep / collect).

1. A 2 ε × 2 d × 2 seeds sweep with the local executor, then collect: every per-seed value equals
   the table of ``simulate`` called directly for that task (same seed contract, bit for bit), and
   the collected means/SEMs are those of the per-seed values.
2. Rerunning the sweep skips every task and leaves the files untouched.
3. A sweep killed midway leaves only complete tasks for collect (and hidden temporary files).
4. The slurm path runs through submitit's local executor; without submitit it exits 2 in one line.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from symattn.cli import main
from symattn.integration import read_csv
from symattn.simulation import simulate
from symattn.spec import load_spec
from symattn.sweeps import collect, expand, load_grid, sweep

GRID = """
spec = "tied_h2_L1_small"
command = "simulate"
time = 0.01
points = 3
[grid]
"training.noise_ratio" = [0.005, 0.01]
dim = [20, 30]
seed = [0, 1]
"""


def _grid(tmp_path, text=GRID, name="grid.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_local_sweep_equals_direct_simulations_and_resumes(tmp_path):
    grid = _grid(tmp_path)
    out = tmp_path / "out"
    res = sweep(grid, out, executor="local", jobs=2, progress=False)
    assert res == {"tasks": 8, "ran": 8, "skipped": 0, "out": str(out)}
    per = collect(out, per_seed=True)
    for eps in (0.005, 0.01):
        for d in (20, 30):
            for s in (0, 1):
                spec = load_spec("tied_h2_L1_small", settings={"training.noise_ratio": eps})
                want = simulate(spec, dim=d, seeds=1, seed0=s, time=0.01, points=3, workers=1, progress=False).table
                rows = [i for i in range(len(per["time"]))
                        if per["training.noise_ratio"][i] == eps and per["dim"][i] == d and per["seed"][i] == s]
                assert len(rows) == 3
                for c in ("q_student_teacher", "q_student_student", "tr_student", "loss"):
                    assert [per[c][i] for i in rows] == list(want[c]), (eps, d, s, c)
    mean = collect(out, tmp_path / "t.csv")
    table = read_csv(tmp_path / "t.csv")
    assert len(table["time"]) == 4 * 3 and set(mean["seeds"]) == {2}
    i = 5                                               # any row: mean and SEM of its two seeds
    vals = [per["q_student_teacher"][j] for j in range(len(per["time"]))
            if per["dim"][j] == mean["dim"][i] and per["training.noise_ratio"][j] == mean["training.noise_ratio"][i]
            and per["time"][j] == mean["time"][i]]
    assert len(vals) == 2
    assert mean["q_student_teacher"][i] == pytest.approx(np.mean(vals), rel=1e-14)
    assert mean["q_student_teacher_sem"][i] == pytest.approx(np.std(vals, ddof=1) / np.sqrt(2), rel=1e-12)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = sweep(grid, out, executor="local", jobs=2, progress=False)
    assert again["ran"] == 0 and again["skipped"] == 8
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == stamps


def test_task_ids_depend_on_everything_and_specs_are_validated(tmp_path):
    tasks = expand(load_grid(_grid(tmp_path)))
    assert len({t["id"] for t in tasks}) == 8
    bad = _grid(tmp_path, GRID.replace('"training.noise_ratio"', '"training.speed"'), "bad.toml")
    code = main(["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert code == 2


def test_killed_sweep_leaves_only_complete_tasks(tmp_path):
    grid = _grid(tmp_path, GRID.replace("time = 0.01", "time = 0.2").replace("points = 3", "points = 5")
                 .replace("seed = [0, 1]", "seed = [0, 1, 2, 3]"))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "symattn", "sweep", str(grid), "--out", str(out), "--jobs", "1",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120 and len(list(out.glob("*.json"))) < 1:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = [p for p in out.glob("*.json") if not p.name.startswith(".")]
    assert 1 <= len(done) < 16
    table = collect(out, per_seed=True)
    assert len(table["time"]) == 5 * len(done)           # every collected task is whole
    visible = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert len(visible) <= 2 * len(done) + 1             # at most one CSV without its JSON (never read)


def test_slurm_path_through_submitit_local_executor(tmp_path):
    pytest.importorskip("submitit")
    text = GRID.replace("dim = [20, 30]", "dim = [20]").replace("seed = [0, 1]", "seed = [0]") + \
        '[executor]\nname = "slurm"\ncluster = "local"\ntimeout_min = 10\n'
    out = tmp_path / "out"
    res = sweep(_grid(tmp_path, text), out, progress=False)
    assert res["ran"] == 2
    direct = sweep(_grid(tmp_path, text.replace('name = "slurm"', 'name = "local"'), "g2.toml"), tmp_path / "o2",
                   progress=False)
    assert direct["ran"] == 2
    a, b = collect(out, per_seed=True), collect(tmp_path / "o2", per_seed=True)
    assert a["q_student_teacher"] == b["q_student_teacher"]


def test_slurm_without_submitit_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "submitit", None)
    code = main(["sweep", str(_grid(tmp_path)), "--out", str(tmp_path / "o"), "--executor", "slurm"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install" in err[0], err


def test_log_time_grids(tmp_path, capsys):
    code = main(["theory", "tied_h2_L1_small", "--time", "0.01", "--points", "4", "--log-time", "--quiet",
                 "--out", str(tmp_path / "t.csv")])
    assert code == 0
    t = read_csv(tmp_path / "t.csv")["time"]
    assert t[0] == 0 and np.allclose(t[1:], [1e-5, 10 ** -3.5, 1e-2])
    res = simulate("tied_h2_L1_small", dim=40, time=0.2, points=5, log_time=True, progress=False)
    steps = res.steps
    assert steps[0] == 0 and np.all(np.diff(steps) > 0) and steps[-1] == res.info["steps_total"]
    ratios = steps[2:] / steps[1:-1]
    assert np.allclose(ratios, ratios[0], rtol=0.1)      # log-spaced up to the snapping to whole steps
    assert Path(tmp_path / "t.csv").exists()


def test_diverging_tasks_are_recorded_and_counted(tmp_path):
    """A run that diverges is an outcome of the scan (a stability map), not a failed sweep: its task
    records the divergence time, is not rerun, and collect counts it per grid point."""
    text = GRID.replace('"training.noise_ratio" = [0.005, 0.01]',
                        '"training.noise_ratio" = [0.05]\n"indices.student.init_scale" = [0.5, 2.0]') \
               .replace("time = 0.01", "time = 0.05").replace("dim = [20, 30]", "dim = [20]")
    out = tmp_path / "out"
    res = sweep(_grid(tmp_path, text), out, executor="local", jobs=1, progress=False)
    assert res["ran"] == 4
    table = collect(out)
    stable = [i for i, e in enumerate(table["indices.student.init_scale"]) if e == 0.5]
    unstable = [i for i, e in enumerate(table["indices.student.init_scale"]) if e == 2.0]
    assert {table["diverged"][i] for i in stable} == {0} and {table["seeds"][i] for i in stable} == {2}
    assert [table["diverged"][i] for i in unstable] == [2] and table["seeds"][unstable[0]] == 0
    assert 0 < table["diverged_at_min"][unstable[0]] < 0.05
    again = sweep(_grid(tmp_path, text), out, executor="local", jobs=1, progress=False)
    assert again["ran"] == 0


def test_theory_tasks_run_what_theory_runs_and_tables_are_grid_values(tmp_path):
    """A theory task is `theory`'s own run (auto: the matrix level for a tied student, the exact flow with
    exact_finite_d), the law and the schedule may be grid values (tables), and collect writes them quoted."""
    import csv

    from symattn.derivation.finite_d import solve_finite_d
    from symattn.methods import DEFAULT_ROTATIONS, DEFAULT_SIZE
    from symattn.spectral import solve_spectral
    law = {"law": "two_level", "ratio": 3.0, "weight": 0.25}
    sched = {"kind": "cosine", "horizon": 0.02}
    text = ('spec = "tied_h2_L1_small"\ncommand = "theory"\ntime = 0.02\npoints = 3\n[grid]\n'
            '"model.feature_covariance" = ["identity", {law = "two_level", ratio = 3.0, weight = 0.25}]\n'
            '"training.schedule" = [{kind = "cosine", horizon = 0.02}]\n')
    out = tmp_path / "th"
    assert sweep(_grid(tmp_path, text), out, executor="local", jobs=1, progress=False)["tasks"] == 2
    got = collect(out, per_seed=True)
    spec = load_spec("tied_h2_L1_small", settings={"model.feature_covariance": law, "training.schedule": sched})
    want = solve_spectral(spec, time=0.02, points=3, size=DEFAULT_SIZE, rotations=DEFAULT_ROTATIONS,
                          epsilon=spec.epsilon(None), spectra=False).table
    rows = [i for i, v in enumerate(got["model.feature_covariance"]) if v != "identity"]
    assert np.allclose([got["q_student_teacher"][i] for i in rows], want["q_student_teacher"], rtol=0, atol=1e-12)
    collect(out, out=tmp_path / "t.csv")
    cells = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert {c["model.feature_covariance"] for c in cells} == {"identity", json.dumps(law, sort_keys=True)}
    text_fd = text.replace('command = "theory"', 'command = "theory"\nexact_finite_d = true') + "dim = [12]\nseed = [1]\n"
    out = tmp_path / "fd"
    sweep(_grid(tmp_path, text_fd, "fd.toml"), out, executor="local", jobs=1, progress=False)
    got = collect(out, per_seed=True)
    rows = [i for i, v in enumerate(got["model.feature_covariance"]) if v != "identity"]
    exact = solve_finite_d(spec, 12, time=0.02, points=3, seed=1)
    assert np.allclose([got["q_student_student"][i] for i in rows], exact["q_student_student"], rtol=0, atol=1e-12)
    bad = _grid(tmp_path, text.replace('command = "theory"', 'command = "theory"\nexact_finite_d = true'), "b.toml")
    with pytest.raises(Exception, match="exact_finite_d"):
        load_grid(bad)
