"""Residual attention with value matrices (docs/theory.md §10): the unrolling, Φ in the Gaussian limit,
the SGD step on the recursion and the matrix-level flow, each against an independent computation."""
import math
import sys

import numpy as np
import pytest

from symattn.architecture import GaussianLimit, load_residual, unroll
from symattn.architecture import network as nw
from symattn.architecture.limit import compiled_loss_gradient
from symattn.errors import NumericalFailure, SpecError

EXAMPLE = "residual_tied_softmax_L2"


def _spec(**over):
    raw = load_residual(EXAMPLE).raw
    raw = {**raw, **over}
    return load_residual(raw)


def _head(kq, v):
    return {"key_query": kq, "value": v}


# architectures beyond the example: two heads (untied key–query, identity value), two hidden layers with
# L = 3 and an element-wise readout, a direct readout with a frozen value
VARIANTS = {
    "example": load_residual(EXAMPLE).raw,
    "two_heads": {
        "name": "two_heads", "model": {"tokens": 3, "activation": "softmax", "beta": 0.7},
        "student": {"layers": [{"heads": [_head({"parameterization": "untied", "init_scale": [1.0, 0.8]},
                                                {"parameterization": "identity", "scale": 0.5}),
                                          _head({"parameterization": "tied", "width": 0.5},
                                                {"parameterization": "general", "init_scale": 0.4})]}],
                    "readout": [{"parameterization": "tied"}]},
        "teacher": {"readout": [{"parameterization": "tied", "width": 0.5}]}},
    "deep_h2": {
        "name": "deep_h2", "model": {"tokens": 2, "activation": "h2", "beta": 0.8},
        "student": {"layers": [{"heads": [_head({"parameterization": "tied"}, {"parameterization": "general",
                                                                                "init_scale": 0.3})]},
                               {"heads": [_head({"parameterization": "direct", "init_scale": 0.7},
                                                {"parameterization": "general", "init_scale": 0.3,
                                                 "trained": False})]}],
                    "readout": [{"parameterization": "tied", "width": 0.5}]},
        "teacher": {"layers": [{"heads": [_head({"parameterization": "tied", "width": 0.5},
                                                {"parameterization": "general", "init_scale": 0.5})]}],
                    "readout": [{"parameterization": "tied", "width": 0.5}]}},
}


@pytest.fixture(scope="module")
def example():
    spec = load_residual(EXAMPLE)
    u = unroll(spec)
    return spec, u, GaussianLimit(u, points=2**12, replicas=4)


def test_spec_errors_name_the_key():
    raw = load_residual(EXAMPLE).raw
    bad = {**raw, "student": {**raw["student"], "layers": [{"heads": [{"key_query": {"parameterization": "tied"},
                                                                       "value": {"parameterization": "nope"}}]}]}}
    with pytest.raises(SpecError, match=r"student\.layers\[0\]\.heads\[0\]\.value\.parameterization"):
        load_residual(bad)
    with pytest.raises(SpecError, match=r"teacher\.readout\[0\]\.trained: a teacher factor is frozen"):
        load_residual({**raw, "teacher": {"readout": [{"parameterization": "tied", "trained": True}]}})
    with pytest.raises(SpecError, match=r"student\.readout\[0\]\.widht: unknown key"):
        load_residual({**raw, "student": {"readout": [{"parameterization": "tied", "widht": 1}]}})
    with pytest.raises(SpecError, match=r"student: no factor is trained"):
        load_residual({**raw, "student": {"readout": [{"parameterization": "tied", "trained": False}]}})


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_unrolled_loss_is_the_recursion(name):
    """The unrolled 𝓛(G) at the G of a batch equals the loss of the residual recursion (an identity at
    every finite d: rounding only)."""
    spec = load_residual(VARIANTS[name])
    u = unroll(spec)
    d = 40
    mats = nw.matrices(spec, nw.draw_factors(spec, d, 3))
    X = np.random.default_rng(0).standard_normal((16, spec.tokens, d))
    direct = nw.batch_loss(spec, mats, X)
    G = nw.index_values(u, mats, X).reshape(16, -1)
    out = np.empty((16, G.shape[1] + 1))
    compiled_loss_gradient(u, jit=False)(G, out)
    assert np.abs(out[:, 0] - direct).max() < 1e-12 * max(1.0, np.abs(direct).max())


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.torch
def test_recursion_gradient_is_the_word_chain_rule(name):
    """∂(batch loss)/∂factors by reverse mode through the recursion equals the chain rule the flow uses:
    ∂𝓛/∂G of the unrolled loss → ∂/∂M_w = mean_b (X_bᵀ e_b X_b − tr(e_b) I)/√d → words → kinds."""
    torch = pytest.importorskip("torch")
    from symattn.architecture import sgd
    spec = load_residual(VARIANTS[name])
    u = unroll(spec)
    d, B = 30, 8
    states = nw.draw_factors(spec, d, 5)
    mats = nw.matrices(spec, states)
    X = np.random.default_rng(1).standard_normal((B, spec.tokens, d))
    _, auto = sgd.loss_and_gradients(spec, sgd.to_tensors(states, set(spec.trained)), torch.tensor(X))
    G = nw.index_values(u, mats, X).reshape(B, -1)
    out = np.empty((B, G.shape[1] + 1))
    compiled_loss_gradient(u, jit=False)(G, out)
    L, K = spec.tokens, u.K
    e = out[:, 1:].reshape(B, L, L, K)
    gw = [(np.einsum("bia,bij,bjc->ac", X, e[..., k], X) - np.trace(e[..., k], axis1=1, axis2=2).sum() * np.eye(d))
          / (B * math.sqrt(d)) for k in range(K)]
    gm = u.word_pullback(mats, gw)
    for n in spec.trained:
        chain = spec.factors[n].kind.pullback(states[n], gm[n])
        for f, g in chain.items():
            a = auto[n][f].numpy()
            assert np.abs(a - g).max() < 1e-10 * max(1.0, np.abs(a).max()), (n, f)


@pytest.mark.torch
def test_sgd_step_is_minus_alpha_times_the_finite_difference_gradient():
    """θ_new − θ_old = −α(∇θ + (γ/d)θ), ∇θ checked along random directions against central finite
    differences of the batch loss (h = 1e-5: truncation error h² ~ 1e-10 relative)."""
    torch = pytest.importorskip("torch")
    from symattn.architecture import sgd
    spec = _spec(training={"batch_size": 7, "noise_ratio": 0.3, "weight_decay": 0.5})
    d = 24
    states = nw.draw_factors(spec, d, 2)
    X = torch.tensor(np.random.default_rng(4).standard_normal((7, 2, d)))
    ts = sgd.to_tensors(states, set(spec.trained))
    alpha = spec.step_size(d)
    sgd.sgd_step(spec, ts, X, alpha)
    new = sgd.numpy_states(ts)
    rng = np.random.default_rng(9)

    def loss_at(st):
        return float(nw.batch_loss(spec, nw.matrices(spec, st), X.numpy()).mean())

    for n in spec.trained:
        for f in states[n]:
            for _ in range(2):
                D = rng.standard_normal(states[n][f].shape)
                h = 1e-5
                plus = {k: dict(v) for k, v in states.items()}
                minus = {k: dict(v) for k, v in states.items()}
                plus[n][f] = states[n][f] + h * D
                minus[n][f] = states[n][f] - h * D
                fd = (loss_at(plus) - loss_at(minus)) / (2 * h)
                step = (states[n][f] - new[n][f]) / alpha - spec.weight_decay / d * states[n][f]
                assert abs(np.vdot(step, D) - fd) < 1e-6 * max(1.0, abs(fd)), (n, f)


def test_phi_gradient_is_the_derivative_of_the_estimate(example):
    """∂Φ/∂θ (Daleckii–Krein through Σ^{1/2}) equals central differences of the same fixed-point Φ."""
    spec, u, lim = example
    d = 120
    theta = lim.values(u.word_matrices(nw.matrices(spec, nw.draw_factors(spec, d, 0))), d)
    _, g = lim.phi_and_grad(theta)
    rng = np.random.default_rng(0)
    for _ in range(4):
        D = rng.standard_normal(len(theta))
        h = 1e-5
        fd = (lim.phi_and_grad(theta + h * D)[0] - lim.phi_and_grad(theta - h * D)[0]) / (2 * h)
        assert abs(g @ D - fd) < 1e-6 + 1e-4 * abs(fd)


def test_phi_against_plain_monte_carlo_of_the_gaussian_limit(example):
    """The QMC Φ against pseudo-random sampling of G ~ N(0, Σ) with Σ assembled here from the traces,
    Cov(G_ijk, G_i'j'l) = δ_ii'δ_jj' Tr(M_k M_lᵀ)/d + δ_ij'δ_ji' Tr(M_k M_l)/d (not through the engine):
    within 3 combined standard errors (both estimators unbiased)."""
    spec, u, lim = example
    d = 150
    words = u.word_matrices(nw.matrices(spec, nw.draw_factors(spec, d, 1)))
    phi, se = lim.phi(lim.values(words, d))
    L, K = spec.tokens, u.K
    Sig = np.zeros((L, L, K, L, L, K))
    for k in range(K):
        for l in range(K):
            om = np.vdot(words[k], words[l]) / d
            ps = np.vdot(words[k], words[l].T) / d
            for i in range(L):
                for j in range(L):
                    Sig[i, j, k, i, j, l] += om
                    Sig[i, j, k, j, i, l] += ps
    n = L * L * K
    Sig = Sig.reshape(n, n)
    lam, U = np.linalg.eigh(Sig)
    B = U * np.sqrt(np.clip(lam, 0, None))
    g = np.random.default_rng(7).standard_normal((200_000, n)) @ B.T
    out = np.empty((len(g), n + 1))
    compiled_loss_gradient(u)(g, out)
    mc, mc_se = out[:, 0].mean(), out[:, 0].std() / math.sqrt(len(g))
    assert abs(phi - mc) < 3 * math.hypot(se, mc_se), (phi, se, mc, mc_se)


def test_phi_against_real_matrices(example):
    """Φ of the limit against Monte Carlo of the residual recursion on real d = 200 matrices: within 3 SE
    of the MC plus the QMC's own 3 SE (the finite-d correction, O(1/d), is below them at this sample
    size; tests/test_residual.py::test_phi_real_matrices_large_d measures it at d = 400 and 800)."""
    spec, u, lim = example
    d = 200
    mats = nw.matrices(spec, nw.draw_factors(spec, d, 2))
    phi, se = lim.phi(lim.values(u.word_matrices(mats), d))
    rng = np.random.default_rng(3)
    v = np.concatenate([nw.batch_loss(spec, mats, rng.standard_normal((4000, 2, d))) for _ in range(6)])
    mc_se = v.std() / math.sqrt(len(v))
    assert abs(v.mean() - phi) < 3 * math.hypot(se, mc_se)


@pytest.mark.slow
def test_phi_real_matrices_large_d(example):
    """d = 400 and 800: Φ within 3 SE of Monte Carlo over the real matrices (400 000 samples each)."""
    spec, u, _ = example
    lim = GaussianLimit(u, points=2**15, replicas=8)
    for d in (400, 800):
        mats = nw.matrices(spec, nw.draw_factors(spec, d, 2))
        phi, se = lim.phi(lim.values(u.word_matrices(mats), d))
        rng = np.random.default_rng(d)
        v = np.concatenate([nw.batch_loss(spec, mats, rng.standard_normal((5000, 2, d))) for _ in range(80)])
        mc_se = v.std() / math.sqrt(len(v))
        assert abs(v.mean() - phi) < 3 * math.hypot(se, mc_se), (d, phi, v.mean(), se, mc_se)


def _flow_vs_sgd(d, seeds, time=0.2, points=5):
    from symattn.architecture import flow, sgd
    spec = load_residual(EXAMPLE)
    u = unroll(spec)
    lim = GaussianLimit(u, points=2**14, replicas=4)
    res = sgd.simulate_residual(spec, d, time, points=points, seeds=seeds)
    worst = 0.0
    for i, s in enumerate(seeds):
        fl = flow.flow_from(spec, nw.draw_factors(spec, d, s), d, res["time"], lim, u)
        worst = max(worst, max(np.abs(res[c][i] - fl[c]).max() for c in lim.names))
    return worst


@pytest.mark.torch
def test_flow_follows_sgd_small_d():
    """The matrix-level flow from each seed's own initial matrices follows online SGD on the recursion
    (d = 60, ε = 0.05, τ ≤ 0.1, 2 seeds): every order parameter within 0.02, the issue's criterion (measured
    0.014; the gap is the finite-d and the O(ε) SGD-noise correction the flow leaves out, docs/theory.md §10;
    seeds and torch's generator are fixed, so the number is reproducible)."""
    pytest.importorskip("torch")
    assert _flow_vs_sgd(60, (0, 1), time=0.1, points=3) < 0.02


@pytest.mark.slow
@pytest.mark.torch
def test_flow_follows_sgd_d100_d200():
    """The issue's criterion at d = 100 and 200 (τ ≤ 0.2, seeds 0–2, ε = 0.05): within 0.02, the gap not
    growing with d (measured 0.0136 and 0.0105; benchmarks/residual_agreement.py)."""
    pytest.importorskip("torch")
    g100 = _flow_vs_sgd(100, (0, 1, 2))
    g200 = _flow_vs_sgd(200, (0, 1, 2))
    assert g100 < 0.02 and g200 < 0.02 and g200 <= g100


@pytest.mark.torch
def test_divergence_is_reported_with_its_time():
    pytest.importorskip("torch")
    from symattn.architecture import sgd
    spec = _spec(model={"tokens": 2, "activation": "h2"}, training={"batch_size": 4, "noise_ratio": 50.0})
    with pytest.raises(NumericalFailure, match="non-finite batch loss") as exc:
        sgd.simulate_residual(spec, 16, 5.0, points=3)
    assert 0 < exc.value.time <= 5.0


def test_the_ordinary_commands_take_a_residual_spec(tmp_path):
    """potential / theory / simulate / compare on the residual example write what the architecture's own
    functions compute (the commands only route; their numbers are checked by the tests above), and
    `--set` is refused with exit 2 (simulate and compare, which need PyTorch, in the next test)."""
    import contextlib
    import io
    import json

    from symattn.architecture.flow import solve_residual
    from symattn.cli import main

    name = "residual_tied_softmax_L2"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["potential", name, "--json", "--at", "q_R_R=1.5", "--quiet"]) == 0
    got = json.loads(buf.getvalue())
    spec = load_residual(name)
    lim = GaussianLimit(unroll(spec))
    theta = np.array([got["at"][n] for n in lim.names])
    assert got["at"]["q_R_R"] == 1.5 and got["value"] == pytest.approx(lim.phi(theta)[0], rel=1e-12)
    a = tmp_path / "t.csv"
    assert main(["theory", name, "--time", "0.02", "--points", "3", "--size", "16", "--out", str(a), "--quiet"]) == 0
    ref = solve_residual(name, 0.02, points=3, size=16)
    table = _read_csv(a)
    assert list(table)[0] == "time"
    np.testing.assert_allclose(table["q_R_R"], ref["q_R_R"], rtol=1e-9)
    np.testing.assert_allclose(table["q_R_R_err"], ref["q_R_R_err"], rtol=1e-9, atol=1e-12)
    assert main(["theory", name, "--set", "training.noise_ratio=0.1", "--quiet"]) == 2


@pytest.mark.torch
def test_the_sgd_commands_take_a_residual_spec(tmp_path):
    """simulate / compare on the residual example write what ``simulate_residual`` computes (PyTorch's
    reverse mode through the recursion: the torch extra)."""
    from symattn.architecture.sgd import simulate_residual
    from symattn.cli import main
    name = "residual_tied_softmax_L2"
    b = tmp_path / "s.csv"
    assert main(["simulate", name, "--dim", "12", "--seeds", "2", "--time", "0.02", "--points", "2",
                 "--out", str(b), "--quiet"]) == 0
    sim = simulate_residual(name, 12, 0.02, points=2, seeds=[0, 1], test_samples=2000)
    np.testing.assert_allclose(_read_csv(b)["q_R_R"], sim["q_R_R"].mean(axis=0), rtol=1e-12)
    assert main(["compare", name, "--dim", "12", "--seeds", "1", "--time", "0.02", "--points", "2",
                 "--out", str(tmp_path / "c"), "--quiet"]) == 0
    assert (tmp_path / "c" / "theory.csv").is_file() and (tmp_path / "c" / "simulation.csv").is_file()


def test_residual_sgd_without_torch_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    """Where PyTorch is absent (sys.modules["torch"] = None makes its import fail), simulating a residual
    network is refused with exit 2 and one line saying how to install the extra; the theory still runs."""
    from symattn.cli import main
    monkeypatch.setitem(sys.modules, "torch", None)
    code = main(["simulate", "residual_tied_softmax_L2", "--dim", "12", "--time", "0.01", "--points", "2",
                 "--out", str(tmp_path / "s.csv"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pip install 'symattn[torch]'" in err[0], err
    assert not (tmp_path / "s.csv").exists()


def _read_csv(path):
    import csv
    rows = list(csv.DictReader(open(path)))
    return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}
