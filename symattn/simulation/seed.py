"""One seed of online SGD (NumPy): its steps, divergence checks and measurement rows (docs/theory.md §3).

Seed s at dimension d draws its initial matrices, its batches and its test samples from separate streams derived
from (s, d, purpose[, index]) through ``SeedSequence`` (``simulation.init``): runs at different d are independent,
and a seed's computation is the same in any process.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import NumericalFailure
from ..measure import order_parameters, student_spectra, test_loss
from .init import BATCHES, TEST, draw_initial, stream
from .sgd import Model

TEST_STREAM = TEST          # purpose word of the test-loss stream (simulation.init)
CHECK_EVERY = 100           # steps between cheap divergence checks
BOUND = 1e8                 # Tr S²/d beyond this counts as divergence


def divergence(n, model, what):
    """The NumericalFailure of a seed that diverged at step n, with its time."""
    t = n * model.alpha / model.d
    which = "training.learning_rate" if model.spec.learning_rate is not None else "training.noise_ratio"
    return NumericalFailure(
        f"SGD diverged at step n = {n} (time = {t:.6g}): {what}; try a smaller {which}", time=t)


def run_seed(seed: int, job: dict, report=None, on_row=None) -> dict:
    """Simulate one seed; returns {column: array over measurement points}. Raises NumericalFailure.

    ``job``: ``Plan.job()``. ``report(k)``: k more steps done; ``on_row(row)``: a measurement row is complete
    (partial output)."""
    spec, d = job["spec"], job["dim"]
    model = Model(spec, d, loss_grad=job["loss_grad"], dtype=job.get("dtype", np.float64))
    model.set_state(draw_initial(spec, d, seed))
    rng = stream(seed, d, BATCHES)
    trng = stream(seed, d, TEST)
    pot, names = job["potential"], job["potential_names"]
    rows, n, pending = [], 0, 0
    want_spectra = bool(job.get("spectra"))
    eigs = {spec.names[k]: [] for k in spec.students} if want_spectra else {}
    with np.errstate(all="ignore"):
        for target in job["steps"]:
            while n < target:
                X, xi = model.sample(rng)
                loss = model.step(X, xi)
                n += 1
                pending += 1
                if not math.isfinite(loss):
                    raise divergence(n, model, f"batch loss {loss}")
                if n % CHECK_EVERY == 0:
                    b = model.norm_bound()
                    if not math.isfinite(b):
                        raise divergence(n, model, "non-finite parameters")
                    if report is not None:
                        report(pending)
                        pending = 0
            row = order_parameters(spec, _float64(model.state), d)
            bad = [c for c, v in row.items() if not math.isfinite(v)]
            big = [c for c, v in row.items() if c.startswith("q") and abs(v) > BOUND]
            if bad or big:
                raise divergence(n, model, f"{(bad or big)[0]} = {row[(bad or big)[0]]:.3g}")
            row["loss"] = float(pot.value({k: row[k] for k in names})) if pot is not None else float("nan")
            row["test_loss"] = test_loss(model, trng, job["test_samples"]) if job["test_samples"] else float("nan")
            rows.append(row)
            if on_row is not None:
                on_row(row)
            if want_spectra:
                for name, ev in student_spectra(spec, model.state, d).items():
                    eigs[name].append(ev)
    if report is not None and pending:
        report(pending)
    out = {c: np.array([r[c] for r in rows]) for c in rows[0]}
    for name, evs in eigs.items():           # not a column: kept apart by the "spectra:" prefix
        out[f"spectra:{name}"] = np.array(evs)
    return out


def _float64(state: list) -> list:
    """The state with float64 factors (traces are accumulated in float64 whatever the step's dtype)."""
    if all(v.dtype == np.float64 for s in state for v in s.values()):
        return state
    return [{k: np.asarray(v, dtype=np.float64) for k, v in s.items()} for s in state]
