"""Generated modules: re-deriving an example reproduces generated/ byte for byte, and the
compiled right-hand side equals the reference (pure NumPy) implementation of the same system."""
import tomllib
from pathlib import Path

import numpy as np
import pytest

from symattn.codegen.load import import_module
from symattn.codegen.systems import module_file, source
from symattn.derivation import derive
from symattn.derivation import state as R

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {tomllib.loads(p.read_text())["name"]: p for p in (ROOT / "examples").glob("*.toml")}
# the committed modules (a fixed list: modules a user derives into generated/ are not tests)
COMMITTED = ["direct_h2_L1_M2", "riccati_M8", "tied_h2_L1_M4", "tied_linear_L1_M4", "tied_softmax_L2_M6"]
GENERATED = [ROOT / "generated" / f"{name}.py" for name in COMMITTED]


def _spec_and_M(path):
    name, M = path.stem.rsplit("_M", 1)
    return EXAMPLES[name], int(M)


def test_every_generated_module_has_an_example():
    for path in GENERATED:
        assert path.is_file(), path
        _spec_and_M(path)


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.stem)
def test_rederive_is_byte_identical_and_matches_reference(path):
    spec, M = _spec_and_M(path)
    system = derive(spec, M)
    assert system.truncation == M
    assert module_file(system) == path.read_text(), f"re-derive with `symattn derive {spec.relative_to(ROOT)}`"
    mod = import_module(path)
    mu = R.initial(system, "free")
    rng = np.random.default_rng(0)
    mu_pert = mu * (1 + 0.05 * rng.standard_normal(mu.shape))   # off the free manifold too
    mu_pert[0] = 1.0
    for m in (mu, mu_pert):
        for eps in (0.0, 0.05):
            params = R.params(system, eps, m)                 # the non-polynomial ν at this state
            if hasattr(mod, "noise_values") and eps:
                np.testing.assert_allclose(mod.noise_values(m, params[2:4]), params[4:], rtol=1e-12)
            ref = R.rhs(system, 0.0, m, params)
            got = mod.rhs(0.0, m, params)
            assert np.array_equal(got, mod.rhs(0.0, m, params))    # pure: no state kept between calls
            tol = 1e-9                                              # the same quadrature rules in both
            assert np.allclose(got, ref, rtol=tol, atol=tol * (1 + np.abs(ref).max()))


def test_module_identity_is_the_model_structure(tmp_path, monkeypatch):
    """ε, B, γ, the spec's name and its initial laws are run-time data: a spec differing only in
    them derives the same module source, and a second `theory` run with another ε adds no module
    to the cache and no derived system to the store (it loads the first run's)."""
    import tomllib

    from symattn.cli import main
    from symattn.spec import load_spec
    raw = tomllib.loads(EXAMPLES["tied_linear_L1"].read_text())
    other = {**raw, "name": "renamed", "training": {"batch_size": 7, "noise_ratio": 0.123, "weight_decay": 0.5}}
    a, b = derive(load_spec(raw), 4), derive(load_spec(other), 4)
    assert source(a) == source(b)
    cache = tmp_path / "cache"
    monkeypatch.setenv("SYMATTN_CACHE", str(cache))
    import sys
    for name in [n for n in sys.modules if n.startswith("symattn_generated_")]:   # compiled earlier in this process:
        monkeypatch.delitem(sys.modules, name)                                   # it must be written to this cache
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    text = EXAMPLES["tied_h2_L1"].read_text()
    first.write_text(text)
    import re
    second.write_text(re.sub(r"noise_ratio = [0-9.e-]+", "noise_ratio = 0.0371", text))
    assert "0.0371" in second.read_text()
    assert main(["theory", str(first), "--method", "moments", "--time", "0.001", "--points", "2", "--quiet", "--out", str(tmp_path / "1.csv")]) == 0
    before = sorted(p.name for p in cache.rglob("m_*.py"))
    stored = sorted(p.name for p in cache.rglob("d_*.pkl"))
    assert main(["theory", str(second), "--method", "moments", "--time", "0.001", "--points", "2", "--quiet", "--out", str(tmp_path / "2.csv")]) == 0
    assert sorted(p.name for p in cache.rglob("m_*.py")) == before and before
    assert sorted(p.name for p in cache.rglob("d_*.pkl")) == stored and stored   # nor a new derivation
    assert (tmp_path / "1.csv").read_text() != (tmp_path / "2.csv").read_text()   # ε did change the answer
