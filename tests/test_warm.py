"""A warm ``theory`` (the derivation, the module and the orders of the spec's state stored before): no SymPy is
imported and nothing is derived, and it computes exactly what the cold run computes.

A warm run reads the system's plain record (``codegen.warm.SystemRecord``, holding the compiled potential's
``codegen.potential.PotentialRecord``) in place of the pickled derivation — the matrix-level flow its potential,
a moment hierarchy the whole system; these tests hold the record to the Python potential it was made from —
names, the gradient split, the existence checks — and the whole table to the cold run's, bit for bit.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from symattn.codegen.potential import compiled_potential
from symattn.spec import ACTIVATIONS, load_spec

BLOCKED = "import sys; sys.modules['sympy'] = None\nfrom symattn.cli import main\nsys.exit(main(sys.argv[1:]))"


def _theory(args, cache, block=False):
    env = dict(os.environ, SYMATTN_CACHE=str(cache), OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-c", BLOCKED] if block else [sys.executable, "-m", "symattn"]
    return subprocess.run(cmd + ["theory", *map(str, args)], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", ["tied_softmax_L2", "tied_h2_L1_small"])
def test_a_warm_theory_imports_no_sympy_and_reproduces_the_cold_run(name, tmp_path):
    """Cold (empty store: derives, compiles, calibrates), then warm with SymPy made unimportable: the warm process
    succeeds and writes the same bytes. A state not calibrated yet (another σ) is calibrated from the record by the
    module's kernels, SymPy still blocked (``codegen.warm.SystemRecord.calibrate``), and writes the bytes of a cold
    run at that σ in an empty store (the derivation's calibration); a third run there is warm."""
    cache = tmp_path / "cache"
    args = [name, "--time", "0.05", "--points", "6", "--quiet"]
    cold = _theory([*args, "--out", tmp_path / "cold.csv"], cache)
    assert cold.returncode == 0, cold.stderr
    warm = _theory([*args, "--out", tmp_path / "warm.csv"], cache, block=True)
    assert warm.returncode == 0, warm.stderr
    assert (tmp_path / "warm.csv").read_bytes() == (tmp_path / "cold.csv").read_bytes()
    other = [*args, "--set", "indices.student.init_scale=1.1"]
    new = _theory([*other, "--out", tmp_path / "new.csv"], cache, block=True)
    assert new.returncode == 0, new.stderr
    fresh = _theory([*other, "--out", tmp_path / "fresh.csv"], tmp_path / "empty")
    assert fresh.returncode == 0, fresh.stderr
    assert (tmp_path / "new.csv").read_bytes() == (tmp_path / "fresh.csv").read_bytes()
    again = _theory([*other, "--out", tmp_path / "again.csv"], cache, block=True)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again.csv").read_bytes() == (tmp_path / "new.csv").read_bytes()


@pytest.mark.parametrize("args", [
    ["direct_h2_L1_small"],                                                   # closed at M = 2, polynomial
    ["general_softmax_L2", "--set", "training.noise_ratio=0.2"],              # closed; quadrature Φ and ν
    ["tied_h2_L1_small", "--method", "moments", "--truncation", "4"],         # truncated, with its companion M = 2
    ["untied_h2_L1", "--size", "32"],                                         # slaved means: Φ's Hessian in m
    ["untied_h2_L1", "--method", "moments"],
    ["untied_h2_L1", "--fast"],
    ["tied_h2_L1_small", "--exact-finite-d", "--dim", "40"],                  # the finite-d polynomial, stored
], ids=["direct", "general-noise", "tied-moments", "untied", "untied-moments", "untied-fast", "finite-d"])
def test_every_warm_method_imports_no_sympy_and_reproduces_the_cold_run(args, tmp_path):
    """The system of a warm run is rebuilt from its plain record (``codegen.warm.SystemRecord``), a hierarchy's
    companion truncation too, an untied student's slaved means take Φ's exact Hessian in the means from the
    module (``phi_mean_hessian``), and the exact finite-d flow reads its polynomial from the store
    (``FiniteDPotential.stored``): with SymPy made unimportable the process succeeds and writes the cold run's bytes;
    it runs the same compiled functions with the same quadrature orders and noise values."""
    cache = tmp_path / "cache"
    args = [*args, "--time", "0.2", "--points", "6", "--quiet"]
    cold = _theory([*args, "--out", tmp_path / "cold.csv"], cache)
    assert cold.returncode == 0, cold.stderr
    warm = _theory([*args, "--out", tmp_path / "warm.csv"], cache, block=True)
    assert warm.returncode == 0, warm.stderr
    assert (tmp_path / "warm.csv").read_bytes() == (tmp_path / "cold.csv").read_bytes()


@pytest.mark.parametrize("model", [{"tokens": 1, "activation": "h2"}, {"tokens": 1, "activation": "tanh"}],
                         ids=["closed-form", "quadrature"])
def test_the_compiled_mean_hessian_is_the_exact_one(model, tmp_path, monkeypatch):
    """``phi_mean_hessian`` of an untied model's module (closed form printed; a quadrature term's μ_aᵀE[∇²f]μ_b as
    twice its kernel's derivative along an added covariance direction, Price's theorem) against the Python
    potential's exact ``mean_hessian`` (SymPy's second derivatives, the Python quadrature's E∇²f), to 1e-12; and
    against central differences of the compiled gradient in the means (an independent route: agreement to the
    O(h²) = 1e-8 of the difference, relative)."""
    from symattn.derivation import derive
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    spec = load_spec({**load_spec("untied_h2_L1").raw, "model": model})
    P = compiled_potential(spec)
    ref = derive(spec, 2).potential
    pos = [i for i, n in enumerate(ref.names) if n.startswith("m_")]
    assert len(pos) == 2 and bool(ref.base_terms) == (model["activation"] == "tanh")
    rng = np.random.default_rng(3)
    for _ in range(3):
        theta = np.abs(rng.standard_normal(len(ref.names))) * 0.3 + 0.1
        theta[pos] = rng.standard_normal(2) * 0.5
        H, want = P.mean_hessian(theta, pos), ref.mean_hessian(theta, pos)
        assert np.max(np.abs(H - want)) <= 1e-12 * (1 + np.max(np.abs(want)))
        assert np.allclose(P.mean_hessian(theta, pos[::-1]), H[::-1, ::-1], rtol=0, atol=0)   # any order of means
        h, fd = 1e-4, np.zeros((2, 2))
        for j, p in enumerate(pos):
            up, down = theta.copy(), theta.copy()
            up[p] += h
            down[p] -= h
            fd[:, j] = (P.value_and_gradient(up)[1][pos] - P.value_and_gradient(down)[1][pos]) / (2 * h)
        assert np.max(np.abs(fd - H)) <= 1e-7 * (1 + np.max(np.abs(H)))


@pytest.mark.parametrize("model,states", [
    ({"tokens": 2, "activation": "softmax"}, [("indices.student.init_scale=0.3", "model.beta=0.5"),
                                              ("indices.student.init_scale=1.4", "model.beta=2.0")]),
    ({"tokens": 1, "activation": "relu"}, [("indices.student.init_scale=0.4",), ("indices.student.init_scale=1.6",)]),
], ids=["softmax", "relu-kink"])
@pytest.mark.filterwarnings("ignore:quadrature reached only")      # the kink's node cap, the same in both
def test_a_new_state_is_calibrated_from_the_record_as_from_the_derivation(model, states, tmp_path, monkeypatch):
    """``SystemRecord.calibrate`` (a warm run at a state not seen before: the record's term data, the module's
    kernels, no SymPy) chooses the orders that the derived system's calibration by the same kernels chooses
    (``codegen.systems.calibrated_orders``), for Φ and ν, at other σ and β — a smooth (softmax) and a kinked (ReLU,
    Stein's lemma) loss."""
    from symattn.codegen.systems import calibrated_orders
    from symattn.codegen.warm import runnable
    from symattn.derivation import derive, store
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    raw = {**load_spec("tied_h2_L1_small").raw, "model": model}
    first = runnable(load_spec(raw), 2)                             # cold: derives, compiles, stores the record
    module = first._module
    for sets in states:
        spec = load_spec(raw, list(sets))
        record = store.load_record(store.key(spec, 2, 1e-8))
        assert record.potential.orders_at(spec) is None              # a state the record has not seen
        plain = record.calibrate(spec, module)
        want = calibrated_orders(derive(spec, 2), mod=module)
        assert plain == want and set(plain) >= {"phi_and_grad"}, (sets, plain, want)


def test_the_record_is_the_python_potential(tmp_path, monkeypatch):
    """The warm compiled potential (from the record) against the Python potential of the same spec: the same names
    and order-parameter names, the same split of the same gradient, Φ and ∇Φ to the quadrature's rounding (1e-10),
    and — for F(z) = exp(z²/16), whose expectation exists only while Var G < 4 — the same refusal, word for word, at
    a state on the bound."""
    from symattn.derivation import derive
    from symattn.errors import ExpectationUndefined
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    for raw in ("tied_softmax_L2", {**load_spec("tied_h2_L1_small").raw,
                                    "model": {"tokens": 1, "activation": "exp(z**2/16)"}}):
        spec = load_spec(raw)
        compiled_potential(spec)                                  # cold: derives and stores the record
        P = compiled_potential(spec)                              # warm: from the record
        assert P._system is None, "the warm potential must not have loaded the derivation"
        ref = derive(spec, 2).potential
        assert P.names == tuple(ref.names)
        K = spec.K
        for a in range(K):
            assert P.op.m(a) == (0 if ref.op.m(a) == 0 else ref.op.m(a))
            for b in range(K):
                assert P.op.omega(a, b).name == ref.op.omega(a, b).name
                assert P.op.psi(a, b).name == ref.op.psi(a, b).name
        rng = np.random.default_rng(0)
        theta = np.abs(rng.standard_normal(len(ref.names))) * 0.2 + 0.1
        val, grad = P.value_and_gradient(theta)
        rval, rgrad = ref.value_and_gradient(theta)
        scale = 1 + abs(rval) + np.max(np.abs(rgrad))
        assert abs(val - rval) <= 1e-10 * scale and np.max(np.abs(grad - rgrad)) <= 1e-10 * scale
        for got, want in zip(P.split_gradients(rgrad[None]), ref.split_gradients(rgrad[None])):
            assert np.array_equal(got, want)
        g, h = P.split_gradient(rgrad), ref.split_gradient(rgrad)
        assert np.array_equal(g.m, h.m) and np.array_equal(g.gamma, h.gamma)
        if spec.activation != "softmax":
            edge = dict(zip(ref.names, theta))
            edge["q_student_student"] = 2.0                       # Var G_s = 2 q_ss = 4: on the bound
            with pytest.raises(ExpectationUndefined) as want:
                ref.check_existence(ref.theta(edge))
            with pytest.raises(ExpectationUndefined) as got:
                P.check_existence(P.theta(edge))
            assert str(got.value) == str(want.value) and "1/(2c) = 4" in str(got.value)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_a_named_activation_never_jumps(activation):
    """The command line skips the SymPy continuity check (``Loss.require_pathwise_gradient``) for a named
    activation's loss (``Spec.expression_loss``): the check passes for every one of them, so skipping it changes
    nothing; an expression is still checked (tests/test_faults.py: a jump activation's dynamics are refused)."""
    from symattn.symbolic.loss import build_loss
    spec = load_spec({**load_spec("tied_softmax_L2").raw, "model": {"tokens": 2, "activation": activation}})
    assert not spec.expression_loss
    build_loss(spec).require_pathwise_gradient()


def test_two_states_of_one_module_used_in_turn(tmp_path, monkeypatch):
    """Two σ of tied softmax L = 2 share one compiled module, whose quadrature orders are set per β, and need
    different orders; evaluated in turn, each potential gives bit for bit what it gave alone (Φ, ∇Φ, ν): every
    evaluation sets its own state's orders."""
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    raw = load_spec("tied_softmax_L2").raw
    wide = {**raw, "indices": [{**raw["indices"][0], "init_scale": 1.5}, *raw["indices"][1:]]}
    theta = np.array([0.9, 1.1, 0.4, 0.3, 0.2, 0.8])[:len(compiled_potential(load_spec(raw)).names)]

    def values(P):
        v, g = P.value_and_gradient(theta)
        return v, g, P.gradient_matrices(theta[None])[0], {n: E.value(theta) for n, E in P.nu.items()}

    a = compiled_potential(load_spec(raw))
    alone_a = values(a)
    b = compiled_potential(load_spec(wide))
    alone_b = values(b)
    assert a.order != b.order and a._phi_and_grad is b._phi_and_grad
    for P, alone in ((a, alone_a), (b, alone_b), (a, alone_a)):
        got = values(P)
        assert got[0] == alone[0] and np.array_equal(got[1], alone[1]) and np.array_equal(got[2], alone[2])
        assert got[3] == alone[3]
    assert alone_a[0] != alone_b[0]       # the two orders give different sums: the test can tell them apart


def test_a_feature_covariance_law_is_part_of_the_stored_derivation(tmp_path, monkeypatch):
    """The initial laws of the indices are run-time data, the feature covariance's is not: a hierarchy's p_ columns
    are centred with its φ(Σ²) (``pair_columns``). Two specs differing only in Σ's law therefore derive two stored
    systems, each centring with its own φ(Σ²) — one store entry for both would centre the second with the first's."""
    from symattn.derivation import derive, store
    from symattn.derivation.system import CENTRED
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    specs = [load_spec("tied_h2_L1_small", [f"model.feature_covariance={law}"])
             for law in ('{law="power",exponent=0.2}', '{law="two_level",ratio=3.0,weight=0.25}')]
    assert specs[0].features.second_moment != specs[1].features.second_moment
    assert store.key(specs[0], 4, 1e-8) != store.key(specs[1], 4, 1e-8)
    from symattn.codegen.systems import compiled
    for spec in specs:
        system = derive(spec, 4)
        compiled(system)                                          # stores it: the next spec would load it if shared
        centred = [c for c in system.columns if c.source == CENTRED]
        assert centred and all(c.args[3] == spec.features.second_moment for c in centred)
    wider = load_spec("tied_h2_L1_small", ['model.feature_covariance={law="power",exponent=0.2}',
                                           "indices.student.init_scale=1.3"])
    assert store.key(wider, 4, 1e-8) == store.key(specs[0], 4, 1e-8)      # σ: run-time data
