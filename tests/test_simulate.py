"""Online SGD simulator (symattn.simulate): exact step, initial drift vs docs/theory.md §3/§5, determinism, CLI."""
from __future__ import annotations

import numpy as np
import pytest

from symattn import load_spec
from symattn.derivation.potential import Potential
from symattn.errors import NumericalFailure
from symattn.simulation import Model, dense, draw_initial, order_parameters, simulate


def make_spec(student="tied", teacher="tied", L=1, act="h2", B=64, eps=0.001, gamma=0.0, **extra):
    model = {"tokens": L, "activation": act}
    st = {"name": "student", "role": "student", "parameterization": student}
    te = {"name": "teacher", "role": "teacher", "parameterization": teacher}
    if teacher == "tied":
        te["width"] = 0.5
    training = {"batch_size": B, "weight_decay": gamma}
    if eps is not None:
        training["noise_ratio"] = eps
    training.update(extra.pop("training", {}))
    model.update(extra.pop("model", {}))
    st.update(extra.pop("student_extra", {}))
    return load_spec({"name": "t", "model": model, "indices": [st, te], "training": training})


# ---------------------------------------------------------------------------- 1. exact SGD step
@pytest.mark.parametrize("student", ["direct", "tied", "untied"])
@pytest.mark.parametrize("act", ["softmax", "h2"])
def test_step_equals_finite_difference_gradient(student, act):
    d, B = 20, 3
    spec = make_spec(student, "tied", L=2, act=act, B=B, eps=0.05, gamma=0.7,
                     model={"token_covariance": [[1.0, 0.3], [0.3, 1.0]]},
                     student_extra={"init_scale": 0.7} if student != "untied" else {"init_scale": [0.8, 0.6]})
    rng = np.random.default_rng(3)
    m = Model(spec, d)
    init = draw_initial(spec, d, rng)
    m.set_state(init)
    X, xi = m.sample(rng)
    theta = m.get_state()
    m.step(X, xi)
    after = m.get_state()
    a, g = m.alpha, spec.weight_decay
    h = 1e-5
    for nm, th in theta[0].items():
        fd = np.zeros_like(th)
        for idx in np.ndindex(th.shape):
            vals = []
            for sgn in (1, -1):
                st = [{k: v.copy() for k, v in s.items()} for s in theta]
                st[0][nm][idx] += sgn * h
                m.set_state(st)
                vals.append(m.batch_loss(X, xi))
            fd[idx] = (vals[0] - vals[1]) / (2 * h)
        if student == "direct":
            fd = 0.5 * (fd + fd.T)       # symmetric gradient of a symmetric S
        expected = fd + g / d * th
        got = (th - after[0][nm]) / a
        assert np.linalg.norm(got - expected) <= 1e-6 * np.linalg.norm(expected), (nm, got.ravel()[:4], expected.ravel()[:4])
    for nm, th in theta[1].items():  # frozen teacher
        assert np.array_equal(th, after[1][nm])


def test_gradients_match_step_and_state_layout():
    spec = make_spec("untied", "tied", L=2, act="softmax", B=5)
    d = 12
    rng = np.random.default_rng(0)
    init = draw_initial(spec, d, rng)
    again = draw_initial(spec, d, np.random.default_rng(0))
    assert set(init[0]) == {"U", "V"} and set(init[1]) == {"W"}
    assert all(np.array_equal(init[k][n], again[k][n]) for k in range(2) for n in init[k])
    assert init[0]["U"].shape == (d, d) and init[1]["W"].shape == (d, 6)


# ---------------------------------------------------------------------------- 2. initial drift
def _mu3(Sa, Sb, Sc, d):
    return np.einsum("ij,jk,ki->", Sa, Sb, Sc) / d


def predicted_drift(spec, state, d, P=None):
    """d/dt of q_student_teacher, q_student_student, tr_student at t = 0 in package time, from the
    population flow with Γ(q) of the measured q and traces of the very initial matrices:
    tied  dS_0/dt = −4 Σ_l Γ_0l (S_l S_0 + S_0 S_l) − 2γ S_0;  direct  dS_0/dt = −2 Σ_l Γ_0l S_l − γ S_0."""
    op = order_parameters(spec, state, d)
    P = P or Potential(spec)
    Gm = P.gamma({n: op[n] for n in P.names})
    S = [dense(s) for s in state]
    gam = spec.weight_decay
    K = spec.K
    if spec.indices[0].parameterization == "tied":
        dS = -4 * sum(Gm[0, l] * (S[l] @ S[0] + S[0] @ S[l]) for l in range(K)) - 2 * gam * S[0]
    else:
        dS = -2 * sum(Gm[0, l] * S[l] for l in range(K)) - gam * S[0]
    return {"q_student_teacher": np.sum(dS * S[1]) / d,
            "q_student_student": 2 * np.sum(dS * S[0]) / d,
            "tr_student": np.trace(dS) / d}


def drift_check(spec, d, seeds, window, points=6, workers=None):
    res = simulate(spec, dim=d, seeds=seeds, time=window, points=points, workers=workers,
                   progress=False, test_samples=0, potential=False)
    t = res.table["time"]
    V = np.vander(t, 3, increasing=True)          # quadratic fit; slope at t = 0
    P = Potential(spec)
    pred = [predicted_drift(spec, draw_initial(spec, d, s), d, P) for s in res.seeds]
    out = {}
    for col in ("q_student_teacher", "q_student_student", "tr_student"):
        slopes = [np.linalg.lstsq(V, res.per_seed[col][i], rcond=None)[0][1] for i in range(len(res.seeds))]
        preds = [p[col] for p in pred]
        diff = np.array(slopes) - np.array(preds)
        out[col] = (np.mean(preds), np.mean(slopes), diff.mean(), diff.std(ddof=1) / np.sqrt(len(diff)))
    return out


# Cases: (student, L, activation, window, ε, B, finite-d allowance A: relative deviation A/d).
# The allowances are measured: the relative deviation of SGD's initial slope from the Γ(q) prediction times d, at
# d = 100 (8 seeds) and 200 (16 seeds): tied h2 7.1 / 2.9 (q_st 6.6 / 2.5, q_ss 3.7 / 1.7), tied softmax 5.5 / 4.7
# (q_st), direct softmax 1.6 / 2.0, direct h2 q_ss 17 / 1.4 (its seeds scatter by 5 % at d = 100); A is 1.5× the
# larger (direct h2 keeps 24). These are the O(1/d) non-Gaussianity of G = (x^T S x − C Tr S)/√d (docs/theory.md §7
# "finite-size corrections ... large constants") with the O(ε) Itô term (≈ −4 % for tied h2 at ε = 0.001). Windows
# are short against the drift time scale (q/|dq/dt| ≈ 0.0024 for h2, ≈ 0.6 for softmax) and a quadratic is fitted.
# A column is *tested* where its allowance 3·sem + (A/d)|pred| is at most a quarter of the drift it checks; the
# others (a drift of ≈ 0, as direct h2's q_st at its uninformative start, or one its seeds do not resolve) are only
# printed, and every case must test at least one column.
DRIFT_CASES = {
    "tied_h2_L1": ("tied", 1, "h2", 0.0005, 0.001, 64, 11.0),
    "tied_softmax_L2": ("tied", 2, "softmax", 0.004, 0.002, 256, 8.0),
    "direct_h2_L1": ("direct", 1, "h2", 0.0005, 0.001, 64, 24.0),
    "direct_softmax_L2": ("direct", 2, "softmax", 0.004, 0.002, 256, 4.0),
}


def _assert_drift(case, d, seeds):
    student, L, act, window, eps, B, A = DRIFT_CASES[case]
    spec = make_spec(student, "tied", L=L, act=act, B=B, eps=eps)
    out = drift_check(spec, d, seeds, window)
    report = {c: f"pred {p:.4g} meas {m:.4g} diff {df:.3g} ± {se:.2g}" for c, (p, m, df, se) in out.items()}
    print(case, d, seeds, report)
    tested = []
    for col, (pred, meas, diff, sem) in out.items():
        tol = 3 * sem + A / d * abs(pred)
        if tol <= abs(pred) / 4:
            tested.append(col)
            assert abs(diff) <= tol, (case, col, report[col], tol)
    print(f"  tested: {tested}")
    assert tested, (case, report)


@pytest.mark.parametrize("case", [c for c in DRIFT_CASES if c != "direct_h2_L1"])
def test_initial_drift_matches_population_flow(case):
    """d = 100, 8 seeds. Direct h2 runs at d = 200 only (slow): at d = 100 no column's allowance is within a quarter
    of its drift; the default run checks its limit drift against the exact population drift of its quadratic loss
    (tests/test_kinds.py)."""
    _assert_drift(case, d=100, seeds=8)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(DRIFT_CASES))
def test_initial_drift_matches_population_flow_large(case):
    _assert_drift(case, d=200, seeds=16)


# ---------------------------------------------------------------------------- 3. determinism, columns, failure
def test_determinism_parallel_equals_sequential():
    spec = make_spec("tied", "tied", L=2, act="softmax", B=32, eps=0.01)
    kw = dict(dim=24, seeds=2, time=0.05, points=4, progress=False, test_samples=256)
    a = simulate(spec, workers=1, **kw)
    b = simulate(spec, workers=2, **kw)
    c = simulate(spec, workers=1, **kw)
    for col in a.columns:
        assert np.array_equal(a.table[col], b.table[col]), col
        assert np.array_equal(a.table[col], c.table[col]), col
    assert a.per_seed["q_student_teacher"].shape == (2, 4)
    # the initial point is the state draw_initial gives for that seed (docs/theory.md §7 sampled initial conditions)
    op = order_parameters(spec, draw_initial(spec, 24, 1), 24)
    assert a.per_seed["q_student_student"][1, 0] == pytest.approx(op["q_student_student"], rel=1e-12)
    assert a.table["time"][-1] == pytest.approx(0.05, rel=0.05)


def test_untied_columns_and_csv(tmp_path):
    spec = make_spec("untied", "tied", L=1, act="h2", B=16, eps=0.01, gamma=0.1)
    res = simulate(spec, dim=20, seeds=2, time=0.02, points=3, progress=False, test_samples=128)
    for c in ["time", "tr_student", "m_student", "trA_student", "trB_student", "tr_teacher",
              "q_student_student", "p_student_student", "q1_student_student", "q2_student_student",
              "q_student_teacher", "p_student_teacher", "q_teacher_teacher", "loss", "test_loss",
              "q1_student_student_sem", "loss_sem", "test_loss_sem"]:
        assert c in res.columns, c
    assert set(Potential(spec).names) <= set(res.columns)
    # factor-identity traces equal the dense ones
    st = draw_initial(spec, 20, 0)
    op = order_parameters(spec, st, 20)
    S, T = dense(st[0]), dense(st[1])
    assert op["q1_student_student"] == pytest.approx(np.sum(S * S) / 20)
    assert op["q2_student_student"] == pytest.approx(np.trace(S @ S) / 20)
    assert op["q_student_teacher"] == pytest.approx(np.trace(S @ T) / 20)
    assert op["m_student"] == pytest.approx(np.trace(S) / np.sqrt(20))
    assert res.per_seed["q1_student_student"][0, 0] == pytest.approx(op["q1_student_student"])
    path = tmp_path / "sim.csv"
    res.to_csv(path)
    lines = path.read_text().splitlines()
    assert lines[0].split(",") == res.columns and len(lines) == 4
    one = simulate(spec, dim=20, seeds=1, time=0.01, points=2, progress=False, test_samples=64)
    assert np.all(one.table["q_student_teacher_sem"] == 0)


def test_mixed_parameterizations_traces():
    spec = load_spec({"name": "mix", "model": {"tokens": 1, "activation": "linear"}, "indices": [
        {"name": "a", "role": "student", "parameterization": "direct"},
        {"name": "b", "role": "student", "parameterization": "untied", "width": 0.5},
        {"name": "c", "role": "student", "parameterization": "tied", "width": 0.7},
        {"name": "t", "role": "teacher", "parameterization": "identity", "scale": 0.5}],
        "training": {"batch_size": 4}})
    d = 10
    st = draw_initial(spec, d, np.random.default_rng(5))
    op = order_parameters(spec, st, d)
    S = [dense(s) for s in st]
    names = spec.names
    for a in range(4):
        for b in range(a, 4):
            assert op[f"q_{names[a]}_{names[b]}"] == pytest.approx(np.trace(S[a] @ S[b]) / d, rel=1e-10, abs=1e-12)


def test_divergence_raises_numerical_failure():
    spec = make_spec("tied", "tied", L=1, act="h2", B=8, eps=None, training={"learning_rate": 1e4})
    with pytest.raises(NumericalFailure) as exc:
        simulate(spec, dim=20, seeds=1, time=1e3, points=3, progress=False)
    msg = str(exc.value)
    assert "step n = " in msg and "time = " in msg and "learning_rate" in msg
    assert exc.value.time is not None


def test_invalid_options_raise_value_error_naming_the_parameter():
    spec = make_spec()
    for kw, opt in [({"dim": 0}, "dim"), ({"dim": 10, "seeds": 0}, "seeds"),
                    ({"dim": 10, "time": -1.0}, "time"), ({"dim": 10, "points": 0}, "points"),
                    ({"dim": 10, "workers": 0}, "workers"), ({"dim": 10, "backend": "cupy"}, "backend"),
                    ({"dim": 10, "dtype": "float16"}, "dtype")]:
        with pytest.raises(ValueError, match=f"^{opt}"):
            simulate(spec, **{"time": 0.01, **kw})


# ---------------------------------------------------------------------------- 4. CLI
def test_cli_smoke(tmp_path, capsys):
    spec_file = tmp_path / "s.toml"
    spec_file.write_text('name = "cli"\n[model]\ntokens = 2\nactivation = "softmax"\n'
                         '[[indices]]\nname = "student"\nrole = "student"\nparameterization = "tied"\n'
                         '[[indices]]\nname = "teacher"\nrole = "teacher"\nparameterization = "tied"\nwidth = 0.5\n'
                         '[training]\nbatch_size = 16\nnoise_ratio = 0.01\n')
    from symattn.cli import main
    out = tmp_path / "o.csv"
    assert main(["simulate", str(spec_file), "--dim", "16", "--seeds", "2", "--time", "0.02",
                 "--points", "3", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    header = out.read_text().splitlines()[0].split(",")
    assert header[0] == "time" and "q_student_teacher_sem" in header
    assert main(["simulate", str(spec_file), "--dim", "-3"]) == 2
    assert "--dim" in capsys.readouterr().err
    assert main(["simulate", str(spec_file)]) == 2
    assert "--dim" in capsys.readouterr().err


def test_runs_at_different_dimensions_are_independent():
    """Seed policy (simulation.init): the streams derive from (seed, d, purpose, index), so the
    initial q_student_student of seed s at d = 20 and at d = 40 are independent draws. Over 400
    seeds the correlation must be within 3 standard errors (3/√400 = 0.15) of 0; the former
    policy (one default_rng(s) stream at every d) correlates them strongly (measured below)."""
    spec = make_spec("tied", "tied", L=1, act="h2")
    seeds = range(400)

    def q(d, how):
        return np.array([order_parameters(spec, draw_initial(spec, d, how(s)), d)["q_student_student"]
                         for s in seeds])
    new = np.corrcoef(q(20, int), q(40, int))[0, 1]
    old = np.corrcoef(q(20, np.random.default_rng), q(40, np.random.default_rng))[0, 1]
    assert abs(new) < 0.15, new
    assert old > 0.3, old                     # the test detects shared streams
    # simulate starts seed s from exactly draw_initial(spec, d, s)
    res = simulate(spec, dim=20, seeds=2, time=0.002, points=2, progress=False, workers=1)
    for j, s in enumerate(res.seeds):
        want = order_parameters(spec, draw_initial(spec, 20, s), 20)["q_student_student"]
        assert res.per_seed["q_student_student"][j, 0] == want


@pytest.mark.parametrize("backend", ["numpy", pytest.param("torch", marks=pytest.mark.torch)])
def test_label_noise_has_its_exact_effect_on_the_loss(backend):
    """With the student equal to the teacher the per-sample ½-MSE is ½ξ², ξ ~ N(0, Δ): its mean over the samples a
    simulator draws (the ones SGD trains on) is Δ/2, the label-noise term of Φ at q_ss = q_st = q_tt. Δ = 0.25,
    4·10⁴ samples: standard error Δ/√(2·4·10⁴) = 8.8·10⁻⁴; allowance 4 of them (a draw with standard deviation Δ
    instead of √Δ gives Δ²/2 = 0.031 against 0.125)."""
    delta, d, n = 0.25, 30, 40_000
    spec = make_spec(act="h2", B=1000, model={"label_noise": delta}, student_extra={"width": 0.5})
    state = draw_initial(spec, d, 0)
    state[0] = {k: v.copy() for k, v in state[1].items()}          # the student is the teacher
    rng = np.random.default_rng(5)
    if backend == "numpy":
        m = Model(spec, d)
        m.set_state(state)
        losses = np.concatenate([m.per_sample_loss(*m.sample(rng)) for _ in range(n // spec.batch_size)])
    else:
        import torch

        from symattn.simulation.torch_backend import TorchModel
        m = TorchModel(spec, d, seeds=1, device="cpu", dtype="float64")
        m.set_state([state])
        gen = torch.Generator().manual_seed(5)
        losses = np.concatenate([m.per_sample_loss(*m.sample(gen)).cpu().numpy().ravel()
                                 for _ in range(n // spec.batch_size)])
    P = Potential(spec)
    q = order_parameters(spec, state, d)
    theory = P.value({n_: q[n_] for n_ in P.names})
    assert theory == pytest.approx(delta / 2, rel=1e-12)
    se = losses.std() / np.sqrt(losses.size)
    assert abs(losses.mean() - theory) < 4 * se, (losses.mean(), theory, se)


def test_numpy_and_torch_models_share_one_protocol():
    """Both SGD models implement ``simulation.protocol.SGDModel`` — every method, with the same positional
    parameters (the torch class is inspected without importing torch) —, and a NumPy Model is one at run time."""
    import inspect

    from symattn.simulation.protocol import METHODS, SGDModel
    from symattn.simulation.torch_backend import TorchModel
    for name in METHODS:
        want = len(inspect.signature(getattr(SGDModel, name)).parameters)
        for cls in (Model, TorchModel):
            assert callable(getattr(cls, name, None)), (cls.__name__, name)
            assert len(inspect.signature(getattr(cls, name)).parameters) == want, (cls.__name__, name)
    assert isinstance(Model(load_spec("tied_h2_L1_small"), 20), SGDModel)


def test_simulate_is_a_plan_run_by_one_executor():
    """``simulate`` = ``plan_simulation`` (checks, steps, Φ) + the executor the plan picks: sequential for one
    worker, a forked pool for several, torch for the torch backend; the plan's steps are the result's."""
    from symattn.simulation.executors import ForkPool, Sequential, executor_for
    from symattn.simulation.plan import plan_simulation
    spec = load_spec("tied_h2_L1_small")
    one = plan_simulation(spec, 30, seeds=2, time=0.02, points=3, workers=1, potential=False)
    two = plan_simulation(spec, 30, seeds=2, time=0.02, points=3, workers=2, potential=False)
    assert isinstance(executor_for(one), Sequential) and isinstance(executor_for(two), ForkPool)
    res = simulate(spec, dim=30, seeds=2, time=0.02, points=3, workers=2, progress=False, potential=False)
    assert np.array_equal(res.steps, two.steps) and np.allclose(res["time"], two.times)
