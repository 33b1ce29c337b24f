"""Integrate a derived limit system with SciPy (``symattn theory``), honestly.

Two failure modes are detected and reported with the time where they happen, never written as
numbers: blow-up / NaN of the moments (the integration stops there), and loss of truncation
validity — the M and M−2 truncations disagree by more than ``gap_tol`` (docs/theory.md §5: the zero
truncation has a finite window of validity; beyond it larger M diverges faster).
"""
from __future__ import annotations

import csv
import warnings
from dataclasses import dataclass, field

import numpy as np

from .errors import NumericalFailure

BLOWUP = 1e6


@dataclass
class TheoryResult:
    """Columns of the theory CSV (docs/interface.md) and the diagnostics of the run."""

    table: dict
    truncation: int
    epsilon: float
    diverged_at: float | None = None
    valid_until: float | None = None      # first time the M and M−2 truncations disagree
    gap_tol: float | None = None
    info: dict = field(default_factory=dict)

    @property
    def columns(self):
        return list(self.table)

    def to_csv(self, path):
        write_csv(self.table, path)

    def summary(self) -> dict:
        return {"truncation": self.truncation, "epsilon": self.epsilon, "diverged_at": self.diverged_at,
                "truncation_valid_until": self.valid_until, "truncation_gap_tol": self.gap_tol, **self.info}

    def __repr__(self):
        n = len(self.table.get("time", ()))
        window = f", valid until τ = {self.valid_until:.4g}" if self.valid_until is not None else ""
        stop = f", diverged at τ = {self.diverged_at:.4g}" if self.diverged_at is not None else ""
        return f"<TheoryResult: moment hierarchy M = {self.truncation}, ε = {self.epsilon:g}, {n} rows{window}{stop}>"

    def _repr_html_(self):
        return table_html(self.table, repr(self)[1:-1])


def table_html(table: dict, title: str, rows: int = 6) -> str:
    """An HTML view of a result table for Jupyter: the title, then the first and last rows of the columns
    (the ``_err`` columns folded into ``value ± err``)."""
    cols = [c for c in table if not c.endswith("_err")]
    n = len(table[cols[0]]) if cols else 0
    idx = list(range(n)) if n <= rows else list(range(rows // 2)) + [None] + list(range(n - rows // 2, n))

    def cell(c, i):
        v = float(table[c][i])
        e = table.get(c + "_err")
        return f"{v:.6g}" + (f" ± {float(e[i]):.2g}" if e is not None else "")
    head = "".join(f"<th>{c}</th>" for c in cols)
    body = "".join("<tr>" + ("".join("<td>…</td>" for _ in cols) if i is None else
                             "".join(f"<td>{cell(c, i)}</td>" for c in cols)) + "</tr>" for i in idx)
    return f"<b>{title}</b><table><tr>{head}</tr>{body}</table>"


def csv_text(table: dict, digits: int | None = 10) -> str:
    """The CSV text of a table (header of column names, one row per time), numbers with ``digits``
    significant digits, or with ``digits=None`` the shortest text that reads back exactly."""
    cols = list(table)
    n = len(table[cols[0]]) if cols else 0
    fmt = repr if digits is None else f"{{:.{int(digits)}g}}".format
    lines = [",".join(cols)]
    for i in range(n):
        lines.append(",".join(fmt(float(table[c][i])) for c in cols))
    return "\n".join(lines) + "\n"


def write_csv(table: dict, path, digits: int = 10):
    """Write ``csv_text(table)`` to ``path`` atomically (complete or absent, never torn)."""
    from .files import atomic_write
    atomic_write(path, csv_text(table, digits))


def read_csv(path) -> dict:
    with open(path) as fh:
        rows = [r for r in csv.reader(fh) if r and not r[0].startswith("#")]
    cols = rows[0]
    data = np.array([[float(x) for x in r] for r in rows[1:]])
    return {c: data[:, i] for i, c in enumerate(cols)}


def time_grid(time: float, points: int, log_time: bool = False, first: float | None = None) -> np.ndarray:
    """Output times on [0, time]: equally spaced, or with ``log_time`` 0 followed by points − 1
    log-spaced times from ``first`` (default time·10⁻³) to ``time`` (dynamics spanning decades)."""
    if not log_time:
        return np.linspace(0.0, time, points)
    first = time * 1e-3 if first is None else first
    return np.concatenate([[0.0], np.geomspace(first, time, points - 1)])


def solve(system, y0, time: float, points: int, epsilon: float = 0.0, rtol=None, atol=None, log_time=False):
    """(t_eval, Y[points', n], diverged_at) integrating the compiled right-hand side of ``system`` from y0.

    Tolerances default to rtol 1e-9 for closed-form coefficients and 1e-7 when Φ needs
    quadrature (itself accurate to ~1e-8).
    """
    quad = system.potential.has_quadrature
    rtol = rtol or (1e-7 if quad else 1e-9)
    atol = atol or (1e-9 if quad else 1e-12)
    from .codegen.systems import compiled
    from .derivation.state import PARAM_EPSILON, PARAM_GAMMA, law
    from .derivation.state import params as run_params
    mod = compiled(system)
    refresh = bool(epsilon) and hasattr(mod, "noise_values")
    y0 = np.asarray(y0, dtype=float)
    lw = law(system)
    params = run_params(system, epsilon, values=mod.noise_values(y0, lw)) if refresh else \
        run_params(system, epsilon, y0)
    t_eval = time_grid(time, points, log_time)
    last = [None, params]

    def current(y):
        """params with the non-polynomial ν of the state, re-evaluated when θ moved by more than 1 %
        (relative) since the last evaluation: ν is an O(ε) coefficient calibrated to 2e-2 only."""
        if not refresh:
            return params
        th = y[system.theta_words]
        if last[0] is None or np.max(np.abs(th - last[0])) > 1e-2 * (1.0 + np.max(np.abs(last[0]))):
            last[0], last[1] = th.copy(), run_params(system, epsilon, values=mod.noise_values(y, lw))
        return last[1]

    def blowup(t, y, p):
        return BLOWUP - np.max(np.abs(y)) if np.all(np.isfinite(y)) else -1.0
    blowup.terminal = True
    margin = admissibility(system)

    def inadmissible(t, y, p):
        return margin(y)[0] if np.all(np.isfinite(y)) else -1.0
    inadmissible.terminal = True

    from .progress import Progress, notes_enabled
    bar = Progress(1000, f"integrate M={system.truncation}", enabled=notes_enabled(), unit="‰")

    sched, gamma0 = system.spec.schedule, system.spec.weight_decay

    reached = [0.0]                        # the furthest time the solver evaluated (where a failed step stopped)

    def rhs(t, y, p):
        if not np.isfinite(t):
            raise NumericalFailure(f"integration of the M={system.truncation} system failed after time "
                                   f"{reached[0]:.6g}: the step size is not finite (the vector field overflows)", reached[0])
        reached[0] = max(reached[0], t)
        bar.update(int(1000 * t / time) if time > 0 else 0)
        if sched.constant:
            return mod.rhs(t, y, current(y))
        s = float(sched(t))                 # docs/theory.md §3, "Schedules": s·[F(γ₀ s_γ) + (ε₀ s) N]
        q = current(y).copy()
        q[PARAM_GAMMA], q[PARAM_EPSILON] = gamma0 * float(sched.gamma_factor(t)), epsilon * s
        return s * mod.rhs(t, y, q)

    try:
        from scipy.integrate import solve_ivp
        sol = solve_ivp(rhs, (0.0, time), y0, t_eval=t_eval, args=(params,),
                        method="DOP853", rtol=rtol, atol=atol, events=[blowup, inadmissible])
    except (ArithmeticError, np.linalg.LinAlgError) as exc:   # e.g. no slaved mean (untied): FloatingPointError
        raise NumericalFailure(f"integration of the M={system.truncation} system failed: {exc}") from None
    finally:
        bar.close()
    Y = sol.y.T
    diverged = None
    if sol.status == 1 or sol.status == -1 or not np.all(np.isfinite(Y)):
        events = [float(ev[0]) for ev in (sol.t_events or ()) if ev.size]
        diverged = min(events) if events else float(reached[0])
        ok = np.all(np.isfinite(Y), axis=1) & (np.max(np.abs(Y), axis=1) < BLOWUP)
        ok &= np.array([margin(y)[0] >= 0 for y in Y], dtype=bool) if len(Y) else ok
        ok &= t_eval[: len(Y)] <= diverged
        Y = Y[ok]
        if sol.t_events and len(sol.t_events) > 1 and sol.t_events[1].size:
            _LEFT.append(margin(sol.y_events[1][0])[1])
    return t_eval[: len(Y)], Y, diverged


_LEFT: list = []          # what the last inadmissible state violated (for the warning)


def admissibility(system):
    """y ↦ (margin, what): margin ≥ 0 while the state is a possible one — the order parameters a Gram matrix of
    real matrices ((Ω ± Ψ)/2 ⪰ 0, P eq. 398; then Φ of a squared loss is ≥ 0) and Tr(S̊_k²)/d = q_kk − t_k² ≥ 0 for
    every symmetric index — else negative, with ``what`` naming the first violation. A truncated hierarchy past its
    window leaves this set (the zero truncation is no moment sequence); the integration stops there."""
    from .derivation.system import CENTRED as S_CENTRED
    P = system.potential
    o_pos, p_pos = P.split.o_pos, P.split.p_pos
    K = system.spec.K
    tw = np.asarray(system.theta_words)
    symmetric = {system.index(((k, "S"),)) for k, ix in enumerate(system.spec.indices) if ix.symmetric}
    centred = [c for c in system.columns if c.source == S_CENTRED and c.args[1] == c.args[2] and c.args[1] in symmetric]
    split = int(not np.array_equal(o_pos, p_pos))          # a non-symmetric pair: Ω ≠ Ψ, both Grams checked

    def margin(y):
        th = y[tw]
        omega, psi = th[o_pos].reshape(K, K), th[p_pos].reshape(K, K)
        scale = 1.0 + float(np.max(np.abs(th))) if th.size else 1.0
        worst, what = np.inf, ""
        for label, G in (("(Ω + Ψ)/2", 0.5 * (omega + psi)), ("(Ω − Ψ)/2", 0.5 * (omega - psi)))[:1 + split]:
            w = float(np.linalg.eigvalsh(0.5 * (G + G.T))[0])
            if w < worst:
                worst, what = w, f"the smallest eigenvalue of the order parameters' {label} is {w:.4g} < 0"
        for c in centred:
            i, a, b, *f = c.args
            v = y[i] - (f[0] if f else 1.0) * y[a] * y[b]
            if v < worst:
                worst, what = float(v), f"{c.name} = {v:.4g} < 0"
        return worst + 1e-9 * scale, what
    return margin


def retruncated(system, M: int):
    """``system`` at truncation M (the truncation check): once per system object, warm from its stored record
    where it was run before (``codegen.warm.runnable``), else from the store of derived systems or derived now."""
    from .codegen.warm import derived, runnable
    from .derivation import retruncate, store
    cache = system.__dict__.setdefault("_retruncated", {})
    if M not in cache:
        spec, tol = system.spec, system.potential.tol
        cache[M] = runnable(spec, M, tol, build=lambda: store.cached(spec, M, tol,
                                                                      lambda: retruncate(derived(system), M)))
    return cache[M]


def compiled_phi(system):
    """θ ↦ Φ(θ) from the system's compiled module (the same quadrature as the right-hand side)."""
    from .codegen.systems import compiled
    from .derivation.state import law
    mod, lw = compiled(system), law(system)
    return lambda theta: float(mod.phi_and_grad(np.ascontiguousarray(theta, dtype=float), lw)[0])


def companion_truncation(M: int, least: int) -> int | None:
    """The truncation a run at M is checked against (docs/theory.md §5, "Window"): M − 2 (the same parity: odd
    and even truncations bracket the series from either side), else M − 1, else M + 1 for the least M —
    every M ≥ 2 gets a window."""
    for other in (M - 2, M - 1, M + 1):
        if other >= least:
            return other
    return None


def integrate(system, time: float = 1.0, points: int = 51, init="free", dim: int | None = None, seed: int = 0,
              epsilon: float | None = None, check_truncation: bool = True, gap_tol: float = 1e-3,
              log_time: bool = False) -> TheoryResult:
    """Integrate the limit equations of ``system`` on package time [0, time].

    init: "free" (free probability), "sample" (moments of simulate's seed-``seed`` matrices at
    ``dim``) or an explicit initial state vector. epsilon: SGD-noise ratio (default the spec's; 0
    for the paper's limit). With check_truncation, the companion truncation (``companion_truncation``: M − 2, else
    M − 1, else M + 1) is integrated too and the first time where observables differ by more than
    ``gap_tol·(1 + |value|)`` is reported. ``log_time``:
    log-spaced output times (``time_grid``).
    """
    from .derivation import min_truncation, require_moments
    from .derivation.state import initial, observables, restrict
    spec = system.spec
    require_moments(spec, system.truncation)
    if epsilon is None:
        epsilon = spec.epsilon(dim) if system.supports_noise else 0.0
    y0 = initial(system, init, dim=dim, seed=seed)
    t, Y, diverged = solve(system, y0, time, points, epsilon, log_time=log_time)
    table = {"time": t, **observables(system, Y, phi=compiled_phi(system))}
    res = TheoryResult(table, system.truncation, epsilon, diverged_at=diverged, gap_tol=gap_tol)
    if diverged is not None:
        why = f" ({_LEFT.pop()})" if _LEFT else ""
        warnings.warn(f"theory (M={system.truncation}) diverged or left the possible states at time {diverged:.4g}"
                      f"{why}; rows after it are omitted (the truncation is invalid there)", RuntimeWarning, stacklevel=2)
    other_M = companion_truncation(system.truncation, min_truncation(spec))
    if not isinstance(init, str) and other_M is not None and other_M > system.truncation:
        other_M = None                     # an explicit state has no moments beyond its own truncation
    if check_truncation and other_M is not None:
        other = retruncated(system, other_M)
        y1 = initial(other, init, dim=dim, seed=seed) if isinstance(init, str) else restrict(system, y0, other)
        t1, Y1, _ = solve(other, y1, time, points, epsilon, log_time=log_time)
        obs1 = observables(other, Y1, loss=False)                     # the loss is not compared
        n = min(len(t1), len(t))
        gap = np.zeros(len(t))
        gap[n:] = np.inf
        for c in obs1:
            if c in table:
                a, b = table[c][:n], obs1[c][:n]
                gap[:n] = np.maximum(gap[:n], np.abs(a - b) / (1.0 + np.abs(a)))
        table["truncation_gap"] = gap
        bad = np.nonzero(gap > gap_tol)[0]
        if bad.size:
            res.valid_until = float(t[bad[0]])
            warnings.warn(f"truncations M={system.truncation} and M={other_M} disagree by more than "
                          f"{gap_tol:g} from time {res.valid_until:.4g} on", RuntimeWarning, stacklevel=2)
    return res
