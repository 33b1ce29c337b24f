"""Hostile input, the families of issue #43 (tried as a new user would), one test per family: every case ends with
the behaviour the project promises — one line and exit 2 for bad input, 3 for a numerical failure, 130/143 for an
interrupt, no traceback, no wrong number with exit 0, no destroyed or half-written file — by the general mechanism
(``symattn.files`` for outputs and inputs, ``symattn.limits`` for option limits, the spec's checks for expressions).
Refusals come before the work; the work a command started is counted (``work``), never timed.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from symattn.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "examples" / "tied_h2_L1_small.toml").read_text()


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code, err, expected):
    lines = err.strip().splitlines()
    assert code == expected, (code, err)
    assert len(lines) == 1 and lines[0].startswith("symattn:") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path / "cache"))
    (tmp_path / "my.toml").write_text(BASE)
    return tmp_path


@pytest.fixture
def work(monkeypatch):
    """The expensive work a command started (a quadrature, a derivation, an SGD step, a matrix-level flow)."""
    started = []

    def spy(owner, attr, label):
        orig = getattr(owner, attr)
        monkeypatch.setattr(owner, attr, lambda *a, **k: started.append(label) or orig(*a, **k))
    from symattn import derivation
    from symattn.simulation import sgd
    from symattn.spectral.field import Flow
    from symattn.symbolic import calibration
    spy(calibration, "adaptive_orders", "quadrature")
    spy(derivation, "derive", "derivation")
    spy(sgd.Model, "step", "sgd")
    spy(Flow, "__init__", "flow")
    return started


THEORY = ["theory", "my.toml", "--time", "0.01", "--points", "3", "--quiet"]


# ------------------------------------------------------------------ special outputs are written through, not replaced
def test_special_outputs_are_written_through(here, capsys):
    if os.access("/dev/null", os.W_OK):
        assert main([*THEORY, "--out", "/dev/null"]) == 0
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)                     # still the device
    (here / "real.csv").write_text("old\n")
    os.symlink("real.csv", here / "link.csv")
    assert main([*THEORY, "--out", "link.csv"]) == 0
    assert os.path.islink(here / "link.csv") and (here / "real.csv").read_text().startswith("time,")
    capsys.readouterr()
    os.mkfifo(here / "pipe")
    line = _one_line(*_run([*THEORY, "--out", "pipe"], capsys)[::2], 2)       # no reader: refused, never blocks
    assert "named pipe with no reader" in line and stat.S_ISFIFO(os.stat(here / "pipe").st_mode)
    got, ready = [], threading.Event()

    def read_pipe():          # a reader from its non-blocking open on, so the run below finds one (no sleep)
        fd = os.open(here / "pipe", os.O_RDONLY | os.O_NONBLOCK)
        ready.set()
        os.set_blocking(fd, True)
        chunks, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                chunks.append(chunk)
            elif chunks:                   # end of file after the writer wrote and closed
                break
            else:                          # end of file before any writer opened: wait for it
                time.sleep(0.01)
        os.close(fd)
        got.append(b"".join(chunks).decode())
    reader = threading.Thread(target=read_pipe)
    reader.start()
    assert ready.wait(60)
    assert main([*THEORY, "--out", "pipe"]) == 0
    reader.join(timeout=60)
    assert got and got[0].startswith("time,") and stat.S_ISFIFO(os.stat(here / "pipe").st_mode)
    capsys.readouterr()
    _one_line(*_run([*THEORY, "--out", ""], capsys)[::2], 2)                  # '' is no silent stdout


# ------------------------------------------------------------------ an output that is an input of the run
@pytest.mark.parametrize("argv", [[*THEORY, "--out", "my.toml"], ["derive", "my.toml", "--out", "my.toml", "--quiet"],
                                  [*THEORY, "--out", "eig.txt"]])
def test_an_input_is_never_overwritten(argv, here, capsys):
    (here / "eig.txt").write_text("1 2 3 4\n")
    if "eig.txt" in argv:
        (here / "my.toml").write_text(BASE.replace('activation = "h2"', 'activation = "h2"\nfeature_covariance = '
                                                   '{law = "file", path = "eig.txt"}'))
    before = {p: (here / p).read_text() for p in ("my.toml", "eig.txt")}
    line = _one_line(*_run(argv, capsys)[::2], 2)
    assert "is an input of this run" in line
    assert {p: (here / p).read_text() for p in before} == before


# ------------------------------------------------------------------ inputs read with a bound, regular files only
def test_unbounded_and_blocking_inputs_are_refused(here, capsys, work):
    os.mkfifo(here / "spec.fifo")
    for spec in ("/dev/zero", "spec.fifo"):
        line = _one_line(*_run(["potential", spec], capsys)[::2], 2)
        assert "not a regular file" in line
    (here / "f.toml").write_text(BASE.replace('activation = "h2"', 'activation = "h2"\nfeature_covariance = '
                                              '{law = "file", path = "/dev/zero"}'))
    assert "not a regular file" in _one_line(*_run(["potential", "f.toml"], capsys)[::2], 2)
    (here / "env.txt").write_text("SECRET_TOKEN=abc123 HOME=/root\n")
    (here / "g.toml").write_text(BASE.replace('activation = "h2"', 'activation = "h2"\nfeature_covariance = '
                                              '{law = "file", path = "env.txt"}'))
    line = _one_line(*_run(["potential", "g.toml"], capsys)[::2], 2)
    assert "SECRET" not in line and "abc123" not in line and "not a number" in line     # the file is not echoed
    assert "not a regular file" in _one_line(*_run(["sweep", "/dev/zero", "--out", "sw"], capsys)[::2], 2)
    assert work == []


# ------------------------------------------------------------------ interrupts and failures say what was written
def test_interrupted_or_full_compare_names_the_files_it_wrote(here, capsys, monkeypatch):
    from symattn import comparison
    argv = ["compare", "my.toml", "--dim", "20", "--seeds", "2", "--time", "0.01", "--points", "3", "--out", "cmp",
            "--quiet"]

    def interrupt(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(comparison, "plot", interrupt)                     # after theory.csv and simulation.csv
    line = _one_line(*_run(argv, capsys)[::2], 130)
    assert "cmp/theory.csv" in line and "cmp/simulation.csv" in line and "no output file" not in line

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(here / "cmp" / "comparison.png"))
    monkeypatch.setattr(comparison, "plot", full)
    line = _one_line(*_run(argv, capsys)[::2], 2)
    assert "No space left" in line and "written before it" in line and "theory.csv" in line

    def swallowed(*a, **k):                  # an interrupt met inside a C extension surfaces as SystemError
        from symattn.files import PENDING_SIGNALS
        PENDING_SIGNALS.append(KeyboardInterrupt)
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("<built-in function> returned a result with an exception set") from None
    monkeypatch.setattr(comparison, "plot", swallowed)
    assert "interrupted" in _one_line(*_run(argv, capsys)[::2], 130)
    assert not [p for p in (here / "cmp").iterdir() if p.name.startswith(".")]      # no temporary file left


def _cli(args, cwd):
    return subprocess.Popen([sys.executable, "-m", "symattn", *map(str, args)], cwd=cwd, text=True,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="1", SYMATTN_CACHE=str(cwd / "cache")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_into_a_parallel_sweep_stops_it(sig, code, here):
    # 48 tasks (≈ 3 s on 2 jobs, idle): the signal must land while tasks remain even when this process is slow to
    # notice the first result (with 12 the whole sweep took ≈ 0.8 s and a loaded run once finished it first)
    seeds = ", ".join(map(str, range(48)))
    (here / "grid.toml").write_text('spec = "my.toml"\ncommand = "simulate"\ntime = 0.3\npoints = 3\n'
                                    f'[grid]\ndim = [40]\nseed = [{seeds}]\n')
    proc = _cli(["sweep", "grid.toml", "--out", "sw", "--jobs", "2", "--quiet"], here)
    deadline = time.monotonic() + 120                       # a guard against a hang, not a timing assertion
    while time.monotonic() < deadline and not list((here / "sw").glob("*.json")) and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and "tasks complete" in last, err
    done = [p for p in (here / "sw").glob("*.json")]
    assert 1 <= len(done) < 48 and not [p for p in (here / "sw").iterdir() if p.name.startswith(".")]
    for p in done:                                           # every task file it left is complete
        task = json.loads(p.read_text())
        assert (here / "sw" / f"{task['id']}.csv").read_text().startswith("time,")


# ------------------------------------------------------------------ unbounded work is refused up front or fails at once
@pytest.mark.parametrize("argv,needle", [
    ([*THEORY[:2], "--time", "1e300"], "--time"), ([*THEORY[:2], "--points", "100000000"], "--points"),
    (["simulate", "my.toml", "--dim", "20", "--seeds", "100000"], "--seeds"),
    (["potential", "my.toml", "--tol", "1e-300"], "--tol"),
    ([*THEORY[:2], "--method", "spectral", "--realisations", "1000000"], "--realisations"),
])
def test_unbounded_options_are_refused_naming_the_option(argv, needle, here, capsys, work):
    assert needle in _one_line(*_run(argv, capsys)[::2], 2) and work == []


@pytest.mark.parametrize("act,needle", [("exp(exp(exp(exp(exp(exp(z))))))", "double precision"),
                                        ("(z**16)**16", "exponent beyond 16")])
def test_expressions_that_would_run_without_end_are_refused(act, needle, here, capsys, work):
    (here / "a.toml").write_text(BASE.replace('activation = "h2"', f"activation = '''{act}'''"))
    assert needle in _one_line(*_run(["potential", "a.toml"], capsys)[::2], 2) and work == []


def test_a_grid_of_a_million_tasks_is_refused(here, capsys, work):
    seeds = ", ".join(map(str, range(1000)))
    (here / "big.toml").write_text(f'spec = "my.toml"\ncommand = "theory"\ntime = 0.1\npoints = 3\n'
                                   f'[grid]\nseed = [{seeds}]\n"training.noise_ratio" = [{", ".join(["0.01"] * 1000)}]\n')
    assert "at most 100000" in _one_line(*_run(["sweep", "big.toml", "--out", "sw"], capsys)[::2], 2)
    assert not (here / "sw").exists() and work == []


@pytest.mark.parametrize("method", [[], ["--noise", "off"], ["--method", "moments", "--truncation", "4"]])
def test_an_overflowing_gradient_is_a_numerical_failure_at_once(method, here, capsys):
    """exp(300)·z: Φ's gradient is ~1e260; every theory method exits 3 naming the time, without writing numbers
    (before, the default theory stepped on NaN for minutes)."""
    (here / "a.toml").write_text(BASE.replace('activation = "h2"', "activation = 'exp(300)*z'"))
    line = _one_line(*_run(["theory", "a.toml", "--time", "0.1", "--points", "3", "--quiet", "--out", "x.csv", *method],
                           capsys)[::2], 3)
    assert "time" in line and not (here / "x.csv").exists()


# ------------------------------------------------------------------ impossible order parameters, non-real activations
@pytest.mark.parametrize("at", ["q_student_teacher=5", "q_student_student=-1"])
def test_order_parameters_outside_the_gram_set_are_refused(at, here, capsys):
    assert "Gram" in _one_line(*_run(["potential", "my.toml", "--at", at], capsys)[::2], 2)


def test_an_activation_not_real_beyond_the_check_grid_is_refused(here, capsys, work):
    (here / "a.toml").write_text(BASE.replace('activation = "h2"', "activation = 'sqrt(36.0001 - z**2)'"))
    assert "not a real number for z in" in _one_line(*_run(["potential", "a.toml"], capsys)[::2], 2) and work == []


# ------------------------------------------------------------------ no internal error (exit 1)
def test_inputs_that_crashed_are_one_line(here, capsys):
    (here / "a.toml").write_text(BASE.replace("batch_size = 64", "batch_size = " + "9" * 400))
    assert "out of range" in _one_line(*_run(["potential", "a.toml"], capsys)[::2], 2)
    (here / "b.toml").write_text(BASE.replace("noise_ratio = 0.005", "learning_rate = 1e-300"))
    assert "SGD steps" in _one_line(*_run(["simulate", "b.toml", "--dim", "20", "--time", "0.1"], capsys)[::2], 2)
    (here / "sw").mkdir()
    (here / "sw" / "abc.json").write_text('{"id": "abc", "settings": {')             # truncated task record
    assert "not a complete task record" in _one_line(*_run(["collect", "sw", "--out", "t.csv"], capsys)[::2], 2)


# ------------------------------------------------------------------ no false or silent behaviour
def test_false_or_silent_behaviour_is_gone(here, capsys):
    (here / "flat.toml").write_text(BASE.replace('activation = "h2"', f"activation = '{'+'.join(['z'] * 62)}'"))
    assert main(["potential", "flat.toml", "--quiet"]) == 0                      # a flat sum is no nesting
    (here / "half.toml").write_text(BASE.replace('activation = "h2"', "activation = 'Abs(z)**0.5'"))
    from symattn.spec import load_spec
    from symattn.symbolic.loss import build_loss
    build_loss(load_spec(here / "half.toml")).require_pathwise_gradient()      # continuous: not a jump
    capsys.readouterr()
    line = _one_line(*_run(["theory", "untied_h2_L1", "--fast", "--method", "spectral"], capsys)[::2], 2)
    assert "--method" in line
    pytest.importorskip("submitit")
    import shutil
    if shutil.which("sbatch") is None:
        (here / "grid.toml").write_text('spec = "my.toml"\ncommand = "theory"\ntime = 0.01\npoints = 3\n'
                                        '[grid]\nseed = [0]\n')
        assert "no SLURM" in _one_line(*_run(["sweep", "grid.toml", "--out", "sw", "--executor", "slurm"],
                                             capsys)[::2], 2)


def test_a_tiny_legal_scale_gives_the_flat_answer(here, capsys):
    """σ = 1e-30: the student is (numerically) zero and stays so; the default theory (the noisy matrix-level flow,
    in float64 where float32 products would underflow) and the hierarchy agree on the flat answer."""
    from symattn.integration import read_csv
    (here / "t.toml").write_text(BASE.replace("init_scale = 0.5", "init_scale = 1e-30", 1))
    assert main(["theory", "t.toml", "--time", "0.1", "--points", "3", "--quiet", "--out", "a.csv"]) == 0
    assert main(["theory", "t.toml", "--time", "0.1", "--points", "3", "--quiet", "--out", "b.csv", "--method",
                 "moments", "--truncation", "4"]) == 0
    a, b = read_csv(here / "a.csv"), read_csv(here / "b.csv")
    for c in ("tr_student", "q_student_student"):                 # the student: flat, at its tiny scale
        assert abs(a[c][-1] - b[c][-1]) <= 1e-3 * abs(b[c][-1]), (c, a[c], b[c])
        assert abs(a[c][-1] - a[c][0]) <= 1e-6 * abs(a[c][0])
    assert abs(a["loss"][-1] - b["loss"][-1]) <= 3 * a["loss_err"][-1]   # the teacher's term, to its O(1/N) error
