"""Fault injection: hostile specs, bad options and bad conditions, as a new user would try them.

Every case runs through every command it applies to and must end with the expected exit status
(2: bad input, 3: numerical failure, 130: interrupt), exactly one line on stderr, no traceback,
and no file created outside the output path. The code-execution attempts additionally assert
that their side effect (creating a marker file) did not happen. Most cases run in-process
(``symattn.cli.main``), the signal, concurrency and read-only cases as real processes.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from symattn.cli import main
from symattn.codegen.systems import source

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "examples" / "tied_h2_L1_small.toml").read_text()
COMMANDS = {
    "potential": ["potential", "{spec}"],
    "derive": ["derive", "{spec}", "--out", "{tmp}/out.py"],
    "theory": ["theory", "{spec}", "--time", "0.01", "--points", "3", "--out", "{tmp}/out.csv"],
    "simulate": ["simulate", "{spec}", "--dim", "20", "--time", "0.01", "--points", "2", "--out", "{tmp}/out.csv"],
    "compare": ["compare", "{spec}", "--dim", "20", "--seeds", "1", "--time", "0.01", "--points", "2",
                "--out", "{tmp}/cmp"],
}
SPEC_COMMANDS = list(COMMANDS)


def edit(old, new, text=BASE):
    assert old in text, old
    return text.replace(old, new, 1)


def activation(expr):
    return edit('activation = "h2"', f"activation = '''{expr}'''")


def loss(expr):
    return edit('activation = "h2"', f"activation = \"h2\"\nloss = '''{expr}'''")


MARK = "/tmp/symattn_fault_marker"
# -- code execution attempts: the spec strings reach no eval (the marker file must never appear)
CODE = {
    "import_os_activation": activation(f"__import__('os').system('touch {MARK}')"),
    "import_os_loss": loss(f"G_1_1_1**2 + 0*__import__('os').system('touch {MARK}')"),
    "eval_activation": activation("eval('1+1')*z"),
    "subclasses_loss": loss("G_1_1_1 + 0*len(().__class__.__base__.__subclasses__())"),
    "open_activation": activation(f"z + 0*len(open('{MARK}', 'w').name)"),
    "exec_loss": loss(f"G_1_1_1 + 0*exec('open(\"{MARK}\",\"w\")')"),
    "lambda_activation": activation("(lambda: z)()"),
    "getattr_activation": activation("getattr(z, 'func')"),
    "dunder_name": activation("__builtins__"),
    "string_constant": activation("z + 'a'"),
    "fstring": activation("f'{z}'"),
    "comprehension": activation("sum([z for _ in range(10**9)])"),
    "sympify_call": activation(f"sympify('__import__(\"os\").system(\"touch {MARK}\")')"),
    "symbol_factory": activation("Symbol('x')"),
    "function_injection": activation("Function('f')(z)"),
    "attribute_on_number": activation("(1).__class__"),
    "subscript": activation("z[0]"),
    "walrus": activation("(x := z)"),
    "keyword_call": activation("exp(x=z)"),
}
# -- malformed or impossible specs (exit 2, one line, before any work)
BAD_SPEC = {
    "huge_power": activation("z**100000"),
    "deep_nesting": activation("exp(" * 200 + "z" + ")" * 200),
    "very_long": activation("+".join(["z"] * 5000)),
    "singular_activation": activation("1/z"),
    "log_activation": activation("log(z)"),
    "sqrt_activation": activation("sqrt(z)"),
    "division_by_zero": activation("z/0"),
    "unknown_function": activation("sigmoid(z)"),
    "unknown_symbol": activation("z + y"),
    "empty_activation": activation(" "),
    "loss_unknown_symbol": loss("G_1_1_1 + x"),
    "loss_out_of_range": loss("G_9_9_9**2"),
    "loss_constant": loss("3"),
    "loss_singular": loss("1/G_1_1_1"),
    "tokens_1000": edit("tokens = 1", "tokens = 1000"),
    "tokens_1e18": edit("tokens = 1", "tokens = 1000000000000000000"),
    "tokens_zero": edit("tokens = 1", "tokens = 0"),
    "tokens_fraction": edit("tokens = 1", "tokens = 1.5"),
    "truncation_40": edit("truncation = 8", "truncation = 40"),
    "truncation_fraction": edit("truncation = 8", "truncation = 4.5"),
    "truncation_one": edit("truncation = 8", "truncation = 1"),
    "batch_1e12": edit("batch_size = 64", "batch_size = 1000000000000"),
    "batch_zero": edit("batch_size = 64", "batch_size = 0"),
    "width_1e9": edit("width = 1.0", "width = 1e9"),
    "width_negative": edit("width = 1.0", "width = -1.0"),
    "beta_huge": edit('activation = "h2"', 'activation = "softmax"\nbeta = 1e300').replace("tokens = 1", "tokens = 2"),
    "beta_inf": edit('activation = "h2"', 'activation = "softmax"\nbeta = inf').replace("tokens = 1", "tokens = 2"),
    "weight_decay_1e300": edit("weight_decay = 0.0", "weight_decay = 1e300"),
    "weight_decay_negative": edit("weight_decay = 0.0", "weight_decay = -1.0"),
    "noise_negative": edit("noise_ratio = 0.005", "noise_ratio = -0.1"),
    "noise_nan": edit("noise_ratio = 0.005", "noise_ratio = nan"),
    "both_rates": edit("noise_ratio = 0.005", "noise_ratio = 0.005\nlearning_rate = 0.1"),
    "init_scale_huge": edit("init_scale = 0.5", "init_scale = 1e200"),
    "twelve_indices": BASE + "".join(f'\n[[indices]]\nname = "t{i}"\nrole = "teacher"\nparameterization = "tied"\n'
                                     for i in range(10)),
    "unknown_key": edit("[model]", "[model]\nfoo = 1"),
    "unknown_table": BASE + "\n[extra]\nx = 1\n",
    "identity_student": edit('parameterization = "tied"', 'parameterization = "identity"'),
    "unknown_parameterization": edit('parameterization = "tied"', 'parameterization = "magic"'),
    "duplicate_names": BASE.replace('name = "teacher"', 'name = "student"'),
    "path_in_name": edit('name = "tied_h2_L1_small"', 'name = "../../etc/passwd"'),
    "no_indices": BASE[:BASE.index("[[indices]]")] + "[training]\nbatch_size = 1\n",
    "no_student": BASE.replace('role = "student"', 'role = "teacher"'),
    "covariance_not_psd": edit("tokens = 1", 'tokens = 2\ntoken_covariance = [[1.0, 2.0], [2.0, 1.0]]'),
    "covariance_shape": edit("tokens = 1", 'tokens = 2\ntoken_covariance = [[1.0]]'),
    "covariance_text": edit("tokens = 1", 'tokens = 2\ntoken_covariance = "diagonal"'),
    "malformed_toml": "name = \n[model",
    "empty_file": "",
    "array_instead_of_table": "name = 'x'\nmodel = [1, 2]\n",
}


def _write_spec(tmp_path, text, name="spec.toml"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _run(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line(code, err, expected):
    lines = err.strip().splitlines()
    assert code == expected, (code, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("symattn:"), err


def _files(folder: Path) -> set:
    return {p.relative_to(folder) for p in folder.rglob("*")}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A clean cwd (files created there are visible) and an isolated module cache."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path / "cache"))
    return cwd


@pytest.fixture
def work(monkeypatch):
    """What of the model's work a command started: a Gaussian expectation (Φ, ν) built, a quadrature calibrated,
    a hierarchy derived, an SGD run begun. A refusal "before any work" leaves it empty — counted, not timed
    (a clock in a test turns a loaded CI machine red at random)."""
    started = []

    def spy(owner, attr, label):
        orig = getattr(owner, attr)

        def wrapped(*a, **k):
            started.append(label)
            return orig(*a, **k)
        monkeypatch.setattr(owner, attr, wrapped)
    from symattn import derivation
    from symattn.derivation import potential as pot
    from symattn.simulation import sgd
    from symattn.symbolic import calibration
    spy(pot.GaussianExpectation, "__init__", "expectation")
    spy(calibration, "adaptive_orders", "quadrature")
    spy(derivation, "derive", "derivation")
    spy(sgd.Model, "step", "sgd")
    return started


@pytest.mark.parametrize("case", sorted(CODE))
def test_code_execution_attempts_are_refused(case, tmp_path, workdir, capsys):
    if os.path.exists(MARK):
        os.unlink(MARK)
    spec = _write_spec(tmp_path, CODE[case])
    for cmd in SPEC_COMMANDS:
        argv = [a.format(spec=spec, tmp=tmp_path) for a in COMMANDS[cmd]]
        code, _, err = _run(argv, capsys)
        _assert_one_line(code, err, 2)
        assert "model.activation" in err or "model.loss" in err, err
        assert not os.path.exists(MARK), f"{case} via {cmd} ran code"
    assert _files(workdir) == set()
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("case", sorted(BAD_SPEC))
def test_bad_specs_are_refused_in_one_line(case, tmp_path, workdir, capsys, work):
    spec = _write_spec(tmp_path, BAD_SPEC[case])
    for cmd in SPEC_COMMANDS:
        argv = [a.format(spec=spec, tmp=tmp_path) for a in COMMANDS[cmd]]
        code, _, err = _run(argv, capsys)
        _assert_one_line(code, err, 2)
        assert work == [], f"{case} via {cmd} started {work} before refusing"
    assert _files(workdir) == set()


def test_binary_and_missing_spec_files(tmp_path, workdir, capsys):
    cases = {"binary": _write_spec(tmp_path, bytes(range(256)) * 4, "binary.toml"),
             "missing": tmp_path / "missing.toml", "directory": tmp_path}
    for name, spec in cases.items():
        for cmd in SPEC_COMMANDS:
            argv = [a.format(spec=spec, tmp=tmp_path) for a in COMMANDS[cmd]]
            code, _, err = _run(argv, capsys)
            _assert_one_line(code, err, 2)


SMALL = "tied_h2_L1_small"
BAD_OPTIONS = {
    "time_inf": ["theory", SMALL, "--time", "inf"],
    "time_nan": ["theory", SMALL, "--time", "nan"],
    "time_negative": ["theory", SMALL, "--time", "-1"],
    "points_zero": ["theory", SMALL, "--points", "0"],
    "points_one": ["theory", SMALL, "--points", "1"],
    "seed_negative": ["theory", SMALL, "--seed", "-1"],
    "truncation_zero": ["theory", SMALL, "--truncation", "0"],
    "truncation_huge": ["theory", SMALL, "--truncation", "100"],
    "truncation_text": ["theory", SMALL, "--truncation", "4.5"],
    "derive_truncation_zero": ["derive", SMALL, "--truncation", "0"],
    "out_missing_folder": ["theory", SMALL, "--out", "{tmp}/no/such/dir/out.csv"],
    "out_is_directory": ["theory", SMALL, "--out", "{tmp}"],
    "derive_out_is_directory": ["derive", SMALL, "--out", "{tmp}"],
    "init_sample_without_dim": ["theory", SMALL, "--init", "sample"],
    "fast_on_tied": ["theory", SMALL, "--fast"],
    "spectral_with_truncation": ["theory", SMALL, "--method", "spectral", "--truncation", "6"],
    "spectral_size_tiny": ["theory", SMALL, "--method", "spectral", "--size", "2"],
    "spectral_size_with_sample": ["theory", SMALL, "--method", "spectral", "--init", "sample", "--dim", "20",
                                  "--size", "40"],
    "compare_size_with_sample": ["compare", SMALL, "--dim", "20", "--size", "40"],
    "at_without_value": ["potential", SMALL, "--at", "q_student_student"],
    "at_nan": ["potential", SMALL, "--at", "q_student_teacher=nan", "--json"],
    "at_not_a_number": ["potential", SMALL, "--at", "q_student_teacher=abc"],
    "at_unknown_name": ["potential", SMALL, "--at", "q_nobody=1"],
    "at_conflicting_repeat": ["potential", SMALL, "--at", "q_student_student=1.5", "--at", "q_student_student=2"],
    "tol_zero": ["potential", SMALL, "--tol", "0"],
    "simulate_without_dim": ["simulate", SMALL],
    "simulate_dim_zero": ["simulate", SMALL, "--dim", "0"],
    "simulate_dim_100000": ["simulate", SMALL, "--dim", "100000"],
    "simulate_seeds_zero": ["simulate", SMALL, "--dim", "20", "--seeds", "0"],
    "simulate_workers_zero": ["simulate", SMALL, "--dim", "20", "--workers", "0"],
    "simulate_more_points_than_steps": ["simulate", SMALL, "--dim", "20", "--time", "0.001", "--points", "50"],
    "simulate_partial_without_out": ["simulate", SMALL, "--dim", "20", "--partial"],
    "simulate_out_missing_folder": ["simulate", SMALL, "--dim", "20", "--out", "{tmp}/no/x.csv"],
    "compare_out_existing_file": ["compare", SMALL, "--dim", "20", "--out", "{tmp}/existing.txt"],
    "compare_both_dims": ["compare", SMALL, "--dim", "20", "--dims", "20,40"],
    "compare_one_dims": ["compare", SMALL, "--dims", "20"],
    "compare_dims_text": ["compare", SMALL, "--dims", "a,b"],
    "compare_neither_dim": ["compare", SMALL],
    "compare_seeds_zero": ["compare", SMALL, "--dim", "20", "--seeds", "0"],
    "set_unknown_path": ["theory", SMALL, "--set", "training.speed=1"],
    "set_unknown_index": ["simulate", SMALL, "--dim", "20", "--set", "indices.nobody.width=1"],
    "set_unknown_top": ["potential", SMALL, "--set", "optimizer.lr=1"],
    "set_invalid_value": ["derive", SMALL, "--set", "training.noise_ratio=-1"],
    "set_without_equals": ["compare", SMALL, "--dim", "20", "--set", "training.noise_ratio"],
    "set_code_in_activation": ["potential", SMALL, "--set", "model.activation='__import__(\"os\")'"],
    "unknown_command": ["fly", SMALL],
    "unknown_option": ["theory", SMALL, "--colour", "red"],
    "missing_spec_argument": ["theory"],
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_bad_options_are_refused_in_one_line(case, tmp_path, workdir, capsys, work):
    (tmp_path / "existing.txt").write_text("keep me\n")
    argv = [a.format(tmp=tmp_path) for a in BAD_OPTIONS[case]]
    code, _, err = _run(argv, capsys)
    assert not {"quadrature", "derivation", "sgd"} & set(work), f"{case} started {work} before refusing"
    if case in ("unknown_command", "unknown_option", "missing_spec_argument", "truncation_text"):
        assert code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].startswith("symattn")
    else:
        _assert_one_line(code, err, 2)
    assert (tmp_path / "existing.txt").read_text() == "keep me\n"
    assert _files(workdir) == set()


def test_set_overrides_work_on_every_command(tmp_path, workdir, capsys):
    """--set KEY=VALUE addresses the spec by dotted path and indices by name, on every command."""
    import json
    code, out, _ = _run(["potential", SMALL, "--json", "--set", "indices.student.init_scale=0.7"], capsys)
    assert code == 0 and json.loads(out)["at"]["q_student_student"] == pytest.approx(0.7**4 * 2, rel=1e-12)
    code, out, _ = _run(["derive", SMALL, "--set", "theory.truncation=4", "--out", tmp_path / "m.py"], capsys)
    assert code == 0 and "16 moments" in out
    for cmd in ("theory", "simulate", "compare"):
        argv = [a.format(spec=SMALL, tmp=tmp_path) for a in COMMANDS[cmd]]
        code, _, err = _run(argv + ["--set", "training.noise_ratio=0.01", "--set", "model.label_noise=0.1",
                                    "--quiet"], capsys)
        assert code == 0, (cmd, err)
    from symattn.spec import load_spec
    spec = load_spec(SMALL, settings=["training.noise_ratio=0.01", "indices.teacher.width=0.25"])
    assert spec.noise_ratio == 0.01 and spec.indices[1].width == 0.25
    assert load_spec(SMALL).noise_ratio == 0.005                      # the shipped file is untouched


def test_time_shorter_than_one_step_is_refused(tmp_path, workdir, capsys):
    spec = _write_spec(tmp_path, edit("batch_size = 64", "batch_size = 10000000"))
    code, _, err = _run(["simulate", spec, "--dim", "20", "--time", "0.001", "--points", "2"], capsys)
    _assert_one_line(code, err, 2)
    assert "one SGD step" in err


def test_repeated_at_uses_every_value(capsys):
    import json
    # (q_st = 0.2 keeps the order parameters a Gram matrix: q_st² ≤ q_ss q_tt = 1.5·0.047)
    code, out, _ = _run(["potential", SMALL, "--at", "q_student_student=1.5", "--at", "q_student_teacher=0.2",
                         "--json"], capsys)
    assert code == 0
    at = json.loads(out)["at"]
    assert at["q_student_student"] == 1.5 and at["q_student_teacher"] == 0.2
    code, out, _ = _run(["potential", SMALL, "--at", "q_student_student=1.5", "q_student_teacher=0.2", "--json"],
                        capsys)
    assert code == 0 and json.loads(out)["at"]["q_student_teacher"] == 0.2
    # Φ of h2 at these values is the closed form evaluated there (not the defaults)
    from symattn import potential
    P = potential(SMALL)
    vals = {**json.loads(out)["at"]}
    assert json.loads(out)["value"] == pytest.approx(P.value(vals), rel=1e-12)


def test_numerical_failure_is_exit_3(tmp_path, workdir, capsys):
    """SGD at a step far beyond stability diverges: exit 3, one line naming the time."""
    spec = _write_spec(tmp_path, edit("noise_ratio = 0.005", "noise_ratio = 50.0"))
    code, _, err = _run(["simulate", spec, "--dim", "20", "--time", "20", "--points", "2", "--quiet",
                         "--out", tmp_path / "x.csv"], capsys)
    _assert_one_line(code, err, 3)
    assert "time =" in err and not (tmp_path / "x.csv").exists()


def test_singular_activation_between_grid_points_is_a_numerical_failure(tmp_path, workdir, capsys):
    """log(z² + 1e-300) passes the finiteness grid (it is finite at every grid point) but has no
    Gaussian expectation worth the name: the quadrature never converges, exit 3 in one line."""
    spec = _write_spec(tmp_path, activation("log(z**2 + 1e-300)"))
    code, out, err = _run(["potential", spec, "--quiet"], capsys)
    _assert_one_line(code, err, 3)
    assert "quadrature" in err and out == ""


@pytest.mark.parametrize("act", ["cosh(z)**2", "exp(z**2/16)"])
def test_expectation_outside_the_rule_is_a_numerical_failure(act, tmp_path, workdir, capsys):
    """At q_ss = 2 (Var G = 4): E cosh⁴(G) exists but its integrand peaks at z ≈ 4σ = 8, beyond the rule's
    window |z| ≤ 6.57; E exp(G²/8) does not exist (Var G ≥ 4: it grows as fast as the Gaussian decays).
    Without the tail check both printed a wrong number with exit 0; now exit 3 in one line naming the
    term (docs/theory.md §2, "Tails")."""
    spec = _write_spec(tmp_path, activation(act))
    code, out, err = _run(["potential", spec, "--quiet", "--at", "q_student_student=2.0"], capsys)
    _assert_one_line(code, err, 3)
    assert "G_1_1_" in err and out == ""


def test_convergent_growing_activation_is_not_refused(tmp_path, workdir, capsys):
    """exp(z) grows, but E exp(2G) exists and its integrand is held well inside the window at the example's
    law: a value (the tail check quiet) equal to the closed form E[(e^{G_s} − e^{G_t})²]/2 from
    E e^{aG} = e^{a²v/2} (centred G of variance v)."""
    import json
    import math
    spec = _write_spec(tmp_path, activation("exp(z)"))
    code, out, err = _run(["potential", spec, "--quiet", "--json"], capsys)
    assert code == 0, err
    got = json.loads(out)
    q = got["at"]                        # one token: Var G_k = Ω_kk + Ψ_kk = 2 q_kk, Cov(G_s, G_t) = 2 q_st
    vs, vt, c = 2 * q["q_student_student"], 2 * q["q_teacher_teacher"], 2 * q["q_student_teacher"]
    exact = 0.5 * (math.exp(2 * vs) - 2 * math.exp(0.5 * (vs + vt + 2 * c)) + math.exp(2 * vt))
    assert got["value"] == pytest.approx(exact, rel=1e-6)


def _exp_square_phi(a, vs, vt, c):
    """E½(F(G_s) − F(G_t))² for F(z) = exp(a z²), centred (G_s, G_t) with variances vs, vt and covariance c:
    E exp(aX² + bY²) = det(I − 2 diag(a, b) Σ)^(−½) for a bivariate Gaussian (X, Y) ~ N(0, Σ)."""
    import numpy as np

    def joint(a1, a2):
        M = np.eye(2) - 2 * np.diag([a1, a2]) @ np.array([[vs, c], [c, vt]])
        return np.linalg.det(M) ** -0.5
    return 0.5 * (joint(2 * a, 0) - 2 * joint(a, a) + joint(0, 2 * a))


@pytest.mark.parametrize("command", ["potential", "theory"])
def test_expectation_that_grows_like_a_gaussian_exists_only_below_its_variance_bound(command, tmp_path, workdir,
                                                                                     capsys):
    """F(z) = exp(z²/16): the MSE integrand grows like exp(G²/8), so E exists iff Var G < 4 (symbolic.growth:
    c = 1/8 found by SymPy's limit). At q_ss = 0.5 (Var G_s = 1) Φ equals the closed form; at the example's
    start q_ss = 2 (Var G_s = 4, on the bound) potential and the theory (the compiled Φ, checked at every
    evaluation) exit 3 in one line naming the term, the variable and the bound — no quadrature runs."""
    import json
    # the student at σ = 1 (κ = 1): q_ss = σ⁴κ(1 + κ) = 2 at the free start, Var G_s = 2 q_ss = 4
    spec = _write_spec(tmp_path, edit("init_scale = 0.5", "init_scale = 1.0", activation("exp(z**2/16)")))
    if command == "potential":
        at = {"q_student_student": 0.5, "q_student_teacher": 0.1, "q_teacher_teacher": 0.75}
        code, out, err = _run(["potential", spec, "--quiet", "--json", "--tol", "1e-6",
                               *[x for k, v in at.items() for x in ("--at", f"{k}={v}")]], capsys)
        assert code == 0, err
        exact = _exp_square_phi(1 / 16, 2 * at["q_student_student"], 2 * at["q_teacher_teacher"],
                                2 * at["q_student_teacher"])
        assert json.loads(out)["value"] == pytest.approx(exact, rel=1e-5)
        argv = ["potential", spec, "--quiet"]
    else:
        argv = ["theory", spec, "--quiet", "--time", "0.01", "--points", "3", "--out", tmp_path / "th.csv"]
    code, out, err = _run(argv, capsys)
    _assert_one_line(code, err, 3)
    assert "does not exist" in err and "exp(0.125·G_1_1_1²)" in err and "1/(2c) = 4" in err
    assert not (tmp_path / "th.csv").exists()


@pytest.mark.parametrize("act", ["exp(z**3)", "exp(exp(z))", "exp(z**4/100)"])
def test_expectation_of_a_super_gaussian_integrand_never_exists(act, tmp_path, workdir, capsys, work):
    """Integrands that outgrow every Gaussian (c = ∞): no variance holds them; exit 3 before any quadrature,
    naming the term (before, exp(z**3) printed a number with only a warning that the quadrature 'reached
    ~1.9e+09')."""
    code, out, err = _run(["potential", _write_spec(tmp_path, activation(act)), "--quiet"], capsys)
    _assert_one_line(code, err, 3)
    assert "faster than any Gaussian" in err and out == ""
    assert "quadrature" not in work, work


@pytest.mark.parametrize("tokens", [4, 16])
def test_softmax_beyond_the_quadrature_limit_is_refused_up_front(tokens, tmp_path, workdir, capsys, monkeypatch):
    """A softmax of L tokens has cross terms of 2(L − 1) directions; the quadrature needs ≥ 17 nodes per
    direction within 2e6 nodes, so at most 5 (L ≤ 3). L = 4 ran 7 s and then failed as 'probably singular';
    L = 16 ran for minutes without a word. Both are now refused, exit 2, naming model.tokens with the
    estimate, before the symbolic work on the terms."""
    from symattn.derivation import potential as pot
    built = []
    orig = pot.GaussianExpectation._quad_term
    monkeypatch.setattr(pot.GaussianExpectation, "_quad_term", lambda self, *a, **k: built.append(a) or orig(self, *a, **k))
    text = edit('activation = "h2"', 'activation = "softmax"').replace("tokens = 1", f"tokens = {tokens}")
    code, out, err = _run(["potential", _write_spec(tmp_path, text), "--quiet"], capsys)
    _assert_one_line(code, err, 2)
    assert f"model.tokens = {tokens}" in err and "refused before any work" in err
    assert built == []                 # no quadrature term was set up (counted: the refusal precedes the work)


# -- activations with jumps (docs/theory.md §2, "Jumps and kinks"): Φ and its gradient by Stein's lemma; the
#    dynamics refused. One token, centred G: E½(f(G_s) − f(G_t))² in closed form through the orthant law
JUMPS = {
    # f, Φ from (P(G_s > c), P(G_t > c) for a step at c; ρ) — each case with its own closed form
    "Heaviside(z)": lambda a, b, c: 0.5 * (0.5 - math.asin(b / math.sqrt(a * c)) / math.pi),
    "sign(z)": lambda a, b, c: 2.0 * (0.5 - math.asin(b / math.sqrt(a * c)) / math.pi),
}


@pytest.mark.parametrize("act", list(JUMPS))
def test_jump_activation_potential_is_the_closed_form_and_its_dynamics_are_refused(act, tmp_path, workdir, capsys):
    """Heaviside and sign used to end in an internal NameError (SymPy's DiracDelta reached the quadrature).
    Now ``potential`` prints Φ and Γ, equal to the orthant closed form Φ = k(½ − asin ρ/π) (k = ½ for H, 2
    for sign; ρ = q_st/√(q_ss q_tt)) and its finite-difference gradient within the quadrature's own error
    estimate (a jump makes the trapezoidal rule converge like h, not geometrically; the estimate is
    Richardson's first-order one — over 24 random states at tol 1e-3 … 1e-5 the true error was at most
    0.89 of it, so it is asserted within 1×). Every dynamics command is
    refused in one line, exit 2, naming the key and why (online SGD's per-sample gradient misses the jump)."""
    import json
    spec = _write_spec(tmp_path, activation(act))
    code, out, err = _run(["potential", spec, "--quiet", "--json", "--tol", "1e-4"], capsys)
    assert code == 0, err
    got = json.loads(out)
    q = got["at"]
    a, b, c = q["q_student_student"], q["q_student_teacher"], q["q_teacher_teacher"]
    phi, err_est = JUMPS[act], got["quadrature"]["error_estimate"]
    assert abs(got["value"] - phi(a, b, c)) <= err_est
    h = 1e-6
    fd = {"q_student_student": (phi(a + h, b, c) - phi(a - h, b, c)) / (2 * h),
          "q_student_teacher": (phi(a, b + h, c) - phi(a, b - h, c)) / (4 * h),      # Γ: off-diagonal halved
          "q_teacher_teacher": (phi(a, b, c + h) - phi(a, b, c - h)) / (2 * h)}
    for name, v in fd.items():
        assert abs(got["gradient"][name] - v) <= err_est, name
    for cmd in ("theory", "simulate", "compare", "derive"):
        code, _, err = _run([x.format(spec=spec, tmp=tmp_path) for x in COMMANDS[cmd]] + ["--quiet"], capsys)
        _assert_one_line(code, err, 2)
        assert "model.activation" in err and "jumps" in err, cmd


def test_sgd_per_sample_gradient_of_a_jump_misses_the_population_gradient():
    """Why the dynamics are refused, shown: for f = Heaviside the per-sample gradient ∂𝓛/∂G_s that SGD would
    take (the a.e. derivative, ``symbolic.jumps.ae_gradient``) is 0 at every sample of 10⁴ draws of G, while the
    population Γ_ss is 0.08 (the closed form above): SGD would stand still where the theory moves."""
    import numpy as np
    import sympy as sp

    from symattn import potential
    from symattn.spec import load_spec
    from symattn.symbolic.jumps import ae_gradient
    from symattn.symbolic.loss import build_loss
    s = load_spec({"name": "jump", "model": {"tokens": 1, "activation": "Heaviside(z)"},
                   "indices": [{"name": "s", "role": "student", "parameterization": "tied"},
                               {"name": "t", "role": "teacher", "parameterization": "tied", "width": 0.5}],
                   "training": {"noise_ratio": 0.005}})
    loss = build_loss(s)
    gs = loss.g_symbols
    ae = sp.lambdify([gs], ae_gradient(loss.expr, gs[:1])[0],
                     modules=[{"Heaviside": lambda x, h0=0.5: np.heaviside(x, h0)}, "numpy"])
    G = np.random.default_rng(0).standard_normal((10_000, 2))
    assert np.all(np.asarray(ae([G[:, 0], G[:, 1]])) == 0)
    P = potential(s, tol=1e-4)
    theta = {"q_s_s": 0.5, "q_s_t": 0.2, "q_t_t": 0.4}
    gamma = P.gradient_named(theta)["q_s_s"]
    exact = 0.5 * 0.2 / (2 * 0.5 * np.pi * np.sqrt(0.5 * 0.4 - 0.2**2))       # −½ ∂(asin ρ/π)/∂q_ss
    assert gamma == pytest.approx(exact, abs=1e-3) and abs(gamma) > 0.05


@pytest.mark.parametrize("act", ["Piecewise((1, z > 1), (0, True))", "Piecewise((z, z > 1), (2, True))"])
def test_piecewise_steps_are_jumps_not_zero_gradients(act, tmp_path, workdir, capsys):
    """SymPy differentiates a Piecewise branch by branch: the step 1[z > 1] had derivative 0, so Price's
    theorem gave a silently wrong Γ. Written in Heaviside form (symbolic.jumps.distributional) it is a jump:
    the dynamics are refused like Heaviside's, in one line."""
    spec = _write_spec(tmp_path, activation(act))
    code, _, err = _run([x.format(spec=spec, tmp=tmp_path) for x in COMMANDS["theory"]] + ["--quiet"], capsys)
    _assert_one_line(code, err, 2)
    assert "jumps" in err


def _relu_phi(a, b, c):
    """E½(relu(G_s) − relu(G_t))² for centred G of variances 2a, 2c and covariance 2b (one token): the
    arc-cosine kernel E relu(x)relu(y) = σ_xσ_y(sin θ + (π − θ)cos θ)/2π, θ = acos ρ, and E relu(x)² = σ_x²/2."""
    sa, sc = math.sqrt(2 * a), math.sqrt(2 * c)
    th = math.acos(b / math.sqrt(a * c))
    return 0.5 * (a + c) - sa * sc * (math.sin(th) + (math.pi - th) * math.cos(th)) / (2 * math.pi)


@pytest.mark.parametrize("act", ["Max(z, 0)", "z*Heaviside(z)", "Piecewise((z, z > 0), (0, True))", "(z + Abs(z))/2"])
def test_relu_written_four_ways_is_the_arc_cosine_closed_form(act, tmp_path, workdir, capsys):
    """relu as Max(z, 0), z*Heaviside(z) (whose SymPy derivative keeps z·δ(z): a NameError before),
    Piecewise((z, z > 0), (0, True)) (SymPy's branch-wise derivative has no δ in ∇²f: E∇²f must come from
    Stein's lemma, not from zero) and (z + Abs(z))/2: Φ and Γ equal the arc-cosine closed form and its
    finite-difference gradient within the quadrature's error estimate (--tol 1e-6), and ``derive`` builds
    the dynamics (the SGD-noise integrands from the a.e. gradient, ``Loss.pathwise_gradient``)."""
    import json
    spec = _write_spec(tmp_path, activation(act))
    code, out, err = _run(["potential", spec, "--quiet", "--json", "--tol", "1e-6"], capsys)
    assert code == 0, (act, err)
    got = json.loads(out)
    q = got["at"]
    a, b, c = q["q_student_student"], q["q_student_teacher"], q["q_teacher_teacher"]
    bound = max(got["quadrature"]["error_estimate"], 1e-7)
    assert abs(got["value"] - _relu_phi(a, b, c)) <= bound
    h = 1e-6
    fd = {"q_student_student": (_relu_phi(a + h, b, c) - _relu_phi(a - h, b, c)) / (2 * h),
          "q_student_teacher": (_relu_phi(a, b + h, c) - _relu_phi(a, b - h, c)) / (4 * h),
          "q_teacher_teacher": (_relu_phi(a, b, c + h) - _relu_phi(a, b, c - h)) / (2 * h)}
    for name, v in fd.items():
        assert abs(got["gradient"][name] - v) <= bound + 1e-8, name
    code, _, err = _run([x.format(spec=spec, tmp=tmp_path) for x in COMMANDS["derive"]] + ["--quiet"], capsys)
    assert code == 0, err


def test_version_and_help_show_defaults(capsys):
    assert main(["--version"]) == 0 and "symattn" in capsys.readouterr().out
    for cmd in ("potential", "derive", "theory", "simulate", "compare"):
        assert main([cmd, "--help"]) == 0
        text = capsys.readouterr().out
        assert "default" in text, cmd
    from symattn.cli import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in sub.choices.items():
        for action in parser._actions:
            assert action.help, (name, action.dest)         # every option explains itself


# ---------------------------------------------------------------------------- real processes
def _cli(args, cwd, env=None, **kw):
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(env or {}))
    # Ctrl-C restored to its default in the child: a shell's background job (or a runner) may start
    # the tests with SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    return subprocess.Popen([sys.executable, "-m", "symattn", *map(str, args)], cwd=cwd, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def _wait_for(proc, needle, timeout=120):
    """Read stderr lines until one contains ``needle`` (the process is then busy working)."""
    t0 = time.monotonic()
    lines = []
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError("never saw " + needle + ": " + "".join(lines))


@pytest.mark.parametrize("partial", [False, True])
def test_sigint_during_simulate(tmp_path, partial):
    out = tmp_path / "sim.csv"
    args = ["simulate", SMALL, "--dim", "60", "--seeds", "2", "--time", "5", "--points", "400", "--out", out]
    proc = _cli(args + (["--partial"] if partial else []), tmp_path, env={"SYMATTN_CACHE": str(tmp_path / "c")})
    _wait_for(proc, "GFLOP")
    time.sleep(4.0)                              # inside the SGD loop, some points recorded
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last.startswith("symattn: interrupted"), err
    if partial:
        text = out.read_text()
        assert text.startswith("# partial") and "partial" in last
        from symattn.integration import read_csv
        tab = read_csv(out)
        assert len(tab["time"]) >= 1 and tab["time"][0] == 0.0
    else:
        assert not out.exists() and "no output file" in last
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no temp file left


@pytest.mark.parametrize("method,busy", [("moments", "deriving"), ("auto", "calibrating")])
def test_sigint_during_theory(tmp_path, method, busy):
    out = tmp_path / "th.csv"
    proc = _cli(["theory", "tied_softmax_L2", "--time", "0.25", "--method", method, "--out", out], tmp_path,
                env={"SYMATTN_CACHE": str(tmp_path / "c")})
    _wait_for(proc, busy)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("symattn: interrupted")
    assert not out.exists()


def test_concurrent_derive_on_empty_cache(tmp_path):
    """Two processes deriving and loading the same modules with an empty cache: both succeed and
    one valid copy of each module is left (the file's content hash equals its name)."""
    cache = tmp_path / "cache"
    env = {"SYMATTN_CACHE": str(cache)}
    procs = [_cli(["theory", "tied_linear_L1", "--method", "moments", "--time", "0.01", "--points", "3", "--quiet"],
                  tmp_path, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0]
    import hashlib
    mods = list(cache.rglob("m_*.py"))
    assert len(mods) == 2                                  # the M = 4 system and its M − 2 check
    for m in mods:
        assert hashlib.sha256(m.read_bytes()).hexdigest()[:20] == m.stem[2:]
    assert not list(cache.rglob("*.tmp*"))
    assert oct(mods[0].parent.stat().st_mode & 0o777) == "0o700"


def _read_only_runner(folder: Path):
    """A command prefix that runs a process with ``folder`` read-only: a read-only bind mount in a
    private mount namespace (root, as in CI: a real EROFS), else the folder made 0555 for a
    non-root user; None when neither is possible here."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return lambda cmd: cmd
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "--mount", "sh", "-c",
                            f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} && "
                            f"! touch {folder}/probe 2>/dev/null"], capture_output=True)
    if probe.returncode != 0:
        return None
    import shlex
    return lambda cmd: ["unshare", "--mount", "sh", "-c",
                        f"mount --bind {folder} {folder} && mount -o remount,ro,bind {folder} && cd {folder} && "
                        + " ".join(shlex.quote(c) for c in cmd)]


def test_read_only_working_directory(tmp_path):
    """From a read-only folder, compare refuses its default --out in one line, and theory to
    stdout works; with no writable cache folder either, the module cache falls back to a private
    temporary folder."""
    ro = tmp_path / "ro"
    ro.mkdir()
    wrap = _read_only_runner(ro)
    if wrap is None:
        pytest.skip("no way to make a read-only folder here (needs unshare as root, or a non-root user)")
    env = dict(os.environ, XDG_CACHE_HOME=str(ro / "cache"), OPENBLAS_NUM_THREADS="1")
    env.pop("SYMATTN_CACHE", None)
    r = subprocess.run(wrap([sys.executable, "-m", "symattn", "compare", SMALL, "--dim", "20", "--seeds", "1",
                             "--time", "0.01", "--points", "2"]), cwd=ro, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--out" in r.stderr, r.stderr
    r = subprocess.run(wrap([sys.executable, "-m", "symattn", "theory", SMALL, "--time", "0.01", "--points", "3",
                             "--quiet"]), cwd=ro, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("time,")
    assert list(ro.iterdir()) == []


# ---------------------------------------------------------------------------- module cache
def test_planted_and_truncated_cache_modules_are_never_run(tmp_path, monkeypatch):
    """A file in the cache under the expected name but with other content is rewritten from the
    source in hand, never imported as it is (planted code would create the marker)."""
    from symattn.codegen import load
    from symattn.derivation import derive

    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path / "cache"))
    system = derive("tied_linear_L1", 4)
    text = source(system)
    import hashlib
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    path = load.cache_dir() / f"m_{digest}.py"
    marker = tmp_path / "planted_ran"
    for bad in (f"open({str(marker)!r}, 'w').close()\n", text[: len(text) // 2]):
        path.write_text(bad)
        for name in [n for n in sys.modules if digest in n]:
            del sys.modules[name]
        mod = load.cached_module(text)
        assert not marker.exists()
        assert path.read_text() == text
        assert hasattr(mod, "rhs")


def test_concurrent_loads_never_see_a_partial_module(tmp_path):
    """Eight processes import the same fresh module at once: every one gets the whole module."""
    code = ("import sys; from symattn.codegen.load import cached_module; "
            "src = 'X = 1\\n' + 'Y = [' + '1,' * 200000 + ']\\n' + 'Z = 2\\n'; "
            "m = cached_module(src); assert m.Z == 2 and len(m.Y) == 200000; print('ok')")
    env = dict(os.environ, SYMATTN_CACHE=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    res = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and o.strip() == "ok" for p, (o, _) in zip(procs, res)), res
    assert len(list((tmp_path / "cache").rglob("m_*.py"))) == 1


# ---------------------------------------------------------------------------- library side effects
def test_compare_leaves_the_matplotlib_backend_alone(tmp_path):
    code = ("import matplotlib; matplotlib.use('svg'); import symattn; "
            f"symattn.compare({SMALL!r}, dim=20, seeds=1, time=0.01, points=2, out={str(tmp_path / 'c')!r}, "
            "progress=False); print(matplotlib.get_backend())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, SYMATTN_CACHE=str(tmp_path / "cache")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().lower() == "svg"
    assert (tmp_path / "c" / "comparison.png").stat().st_size > 1000


def test_spectral_theory_writes_only_its_output(tmp_path, workdir, capsys):
    code, out, err = _run(["theory", SMALL, "--method", "spectral", "--size", "16", "--time", "0.01",
                           "--points", "3", "--quiet"], capsys)
    assert code == 0, err
    assert out.startswith("time,") and _files(workdir) == set()


def test_interrupt_swallowed_by_a_finaliser_still_ends_the_run(tmp_path):
    """A Ctrl-C that arrives inside a finaliser (a Numba/LLVM object's ``__del__`` while compiling) is lost to
    Python (an "unraisable" exception); the run must still end as interrupted (130) in one line — the command
    line's unraisable hook keeps Python's "Exception ignored" traceback off the terminal — and the output file
    it was about to write must not appear (seen once: exit 0 and a written table). In a process of its own: the
    signal goes to the main thread, which a pytest-xdist worker's test may not run in."""
    out = tmp_path / "out.csv"
    script = f"""
import os, signal, sys
from symattn import cli
from symattn.files import atomic_write

class Finaliser:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10000):              # the handler runs here; its KeyboardInterrupt is swallowed
            pass

def command(args):
    Finaliser()
    atomic_write({str(out)!r}, "time\\n0\\n")

cli.cmd_examples = command
sys.exit(cli.main(["examples"]))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr   # one line, no noise
    assert proc.stderr.strip().splitlines()[-1].startswith("symattn: interrupted")
    assert not out.exists() and list(tmp_path.iterdir()) == []
