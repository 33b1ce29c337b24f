"""What a ``simulate`` call will do, decided and checked before anything runs (docs/interface.md, "Limits").

:func:`plan_simulation` validates the arguments, estimates memory and work, refuses what is past the documented
limits, snaps the measurement times to whole SGD steps and calibrates Φ once; the :class:`Plan` it returns is
what the executors (``simulation.executors``) run.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..measure import order_parameters
from ..spec import Spec, SpecError
from ..symbolic.loss import build_loss
from .init import draw_initial

MAX_STEPS = 1e9          # SGD steps per seed refused beyond (docs/interface.md, "Limits")
MAX_FLOP = 1e17          # total floating-point work of one simulate call refused beyond


@dataclass
class Plan:
    """One simulation: seeds, measurement steps (and their times), the backend and its resources."""

    spec: Spec
    dim: int
    seeds: list
    steps: np.ndarray        # the SGD step of every measurement
    times: np.ndarray        # steps · α/d
    alpha: float
    n_total: int
    estimate: dict           # ``estimate``: bytes per seed, flop per step
    backend: str
    device: str
    dtype: str
    workers: int             # processes of the numpy backend (torch: all seeds in one process)
    blas_threads: int
    test_samples: int
    spectra: bool
    potential: object        # the calibrated Φ (or None)
    potential_names: list | None
    loss_grad: object        # the compiled per-sample gradient (numpy backend)

    def job(self) -> dict:
        """What one NumPy seed needs (``simulation.seed.run_seed``)."""
        return dict(spec=self.spec, dim=self.dim, steps=self.steps, loss_grad=self.loss_grad,
                    potential=self.potential, potential_names=self.potential_names,
                    test_samples=self.test_samples, spectra=self.spectra, dtype=np.dtype(self.dtype))


def _check(cond, option, msg):
    if not cond:
        raise UsageError(f"{option}: {msg}")


def _int(value, option, low):
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low
    _check(ok, option, f"must be a whole number >= {low}, got {value!r}")
    return int(value)


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def estimate(spec, dim: int) -> dict:
    """Memory (bytes, one seed) and work (flop per SGD step) of one simulation, before allocating.

    The state F (d × factor columns, a dense d × d for direct), the batch X (B·L·d), its products
    P and Z (B·L × columns) and the gradient (d × trainable columns), float64."""
    d, B, L = int(dim), spec.batch_size, spec.tokens
    cols = train = dense = 0
    for ix in spec.indices:
        w = ix.kind.columns(ix, d)
        dense += ix.kind.dense_entries(d)
        cols += w
        train += w if ix.trainable else 0
    numbers = d * cols + B * L * d + B * L * (cols + train) + d * train + dense + B * L * L * spec.K * 4
    return {"bytes": 8 * numbers, "flop_per_step": 2.0 * B * L * d * (cols + train)}


def _check_backend(backend, device, dtype, spectra):
    _check(backend in ("numpy", "torch", "jax"), "backend", f"expected numpy or torch, got {backend!r}")
    _check(dtype in ("float64", "float32"), "dtype", f"expected float64 or float32, got {dtype!r}")
    _check(isinstance(device, str) and (device == "cpu" or device.startswith("cuda")), "device",
           f"expected cpu or cuda[:N], got {device!r}")
    if backend == "jax":
        raise UsageError("backend jax: not available in this version; use backend torch "
                         "(pip install 'symattn[torch]')")
    if backend == "numpy" and device != "cpu":
        raise UsageError(f"device {device}: the numpy backend runs on the CPU; use backend torch for a GPU")
    if backend == "torch":
        from .torch_backend import import_torch
        torch = import_torch()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError(f"device {device}: no CUDA device is available to PyTorch here")
        if spectra:
            raise UsageError("spectra: recorded by the numpy backend only")


def _measurement_steps(n_total: int, points: int, time: float, log_time: bool) -> np.ndarray:
    """The whole SGD steps of the measurement times: equally spaced on [0, n], or 0 then log-spaced."""
    if points > n_total + 1:
        raise UsageError(f"points {points}: only {n_total} SGD steps up to time {time:g}, so at most "
                         f"{n_total + 1} distinct times; use fewer points or a longer time")
    if not log_time:
        return np.rint(np.linspace(0, n_total, points)).astype(np.int64)
    from ..integration import time_grid
    steps = np.rint(time_grid(n_total, points, True, first=max(1.0, n_total * 1e-3))).astype(np.int64)
    if len(np.unique(steps)) < points:
        raise UsageError(f"points {points}: {n_total} SGD steps are too few for {points} distinct "
                         f"log-spaced times; use fewer points or a longer time")
    return steps


def plan_simulation(spec: Spec, dim, seeds=1, time=1.0, points=21, *, seed0=0, workers=None, test_samples=4096,
                    potential=True, blas_threads=1, spectra=False, backend="numpy", device="cpu",
                    dtype="float64", log_time=False) -> Plan:
    """The checked plan of ``simulate`` (same arguments; see its docstring). Raises UsageError/SpecError naming the
    argument before anything is allocated."""
    dim = _int(dim, "dim", 1)
    seeds = _int(seeds, "seeds", 1)
    points = _int(points, "points", 1)
    seed0 = _int(seed0, "seed0", 0)
    _check(isinstance(time, (int, float)) and not isinstance(time, bool) and math.isfinite(time) and time >= 0,
           "time", f"must be a finite number >= 0, got {time!r}")
    if workers is None:
        workers = min(seeds, os.cpu_count() or 1)
    workers = min(_int(workers, "workers", 1), seeds)
    test_samples = _int(test_samples, "test_samples", 0)
    _check_backend(backend, device, dtype, spectra)
    alpha = spec.step_size(dim)
    if not alpha > 0:
        raise SpecError(f"{spec.source}: training.noise_ratio: ε = 0 gives a zero SGD step; "
                        f"the simulation needs ε > 0")
    est = estimate(spec, dim)
    mem = _physical_memory()
    if mem and est["bytes"] * workers > 0.8 * mem:
        raise UsageError(f"dim {dim}: the simulation needs ~{est['bytes'] * workers / 2**30:.3g} GiB "
                         f"({workers} worker(s)), more than 80% of this machine's {mem / 2**30:.0f} GiB; "
                         f"use a smaller dim, training.batch_size or width")
    steps_real = time * dim / alpha
    if not steps_real <= MAX_STEPS:                         # learning_rate = 1e-300: 1e302 steps
        which = "training.learning_rate" if spec.learning_rate is not None else "training.noise_ratio"
        raise UsageError(f"time {time:g}: needs {steps_real:.3g} SGD steps per seed at α = {alpha:.3g} (at most "
                         f"{MAX_STEPS:.0e}, docs/interface.md); use a shorter time or a larger {which}")
    if seeds * steps_real * est["flop_per_step"] > MAX_FLOP:
        raise UsageError(f"seeds {seeds}: {seeds} × {steps_real:.3g} steps of ~{est['flop_per_step']:.2g} FLOP is "
                         f"~{seeds * steps_real * est['flop_per_step']:.2g} FLOP, beyond the limit of {MAX_FLOP:.0e} "
                         f"(days on a workstation; docs/interface.md); use fewer seeds, a smaller dim or time")
    n_total = int(round(steps_real))
    if time > 0 and n_total == 0:
        raise UsageError(f"time {time:g}: shorter than one SGD step (one step is nα/d = {alpha / dim:.3g}); "
                         f"use a longer time or a smaller step")
    steps = _measurement_steps(n_total, points, time, log_time)

    pot = names = None
    if potential:
        from ..derivation.potential import Potential
        pot = Potential(spec)
        names = pot.names
        # calibrate the quadrature once, at seed0's initial order parameters, so that every seed
        # (sequential or in a worker) evaluates Φ with the same rule
        init = order_parameters(spec, draw_initial(spec, dim, seed0), dim)
        pot.calibrate({k: init[k] for k in names})
    return Plan(spec=spec, dim=dim, seeds=list(range(seed0, seed0 + seeds)), steps=steps, times=steps * alpha / dim,
                alpha=alpha, n_total=n_total, estimate=est, backend=backend, device=device, dtype=dtype,
                workers=workers, blas_threads=blas_threads,
                test_samples=test_samples, spectra=bool(spectra), potential=pot, potential_names=names,
                loss_grad=build_loss(spec).compile_gradient() if backend == "numpy" else None)
