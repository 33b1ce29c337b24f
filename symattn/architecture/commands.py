"""The ordinary commands (``potential``, ``theory``, ``simulate``, ``compare``) on a residual spec
(docs/interface.md, "Residual attention"): each returns what the command writes."""
from __future__ import annotations

from ..errors import UsageError
from .compare import seed_means
from .flow import solve_residual
from .limit import GaussianLimit
from .network import draw_factors, matrices
from .sgd import simulate_residual
from .spec import load_residual
from .unroll import unroll

INITIAL_DIM = 400          # the drawn factors whose order parameters ``potential`` evaluates Φ at by default


def potential(spec, at: dict, dim: int | None = None, seed: int = 0) -> dict:
    """{"value", "standard_error", "gradient", "at"}: Φ of the Gaussian limit (QMC, docs/theory.md §10), its
    standard error over the scramblings and ∂Φ/∂θ, at the order parameters of the factors drawn at
    ``dim`` (default INITIAL_DIM) for ``seed``, with the entries of ``at`` replaced."""
    spec = load_residual(spec)
    u = unroll(spec)
    lim = GaussianLimit(u)
    unknown = sorted(set(at) - set(lim.names))
    if unknown:
        raise UsageError(f"--at {unknown[0]}: unknown order parameter; known: {', '.join(lim.names)}")
    d = int(dim or INITIAL_DIM)
    theta = lim.values(u.word_matrices(matrices(spec, draw_factors(spec, d, seed))), d)
    pos = {n: i for i, n in enumerate(lim.names)}
    for k, v in at.items():
        theta[pos[k]] = v
    value, se = lim.phi(theta)
    _, grad = lim.phi_and_grad(theta)
    return {"value": value, "standard_error": se, "gradient": dict(zip(lim.names, map(float, grad))),
            "at": dict(zip(lim.names, map(float, theta)))}


def theory(spec, time: float, points: int, size: int | None = None, seed: int = 0, rotations: int = 1) -> dict:
    """The matrix-level all-time limit (``flow.solve_residual``): N → ∞ by 2f(N) − f(N/2) with
    ``<col>_err``, the mean of ``rotations`` draws (seeds seed, seed + 1, …)."""
    table = solve_residual(spec, time, points=points, size=size or 200, seed=seed, extrapolate=True, draws=rotations)
    table.pop("info")
    return {"time": table.pop("time"), **table}


def simulate(spec, dim: int, seeds: int, time: float, points: int, seed0: int = 0, test_samples: int = 2000,
             backend: str = "torch", device: str = "cpu", dtype: str = "float64") -> dict:
    """Online SGD on the residual recursion: the seed means of every order parameter and of the loss,
    with ``<col>_sem``."""
    if backend != "torch":
        raise UsageError(f"--backend {backend}: residual networks are simulated by PyTorch reverse mode (--backend torch)")
    sims = list(range(int(seed0), int(seed0) + int(seeds)))
    return seed_means(simulate_residual(spec, dim, time, points=points, seeds=sims, test_samples=test_samples,
                                        dtype=dtype, device=device))
