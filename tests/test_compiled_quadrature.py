"""The compiled Gaussian quadrature of generated modules (codegen.runtime + the emitted integrands)
against the pure-Python reference quadrature of the same terms (symbolic.quadrature), and the
store of derived systems (derivation.store).

The two evaluate the same rule at the same nodes in different summation orders, so they agree to
rounding (≈ 1e-14 relative); 1e-10 leaves room for the accumulation over 10⁴ nodes and is still far
below the rule's own error (~1e-8), so a wrong node, weight, Price/Stein term or exponential table
would fail it. Exception: where the gradient's integrand has a step (relu), grid nodes on the kink
line x = 0 get the step's value 0 or 1 from the last bit of x, which the two computations round
differently — there the gradients agree to the rule's own error estimate (``Potential.error``, the
change between orders; 10× for the bound), the values (continuous integrand) still to 1e-10."""
import numpy as np
import pytest
import sympy as sp

from symattn.codegen import runtime
from symattn.codegen.emit import exp_as_powers
from symattn.codegen.systems import compiled
from symattn.derivation import derive, retruncate, store
from symattn.derivation import state as R
from symattn.spec import load_spec

TOL = 1e-10


def spec(activation, L=2, teacher="tied", **model):
    t = {"name": "t", "role": "teacher", "parameterization": teacher, "width": 0.5}
    if teacher == "identity":
        t = {"name": "t", "role": "teacher", "parameterization": "identity", "scale": 1.0}
    return load_spec({"name": "cq_" + "".join(c for c in activation if c.isalnum()), "model": {"tokens": L, "activation": activation, **model},
                      "indices": [{"name": "s", "role": "student", "parameterization": "tied"}, t],
                      "training": {"noise_ratio": 0.01}})


CASES = {
    "softmax_beta2": spec("softmax", beta=2.0),        # exponential tables, Hessian outputs
    "relu_identity": spec("relu", L=1, teacher="identity"),   # Dirac mass: Stein's lemma
    "tanh_L1": spec("tanh", L=1),                      # no exponential base: plain x_i
}


@pytest.mark.parametrize("case", CASES)
def test_compiled_phi_gradient_and_nu_equal_the_reference(case):
    system = derive(CASES[case], 2)
    mod = compiled(system)
    assert system.potential.quad_terms, "the case must exercise the quadrature"
    rng = np.random.default_rng(3)
    y0 = R.initial(system, "free")
    for trial in range(3):
        y = y0 if trial == 0 else y0 * (1 + 0.1 * rng.standard_normal(y0.shape))
        y[0] = 1.0
        theta = np.ascontiguousarray(R.theta(system, y))
        val, grad = mod.phi_and_grad(theta, R.law(system))
        ref_val, ref_grad = system.potential.value_and_gradient(theta)
        scale = 1.0 + abs(ref_val) + np.max(np.abs(ref_grad))
        assert abs(val - ref_val) <= TOL * scale, (case, val, ref_val)
        kinked = any(t.stein for t in system.potential.quad_terms)
        gtol = 10 * system.potential.error if kinked else TOL * scale
        assert np.max(np.abs(grad - ref_grad)) <= gtol, (case, grad, ref_grad)
        if hasattr(mod, "noise_values"):
            ref_nu = R.params(system, 0.01, y)[4:]
            assert np.allclose(mod.noise_values(y, R.law(system)), ref_nu, rtol=TOL, atol=TOL), case


def test_stein_route_and_its_hessian_fallback_at_a_singular_covariance():
    """Smooth terms take E∇²f by Stein's lemma (∇f only) while Σ_y is well conditioned and from their
    second derivatives below ``STEIN_CONDITION`` — in the generated module and in the Python quadrature
    alike. Student = teacher (q_ss = q_st = q_tt) makes each student-row × teacher-row term's Σ_y
    singular (ρ = 1): there the two backends still agree to 1e-10, and the gradient is continuous with
    the Stein route's at ρ = 1 − 1e-4 (a smooth Φ moves by O(1e-4) there; Stein's lemma alone, with
    Σ_y^(−½) of a rounding-level eigenvalue, was off by 0.28 at ρ = 1)."""
    system = derive(CASES["softmax_beta2"], 2)
    mod, P = compiled(system), system.potential
    grads = []
    for rho in (1.0, 1.0 - 1e-4):
        th = np.ascontiguousarray(P.theta({"q_s_s": 1.2, "q_s_t": rho * 1.2, "q_t_t": 1.2}))
        val, grad = mod.phi_and_grad(th, R.law(system))
        ref_val, ref_grad = P.value_and_gradient(th)
        assert np.isfinite(val) and abs(val - ref_val) <= TOL * (1 + abs(ref_val))
        assert np.max(np.abs(grad - ref_grad)) <= TOL * (1 + np.max(np.abs(ref_grad)))
        grads.append(grad)
    assert np.max(np.abs(grads[0] - grads[1])) < 1e-3


def test_jacobi_eigen_decomposition_gives_the_symmetric_root():
    """runtime.jacobi → (λ, Q) with Q λ Qᵀ = C, Qᵀ Q = I; the root is the one numpy's eigh gives,
    also for a singular C (a null direction, as for a degenerate Gaussian)."""
    rng = np.random.default_rng(0)
    mats = []
    for r in (1, 2, 3, 4):
        a = rng.standard_normal((r, r + 1))
        mats.append(a @ a.T)
    v = rng.standard_normal(3)
    mats.append(np.outer(v, v) + np.diag([0.0, 0.0, 0.0]))          # rank 1
    for C in mats:
        lam, Q = runtime.jacobi(np.ascontiguousarray(C))
        assert np.allclose(Q @ np.diag(lam) @ Q.T, C, atol=1e-12)
        assert np.allclose(Q.T @ Q, np.eye(len(C)), atol=1e-12)
        lr, Qr = np.linalg.eigh(C)
        root = (Q * np.sqrt(np.clip(lam, 0, None))) @ Q.T
        ref = (Qr * np.sqrt(np.clip(lr, 0, None))) @ Qr.T
        assert np.allclose(root, ref, atol=1e-7)   # √ of the rank-1 case's null eigenvalues (~1e-16): ~1e-8


def test_exp_as_powers_is_an_identity_and_leaves_other_exponents_alone():
    x0, x1, e0, e1 = sp.symbols("x0 x1 e0 e1")
    expr = sp.exp(2 * x0) / (sp.exp(x0) + sp.exp(x1)) ** 2 + sp.exp(x0 / 2) + sp.exp(3 - x1)
    out = exp_as_powers(expr, [x0, x1], [e0, e1])
    assert out.has(sp.exp(x0 / 2)) and not out.has(sp.exp(2 * x0))
    for a, b in np.random.default_rng(1).standard_normal((5, 2)):
        ref = float(expr.subs({x0: a, x1: b}))
        got = float(out.subs({x0: a, x1: b, e0: np.exp(a), e1: np.exp(b)}))
        assert abs(got - ref) <= 1e-12 * abs(ref)


def test_store_returns_the_derived_system_with_the_callers_training_parameters(tmp_path, monkeypatch):
    """A second derivation of the same model (even with another ε) is read from the store: same module
    source, the new spec in place; a torn file is ignored (derived anew)."""
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    raw = {"name": "st", "model": {"tokens": 1, "activation": "h2"},
           "indices": [{"name": "s", "role": "student", "parameterization": "tied"},
                       {"name": "t", "role": "teacher", "parameterization": "tied"}],
           "training": {"noise_ratio": 0.01}}
    first = derive(load_spec(raw), 4)
    compiled(first)                                         # stores it (with its module source)
    files = list(tmp_path.rglob("d_*.pkl"))
    assert len(files) == 1
    other = load_spec({**raw, "training": {"noise_ratio": 0.2}})
    second = derive(other, 4)
    assert second is not first and second.spec.noise_ratio == 0.2
    assert second._source == first._source
    mu = R.initial(first, "free")
    assert np.array_equal(compiled(second).rhs(0.0, mu, R.params(second, 0.2)), compiled(first).rhs(0.0, mu, R.params(first, 0.2)))
    files[0].write_bytes(files[0].read_bytes()[:-10])       # torn
    assert store.load(other, store.key(other, 4, 1e-8)) is None
    third = derive(other, 4)
    assert not hasattr(third, "_source")                    # derived anew


def test_truncations_share_one_verified_kernel_file(tmp_path, monkeypatch):
    """The compiled kernels depend on the potential only: the M and M − 2 modules of a model load
    one k_<hash>.py (compiled once); a planted kernel file is rewritten, never run."""
    import sys

    from symattn.codegen.load import cached_module
    from symattn.codegen.systems import register_orders, source
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("symattn_generated_")]:
        monkeypatch.delitem(sys.modules, name)              # loaded by earlier tests: load anew here
    system = derive(CASES["softmax_beta2"], 4)
    lower = retruncate(system, 2)
    a, b = compiled(system), compiled(lower)
    kernels = list(tmp_path.rglob("k_*.py"))
    assert len(kernels) == 1 and len(list(tmp_path.rglob("m_*.py"))) == 2
    assert a._expect_0 is b._expect_0
    marker = tmp_path / "planted_ran"
    kernels[0].write_text(f"open({str(marker)!r}, 'w').close()\n")
    for name in [n for n in sys.modules if n.startswith("symattn_generated_")]:
        monkeypatch.delitem(sys.modules, name)
    mod = cached_module(source(lower))
    assert not marker.exists() and hasattr(mod, "rhs")
    with pytest.raises(ValueError, match="no quadrature orders at beta = 2"):   # never the β = 1 orders
        mod.rhs(0.0, R.initial(lower, "free"), R.params(lower, 0.0))
    register_orders(lower, mod)
    mu = R.initial(lower, "free")
    assert np.array_equal(mod.rhs(0.0, mu, R.params(lower, 0.0)), b.rhs(0.0, mu, R.params(lower, 0.0)))


def test_initial_laws_are_run_time_data_and_orders_are_calibrated_per_state(tmp_path, monkeypatch):
    """Specs differing only in the initial laws (the student's σ) share one stored derivation and one
    module: the second derives nothing and writes no module. Each gets the quadrature orders calibrated at
    its own free initial state — by the module's compiled kernels, the same orders as the Python
    quadrature's calibration there, and an error estimate equal to rounding (1e-12: the two sum the same
    nodes) — and the module then evaluates Φ at that state with them (the Python Φ at those orders to
    1e-10; with σ = 1's orders the σ = 1.5 gradient differs by more). A state calibrated before is loaded with the
    system, not calibrated again."""
    import sys

    from symattn.codegen.systems import _theta0
    from symattn.derivation.potential import GaussianExpectation, Potential
    monkeypatch.setenv("SYMATTN_CACHE", str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("symattn_generated_")]:
        monkeypatch.delitem(sys.modules, name)
    raw = spec("softmax").raw
    wide = {**raw, "indices": [{**raw["indices"][0], "init_scale": 1.5}, raw["indices"][1]]}
    a, b = derive(load_spec(raw), 2), None
    mod = compiled(a)
    files = sorted(p.name for p in tmp_path.rglob("*") if p.suffix in (".py", ".pkl"))
    b = derive(load_spec(wide), 2)
    assert b._source == a._source                               # loaded from the store, not derived
    assert compiled(b) is mod
    assert sorted(p.name for p in tmp_path.rglob("*") if p.suffix in (".py", ".pkl")) == files
    assert a.potential.order != b.potential.order               # σ = 1.5 needs other orders than σ = 1
    for system in (a, b):
        theta = np.ascontiguousarray(_theta0(system))
        ref = Potential(system.spec, tol=system.potential.tol)  # the Python quadrature's own calibration
        ref.calibrate(theta)
        assert ref.order == system.potential.order
        assert abs(ref.error - system.potential.error) <= 1e-12
        compiled(system)                                        # this state's orders, set for the run
        val, grad = mod.phi_and_grad(theta, R.law(system))
        ref_val, ref_grad = ref.value_and_gradient(theta)
        scale = 1.0 + abs(ref_val) + np.max(np.abs(ref_grad))
        assert abs(val - ref_val) <= TOL * scale and np.max(np.abs(grad - ref_grad)) <= TOL * scale
        if system is b:                         # σ = 1's coarser orders miss σ = 1.5's tolerance
            mod.set_orders(1.0, {"phi_and_grad": a.potential.order})
            assert np.max(np.abs(mod.phi_and_grad(theta, R.law(b))[1] - ref_grad)) > TOL * scale
    monkeypatch.setattr(GaussianExpectation, "calibrate", lambda *a, **k: pytest.fail("calibrated again"))
    again = derive(load_spec(wide), 2)
    compiled(again)
    assert again.potential.order == b.potential.order


def test_label_noise_variance_is_a_run_time_parameter():
    """Two specs differing only in the label-noise variance derive one module (ξ is integrated out
    analytically, s² is params[2]); with each spec's params the compiled right-hand side equals that
    spec's reference one (1e-9), and at ε > 0 the variance changes it (through ν)."""
    from symattn.codegen.systems import source
    a, b = derive(spec("softmax", label_noise=0.1), 2), derive(spec("softmax", label_noise=0.4), 2)
    assert source(a) == source(b)
    mod = compiled(a)
    y = R.initial(a, "free")
    got = []
    for system in (a, b):
        p = R.params(system, 0.05, y)
        ref, out = R.rhs(system, 0.0, y, p), mod.rhs(0.0, y, p)
        assert np.allclose(out, ref, rtol=1e-9, atol=1e-9 * (1 + np.abs(ref).max()))
        got.append(out)
    assert np.max(np.abs(got[0] - got[1])) > 1e-6
    # Φ's label-noise part is the constant ½ L² s² (one ξ per output entry, E ξ² = s²)
    th = np.ascontiguousarray(R.theta(a, y))
    assert abs(mod.phi_and_grad(th, np.array([0.4, 1.0]))[0] - mod.phi_and_grad(th, np.array([0.1, 1.0]))[0] - 0.5 * 4 * 0.3) < 1e-12


def test_inverse_temperature_is_a_run_time_parameter():
    """Specs differing only in the softmax β (1, 2, 0.5) share one module: the integrands are written in
    H = βG and integrated over N(βμ, β²Σ), so the source is the same and deriving the others adds no
    module or kernel file to the cache (nothing recompiles; the module is the one softmax_beta2 above
    uses). At each β the compiled right-hand side (ε = 0.05, so ν too) equals that spec's reference one
    (1e-9); the reference Φ at β = 2 is checked against Monte Carlo over G in test_potential
    (softmax_L2_b2). β changes the dynamics."""
    from symattn.codegen.load import cache_dir
    from symattn.codegen.systems import source
    first = derive(spec("softmax", beta=1.0), 2)
    mod = compiled(first)                                   # stores the derived system with its source
    files = sorted(p.name for p in cache_dir().rglob("*.py"))
    systems = [first] + [derive(spec("softmax", beta=b), 2) for b in (2.0, 0.5)]
    assert all(getattr(s, "_source", None) == first._source for s in systems[1:])   # loaded, not re-derived
    assert source(systems[1]) == first._source
    y = R.initial(systems[0], "free")
    got = []
    for system in systems:
        assert compiled(system) is mod
        p = R.params(system, 0.05, y)
        assert p[3] == system.spec.beta
        ref, out = R.rhs(system, 0.0, y, p), mod.rhs(0.0, y, p)
        assert np.allclose(out, ref, rtol=1e-9, atol=1e-9 * (1 + np.abs(ref).max())), system.spec.beta
        got.append(out)
    assert sorted(p.name for p in cache_dir().rglob("*.py")) == files
    assert min(np.max(np.abs(got[i] - got[j])) for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-3


def test_a_jump_is_compiled_by_the_score_route_and_equals_the_python_quadrature():
    """A Heaviside activation: its quadrature terms take E∇f and E∇²f from f alone (Stein's lemma twice,
    ``runtime.score_moments``) in the generated kernel and in the Python quadrature; the two sum the same
    nodes in different orders (1e-10 relative), and at a singular Σ_y (student = teacher) the kernel
    returns NaN rather than a number, where the Python route raises."""
    from symattn.codegen import emit
    from symattn.codegen.load import cached_module
    from symattn.derivation.potential import Potential
    from symattn.errors import NumericalFailure

    P = Potential(spec("Heaviside(z)", L=1), tol=1e-3)
    assert any(t.score for t in P.quad_terms)
    th = P.theta({"q_s_s": 0.8, "q_s_t": 0.3, "q_t_t": 0.5})
    P.calibrate(th)
    kernels = {}
    code, _ = emit.expectation_code(P, "phi_and_grad", "phi", kernels=kernels)
    source = "\n\n".join([
        "import math\n\nimport numpy\nimport numpy as np\nfrom numba import njit\n",
        emit.template("gauss_rule.py.tmpl").template,
        emit.KERNELS_BEGIN + "\n" + "\n\n".join(text for _, text in kernels.values()) + emit.KERNELS_END,
        emit.WITH_LAW, code, f"set_orders({P.beta!r}, {{'phi_and_grad': {P.order!r}}})\n"])
    mod = cached_module(source)
    law = np.array([P.label_noise, P.beta])
    for point in (th, P.theta({"q_s_s": 1.3, "q_s_t": -0.4, "q_t_t": 0.6})):
        val, grad = mod.phi_and_grad(np.ascontiguousarray(point), law)
        ref_val, ref_grad = P.value_and_gradient(point)
        scale = 1.0 + abs(ref_val) + np.max(np.abs(ref_grad))
        assert abs(val - ref_val) <= TOL * scale and np.max(np.abs(grad - ref_grad)) <= TOL * scale
    same = P.theta({"q_s_s": 0.5, "q_s_t": 0.5, "q_t_t": 0.5})
    assert not np.isfinite(mod.phi_and_grad(np.ascontiguousarray(same), law)[0])
    with pytest.raises(NumericalFailure, match="singular"):
        P.value_and_gradient(same)
