"""Online SGD of a residual network at finite d, on the residual recursion itself (docs/theory.md §10).

One step draws a fresh batch X (B × L × d, i.i.d. N(0, 1) tokens), the teacher's outputs (plus label
noise), and descends the batch-mean loss of the student's forward pass (``network.forward``) with
step α = εB/d; weight decay γ enters as −(αγ/d)θ. The gradient with respect to every trained factor
is PyTorch's reverse mode through the recursion (the ``torch`` extra); a direct (symmetric) factor's
gradient is symmetrised by its kind (``Kind.tangent``). Time is nα/d, as everywhere.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import NumericalFailure, UsageError
from .limit import order_pairs, trace_values
from .network import batch_loss, draw_factors, matrices
from .spec import ResidualSpec, load_residual
from .unroll import unroll


def _torch():
    try:
        import torch
    except ImportError:
        raise UsageError("the residual-network simulator needs PyTorch: pip install 'symattn[torch]'") from None
    return torch


def to_tensors(states: dict, trained: set, dtype=None):
    torch = _torch()
    dtype = dtype or torch.float64
    return {n: {f: torch.tensor(a, dtype=dtype, requires_grad=n in trained) for f, a in s.items()}
            for n, s in states.items()}


def loss_and_gradients(spec: ResidualSpec, tstates: dict, X, xi=None):
    """(batch-mean loss, {factor name: {part: ∂loss/∂part}}) by reverse mode through the recursion."""
    torch = _torch()
    mats = matrices(spec, tstates)
    loss = batch_loss(spec, mats, X, xi).mean()
    params = [(n, f, t) for n, s in tstates.items() for f, t in s.items() if t.requires_grad]
    grads = torch.autograd.grad(loss, [t for _, _, t in params])
    out = {}
    for (n, f, _), g in zip(params, grads, strict=True):
        out.setdefault(n, {})[f] = spec.factors[n].kind.tangent(f, g)
    return loss, out


def sgd_step(spec: ResidualSpec, tstates: dict, X, alpha: float, xi=None):
    """One in-place step θ ← θ − α∇θ − (αγ/d)θ on every trained factor; returns the batch loss."""
    torch = _torch()
    d = X.shape[-1]
    loss, grads = loss_and_gradients(spec, tstates, X, xi)
    decay = 1.0 - alpha * spec.weight_decay / d
    with torch.no_grad():
        for n, gs in grads.items():
            for f, g in gs.items():
                t = tstates[n][f]
                t.mul_(decay).sub_(alpha * g)
    return loss.detach().item()


def numpy_states(tstates: dict) -> dict:
    return {n: {f: t.detach().cpu().numpy().copy() for f, t in s.items()} for n, s in tstates.items()}


def simulate_residual(spec, dim: int, time: float, points: int = 11, seeds=(0,), test_samples: int = 0,
                      dtype: str = "float64", device: str = "cpu", progress=None) -> dict:
    """Online SGD of every seed; returns {"time", <order parameter>: (seeds, points) array, "loss"} with
    the order parameters of docs/theory.md §10 (the word traces Ω, Ψ) at the output times and, with
    ``test_samples`` > 0, the population loss on that many fresh samples (else the mean batch loss
    since the previous output). Raises NumericalFailure with the time of a non-finite loss."""
    torch = _torch()
    spec = load_residual(spec)
    if int(dim) < 2:
        raise UsageError(f"dim {dim}: must be >= 2")
    if not (time >= 0 and math.isfinite(time)):
        raise UsageError(f"time {time}: must be a finite number >= 0")
    u = unroll(spec)
    names, pairs = order_pairs(u)
    alpha = spec.step_size(dim)
    times = np.linspace(0.0, float(time), int(points))
    marks = np.rint(times * dim / alpha).astype(int)
    tdtype = {"float64": torch.float64, "float32": torch.float32}[dtype]
    trained = set(spec.trained)
    out = {c: np.empty((len(seeds), len(times))) for c in names + ["loss"]}
    L, B = spec.tokens, spec.batch_size
    for si, seed in enumerate(seeds):
        ts = to_tensors(draw_factors(spec, dim, seed), trained, tdtype)
        for s in ts.values():
            for t in s.values():
                t.data = t.data.to(device)
        gen = torch.Generator(device=device).manual_seed(10_000 + int(seed))        # batches
        gen_test = torch.Generator(device=device).manual_seed(20_000 + int(seed))   # test samples: own stream
        step, acc, nacc = 0, 0.0, 0
        for ti, mark in enumerate(marks):
            while step < mark:
                X = torch.randn((B, L, dim), generator=gen, dtype=tdtype, device=device)
                xi = (spec.label_noise ** 0.5 * torch.randn((B, L, L), generator=gen, dtype=tdtype, device=device)
                      if spec.label_noise > 0 else None)
                lv = sgd_step(spec, ts, X, alpha, xi)
                if not math.isfinite(lv):
                    raise NumericalFailure(f"seed {seed}: non-finite batch loss at step {step}", step * alpha / dim)
                acc, nacc, step = acc + lv, nacc + 1, step + 1
            mats = matrices(spec, numpy_states(ts))
            theta = trace_values(pairs, u.word_matrices(mats), dim)
            for c, v in zip(names, theta, strict=True):
                out[c][si, ti] = v
            if test_samples:
                with torch.no_grad():
                    X = torch.randn((int(test_samples), L, dim), generator=gen_test, dtype=tdtype, device=device)
                    tm = matrices(spec, ts)
                    lt = batch_loss(spec, tm, X).mean().item() + 0.5 * L * L * spec.label_noise
                out["loss"][si, ti] = lt
            else:
                out["loss"][si, ti] = acc / nacc if nacc else np.nan
            acc, nacc = 0.0, 0
            if progress is not None:
                progress(si, ti)
    out["time"] = times
    return out
