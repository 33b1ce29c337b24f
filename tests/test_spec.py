"""Spec validation (docs/interface.md, "Model specification"): every malformed file is refused through
the command line with exit status 2 and exactly one line on stderr naming the key; valid specs load.
"""
from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest

import symattn
from symattn.cli import main

ROOT = Path(__file__).resolve().parents[1]

VALID = """
name = "ok"

[model]
tokens = 2
token_covariance = "identity"
activation = "softmax"
beta = 1.0

[[indices]]
name = "student"
role = "student"
parameterization = "tied"
width = 1.0
init_scale = 1.0

[[indices]]
name = "teacher"
role = "teacher"
parameterization = "tied"
width = 0.5
init_scale = 1.0

[training]
batch_size = 512
noise_ratio = 0.01

[theory]
truncation = 6
"""


def edit(text, old, new):
    assert old in text, old
    return text.replace(old, new, 1)


def h2(text):
    """The valid spec with L = 1 and h2 (no beta)."""
    t = edit(text, "tokens = 2", "tokens = 1")
    t = edit(t, 'activation = "softmax"', 'activation = "h2"')
    return edit(t, "beta = 1.0\n", "")


STUDENT = 'name = "student"\nrole = "student"\nparameterization = "tied"\nwidth = 1.0\ninit_scale = 1.0'

# (id, TOML text, the key the single error line must name)
MALFORMED = [
    ("unknown-top-key", "extra = 1\n" + VALID, "extra"),
    ("unknown-model-key", edit(VALID, "tokens = 2", "tokens = 2\ntemperature = 3"), "model.temperature"),
    ("unknown-index-key", edit(VALID, "width = 0.5", "width = 0.5\nrank = 3"), "indices[1].rank"),
    ("unknown-training-key", edit(VALID, "batch_size = 512", "batch_size = 512\nepochs = 3"), "training.epochs"),
    ("unknown-theory-key", edit(VALID, "truncation = 6", "truncation = 6\norder = 2"), "theory.order"),
    ("tokens-wrong-type", edit(VALID, "tokens = 2", 'tokens = "two"'), "model.tokens"),
    ("tokens-float", edit(VALID, "tokens = 2", "tokens = 2.5"), "model.tokens"),
    ("tokens-zero", edit(VALID, "tokens = 2", "tokens = 0"), "model.tokens"),
    ("tokens-bool", edit(VALID, "tokens = 2", "tokens = true"), "model.tokens"),
    ("negative-width", edit(VALID, "width = 1.0", "width = -1.0"), "indices[0].width"),
    ("zero-width", edit(VALID, "width = 0.5", "width = 0.0"), "indices[1].width"),
    ("zero-init-scale-tied", edit(VALID, "width = 1.0\ninit_scale = 1.0", "width = 1.0\ninit_scale = 0.0"),
     "indices[0].init_scale"),
    ("negative-init-scale-tied", edit(VALID, "width = 1.0\ninit_scale = 1.0", "width = 1.0\ninit_scale = -1.0"),
     "indices[0].init_scale"),
    ("init-scale-pair-on-tied", edit(VALID, "width = 1.0\ninit_scale = 1.0", "width = 1.0\ninit_scale = [1.0, 2.0]"),
     "indices[0].init_scale"),
    ("init-scale-wrong-type", edit(VALID, "width = 1.0\ninit_scale = 1.0", 'width = 1.0\ninit_scale = "big"'),
     "indices[0].init_scale"),
    ("covariance-not-psd", edit(VALID, 'token_covariance = "identity"', "token_covariance = [[1.0, 2.0], [2.0, 1.0]]"),
     "model.token_covariance"),
    ("covariance-huge", edit(VALID, 'token_covariance = "identity"', "token_covariance = [[1e300, 0.0], [0.0, 1.0]]"),
     "model.token_covariance"),
    ("covariance-not-symmetric", edit(VALID, 'token_covariance = "identity"',
                                      "token_covariance = [[1.0, 0.3], [0.1, 1.0]]"), "model.token_covariance"),
    ("covariance-wrong-shape", edit(VALID, 'token_covariance = "identity"',
                                    "token_covariance = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]"),
     "model.token_covariance"),
    ("covariance-ragged", edit(VALID, 'token_covariance = "identity"', "token_covariance = [[1.0, 0.0], [0.0]]"),
     "model.token_covariance"),
    ("covariance-unknown-word", edit(VALID, 'token_covariance = "identity"', 'token_covariance = "eye"'),
     "model.token_covariance"),
    ("covariance-bool-entries", edit(VALID, 'token_covariance = "identity"',
                                     "token_covariance = [[true, false], [false, true]]"), "model.token_covariance"),
    ("identity-student", edit(VALID, 'role = "student"\nparameterization = "tied"\nwidth = 1.0\ninit_scale = 1.0',
                              'role = "student"\nparameterization = "identity"'), "indices[0].parameterization"),
    ("unknown-parameterization", edit(VALID, 'parameterization = "tied"', 'parameterization = "lowrank"'),
     "indices[0].parameterization"),
    ("unknown-role", edit(VALID, 'role = "teacher"', 'role = "oracle"'), "indices[1].role"),
    ("empty-indices", "indices = []\n" + VALID.split("[[indices]]")[0] + "[training]" + VALID.split("[training]")[1],
     "indices"),
    ("no-indices", VALID.split("[[indices]]")[0] + "[training]" + VALID.split("[training]")[1], "indices"),
    ("duplicate-index-names", edit(VALID, 'name = "teacher"', 'name = "student"'), "indices[1].name"),
    ("bad-index-name", edit(VALID, 'name = "teacher"', 'name = "tea_cher"'), "indices[1].name"),
    ("no-student", edit(VALID, 'name = "student"\nrole = "student"', 'name = "student"\nrole = "teacher"'),
     "indices"),
    ("activation-unknown-symbol", edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'activation = "tanh(w*z)"'),
     "model.activation"),
    ("activation-unparsable", edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'activation = "tanh(z"'),
     "model.activation"),
    ("noise-ratio-and-learning-rate", edit(VALID, "noise_ratio = 0.01", "noise_ratio = 0.01\nlearning_rate = 0.1"),
     "training.learning_rate"),
    ("negative-learning-rate", edit(VALID, "noise_ratio = 0.01", "learning_rate = -0.1"), "training.learning_rate"),
    ("negative-noise-ratio", edit(VALID, "noise_ratio = 0.01", "noise_ratio = -0.01"), "training.noise_ratio"),
    ("batch-size-zero", edit(VALID, "batch_size = 512", "batch_size = 0"), "training.batch_size"),
    ("negative-weight-decay", edit(VALID, "noise_ratio = 0.01", "noise_ratio = 0.01\nweight_decay = -1.0"),
     "training.weight_decay"),
    ("truncation-too-small", edit(VALID, "truncation = 6", "truncation = 1"), "theory.truncation"),
    ("loss-bad-symbol-range", edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'loss = "G_9_9_9**2"'),
     "model.loss"),
    ("loss-unknown-symbol", edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'loss = "G_1_1_1**2 + x"'),
     "model.loss"),
    ("loss-unparsable", edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'loss = "(G_1_1_1"'), "model.loss"),
    ("loss-constant", edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'loss = "3"'), "model.loss"),
    ("beta-non-softmax", edit(VALID, 'activation = "softmax"', 'activation = "h2"'), "model.beta"),
    ("beta-nan", edit(VALID, "beta = 1.0", "beta = nan"), "model.beta"),
    ("width-on-direct", edit(VALID, 'parameterization = "tied"\nwidth = 1.0', 'parameterization = "direct"\nwidth = 1.0'),
     "indices[0].width"),
    ("scale-on-tied", edit(VALID, "width = 0.5", "width = 0.5\nscale = 2.0"), "indices[1].scale"),
    ("init-scale-on-identity", edit(VALID, 'parameterization = "tied"\nwidth = 0.5\ninit_scale = 1.0',
                                    'parameterization = "identity"\ninit_scale = 1.0'), "indices[1].init_scale"),
    ("readout-unknown", edit(VALID, "beta = 1.0", 'beta = 1.0\nreadout = "max"'), "model.readout"),
    ("negative-label-noise", edit(VALID, "beta = 1.0", "beta = 1.0\nlabel_noise = -0.1"), "model.label_noise"),
    ("softmax-single-token", edit(VALID, "tokens = 2", "tokens = 1"), "model.tokens"),
    ("name-unsafe", edit(VALID, 'name = "ok"', 'name = "a b/c"'), "name"),
    ("name-missing", edit(VALID, 'name = "ok"\n', ""), "name"),
    ("model-not-a-table", 'model = 3\n' + VALID.split("[model]")[0] + "[[indices]]"
     + VALID.split("[[indices]]", 1)[1], "model"),
    ("index-not-a-table", 'indices = [1, 2]\n' + VALID.split("[[indices]]")[0] + "[training]"
     + VALID.split("[training]")[1], "indices[0]"),
    ("mse-without-teacher", VALID.split("[[indices]]")[0] + "[[indices]]\n" + STUDENT + "\n\n[training]"
     + VALID.split("[training]")[1], "indices"),
    ("quoted-key-with-newline", VALID + '\n"bad\\nkey" = 1\n', "theory.'bad\\nkey'"),
]


def _initial_available():
    try:
        from symattn.initial import initial_order_parameters  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.fixture(autouse=True)
def stub_initial(monkeypatch):
    """``symattn potential`` imports symattn.initial before reading the spec; validation must not
    depend on that module, so stand in for it when it is not there (yet)."""
    if not _initial_available():
        mod = types.ModuleType("symattn.initial")
        mod.initial_order_parameters = lambda spec: {}
        monkeypatch.setitem(sys.modules, "symattn.initial", mod)


def run_cli(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("text,key", [(t, k) for _, t, k in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_spec_cli(tmp_path, capsys, text, key):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    rc, out, err = run_cli(["potential", str(path)], capsys)
    lines = err.splitlines()
    assert rc == 2, (rc, err)
    assert len(lines) == 1, err
    # "symattn: error: FILE: KEY: what is allowed"
    assert lines[0].startswith(f"symattn: error: {path}: {key}: "), lines[0]
    assert "Traceback" not in err and out == ""
    with pytest.raises(symattn.SpecError):
        symattn.load_spec(path)


def test_at_least_fourteen_malformed_cases():
    assert len(MALFORMED) >= 14
    assert len({i for i, _, _ in MALFORMED}) == len(MALFORMED)


def test_malformed_toml(tmp_path, capsys):
    path = tmp_path / "broken.toml"
    path.write_text(VALID + "\n[model\ntokens = \n")
    rc, out, err = run_cli(["potential", str(path)], capsys)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and "TOML" in err


def test_missing_file(tmp_path, capsys):
    path = tmp_path / "nowhere.toml"
    rc, out, err = run_cli(["potential", str(path)], capsys)
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err


def test_bad_at_value(capsys):
    rc, out, err = run_cli(["potential", str(ROOT / "examples" / "tied_h2_L1.toml"), "--at", "q_student_teacher=abc"],
                           capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "q_student_teacher" in err


def test_valid_text_loads(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(VALID)
    spec = symattn.load_spec(path)
    assert spec.tokens == 2 and spec.activation == "softmax" and spec.beta == 1.0
    assert spec.names == ["student", "teacher"] and spec.students == [0] and spec.teachers == [1]
    assert np.array_equal(spec.covariance, np.eye(2))
    assert spec.batch_size == 512 and spec.noise_ratio == 0.01 and spec.learning_rate is None
    assert spec.epsilon() == 0.01 and spec.step_size(100) == pytest.approx(0.01 * 512 / 100)
    assert spec.truncation == 6
    # variants that must be accepted
    for variant in (
        h2(VALID),
        edit(VALID, 'token_covariance = "identity"', "token_covariance = [[1.0, 0.3], [0.3, 1.0]]"),
        edit(VALID, 'token_covariance = "identity"', "token_covariance = [[1.0, 1.0], [1.0, 1.0]]"),  # PSD, singular
        edit(VALID, "noise_ratio = 0.01", "learning_rate = 0.01"),
        edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'activation = "tanh(2*z) + z**2"'),
        edit(VALID, 'activation = "softmax"\nbeta = 1.0', 'loss = "(G_1_2_1 - G_2_1_2)**2/2"'),
        edit(VALID, 'parameterization = "tied"\nwidth = 1.0\ninit_scale = 1.0',
             'parameterization = "untied"\nwidth = 2.0\ninit_scale = [0.5, 1.5]'),
        edit(VALID, 'parameterization = "tied"\nwidth = 1.0\ninit_scale = 1.0',
             'parameterization = "direct"\ninit_scale = 0.0'),
        edit(VALID, 'parameterization = "tied"\nwidth = 0.5\ninit_scale = 1.0',
             'parameterization = "identity"\nscale = 2.0'),
    ):
        path.write_text(variant)
        symattn.load_spec(path)


def test_learning_rate_needs_dim(tmp_path):
    path = tmp_path / "lr.toml"
    path.write_text(edit(VALID, "noise_ratio = 0.01", "learning_rate = 0.02"))
    spec = symattn.load_spec(path)
    assert spec.step_size(None) == 0.02
    assert spec.epsilon(100) == pytest.approx(0.02 * 100 / 512)
    with pytest.raises(symattn.SpecError, match="learning_rate"):
        spec.epsilon()


EXAMPLES = {
    "tied_h2_L1": dict(tokens=1, activation="h2", batch_size=64, noise_ratio=0.01,
                       idx=[("tied", 1.0, (1.0,)), ("tied", 0.5, (1.0,))]),
    "tied_softmax_L2": dict(tokens=2, activation="softmax", beta=1.0, batch_size=512, noise_ratio=0.01,
                            truncation=6, idx=[("tied", 1.0, (1.0,)), ("tied", 0.5, (1.0,))]),
    "direct_h2_L1": dict(tokens=1, activation="h2", idx=[("direct", 1.0, (0.5,)), ("tied", 0.5, (1.0,))]),
    "tied_linear_L1": dict(tokens=1, activation="linear", idx=[("tied", 1.0, (1.0,)), ("tied", 0.5, (1.0,))]),
    "untied_h2_L1": dict(tokens=1, activation="h2", idx=[("untied", 1.0, (1.0,)), ("untied", 1.0, (1.0,))]),
    "riccati": dict(tokens=1, loss="(G_1_1_1 - G_1_1_2)**2/2", weight_decay=0.0, truncation=8,
                    idx=[("tied", 0.5, (1.0,)), ("identity", 1.0, (1.0,))]),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_examples(name):
    spec = symattn.load_spec(ROOT / "examples" / f"{name}.toml")
    want = dict(EXAMPLES[name])
    idx = want.pop("idx")
    assert spec.name == name
    for k, v in want.items():
        assert getattr(spec, k) == v, k
    assert [(ix.parameterization, ix.width, ix.init_scale) for ix in spec.indices] == idx
    assert spec.students == [0] and spec.teachers == [1]
    if name == "riccati":
        assert spec.indices[1].scale == 1.0


def test_dict_and_spec_roundtrip():
    spec = symattn.load_spec(ROOT / "examples" / "tied_softmax_L2.toml")
    assert symattn.load_spec(spec) is spec
    again = symattn.load_spec(spec.raw)
    assert again.names == spec.names and again.beta == spec.beta and again.truncation == spec.truncation
