"""The deterministic matrix-level flow (ε = 0) integrated by SciPy's explicit Runge–Kutta solvers."""
from __future__ import annotations

import numpy as np

from ..errors import NumericalFailure
from .field import finite_start
from .realisation import start

MIN_STEP = 1e-14        # a step below this (relative to the horizon) cannot advance the time: a numerical failure


def integrate_deterministic(spec, P, N, seeds, times, method, rtol, atol, spectra=True, init="free", odd=()):
    """The deterministic flow of the realisations ``seeds`` as one batch (scipy's ``method``):
    (column → (R, points) array, ``time`` → (points,); realisation 0's spectra; evaluations of one
    realisation's vector field)."""
    flow = start(spec, P, N, seeds, init, odd)
    y0 = flow.pack()
    if atol is None:
        atol = rtol * 1e-2 * max(float(np.sqrt(np.mean(y0 ** 2))), 1e-300) if y0.size else rtol
    rows, spec_rows = [], {spec.names[k]: [] for k in spec.students}

    def record(y, t):
        row, sp_ = flow.observe(y, t, spectra=spectra)
        rows.append(row)
        if spectra:
            for n, ev in sp_.items():
                spec_rows[n].append(ev)

    record(y0, float(times[0]))
    T = float(times[-1])
    if T > times[0]:
        finite_start(flow, float(times[0]), y0)
        from scipy import integrate
        solver_cls = {"RK45": integrate.RK45, "DOP853": integrate.DOP853, "RK23": integrate.RK23}[method]
        def quiet():                              # a trial step that overflows is rejected: no warning for it
            return np.errstate(over="ignore", invalid="ignore")
        with quiet():
            solver = solver_cls(flow.rhs, float(times[0]), y0, T, rtol=rtol, atol=atol)
        nxt = 1
        while nxt < len(times):
            with quiet():
                msg = solver.step()
            if msg is not None or solver.status == "failed":
                raise NumericalFailure(f"spectral flow: integrator failed at time {solver.t:.6g} ({msg})", solver.t)
            if not (solver.step_size or 0.0) >= MIN_STEP * max(1.0, T) and solver.status != "finished":
                raise NumericalFailure(f"spectral flow: the step is {solver.step_size:.2g} at time {solver.t:.6g}: the "
                                       f"flow is too fast to integrate (Φ's gradient too large, or a blow-up)", solver.t)
            flow.check(solver.y, solver.t)                 # raises beyond BLOWUP
            if nxt < len(times) and times[nxt] <= solver.t:
                dense = solver.dense_output()
                while nxt < len(times) and times[nxt] <= solver.t:
                    y = solver.y if times[nxt] == solver.t else dense(times[nxt])
                    record(y, float(times[nxt]))
                    nxt += 1
            if solver.status == "finished":          # float round-off at T: the rest is T
                while nxt < len(times):
                    record(solver.y, float(times[nxt]))
                    nxt += 1
    table = {c: (np.array([r[c] for r in rows]) if c == "time" else np.array([r[c] for r in rows]).T) for c in rows[0]}
    return table, {n: np.array(v) for n, v in spec_rows.items()}, flow.nevals * flow.R
