"""The calibration of a Gaussian expectation's quadrature orders (docs/theory.md §2, "Quadrature"), without SymPy.

Each non-polynomial term's order (nodes per dimension) is grown until its (E f, ∇E f) stops changing by more than
its share of the tolerance (``adaptive_orders``), then the whole is checked: the change between orders must be small
against Φ (else the loss is singular on the real line) and the rule's window must hold the integrand's mass (the
tail check). :class:`Calibrated` holds those steps once for both callers: the symbolic expectations
(``derivation.potential.GaussianExpectation``) and a warm run's plain record (``codegen.warm``), which calibrates a
new initial state with the generated module's compiled kernels and the terms' :class:`TermRecord` — so both choose
the same orders, and a warm run at a new state needs no SymPy.
"""
from __future__ import annotations

import warnings

import numpy as np

from .quadrature_rule import rule_for

DIVERGED = 1e-2     # a quadrature still changing by this much (relative) at its node cap has no limit
TAIL_EXTRA = 2.0    # the tail check widens the window by this many standard deviations
TAIL_ORDER = 17     # ... at this many nodes per dimension (the coarse start of the calibration)


class TermRecord:
    """What the calibration reads of a quadrature term (``symbolic.quadrature.QuadTerm``), as plain data: its node
    cap (``rule``), window half-width, smoothness (a jump's error estimate) and the integrand as text (messages)."""

    def __init__(self, term):
        self.cap, self.half_width, self.smoothness, self.text = term.cap, term.half_width, term.smoothness, term.text

    def rule(self, order: int):
        """(nodes per dimension, kind) used for a requested order (capped), as ``QuadTerm.rule``."""
        return rule_for(order, self.cap)


def adaptive_orders(terms, theta, tol, start=17, relative=False, evaluate=None):
    """Per-term orders: each term's order (nodes per dimension) is grown by ~1.3× from ``start`` until its
    (E f, ∇E f) changes by less than its share of the tolerance, tol·scale/len(terms), where scale is
    max |(Φ, ∇Φ)| (``relative``) or max(1, that). A term held at its node cap stops there; a Gauss–Hermite
    term (too many dimensions for the trapezoidal rule) reports the change from n − 1 to n nodes.

    Returns (orders, error_estimate): the sum over the terms of the change from each kept order to the
    next one (an estimate of the kept order's error, since the rule converges geometrically; scaled to
    Richardson's first-order estimate for a term with a jump, ``_first_order``). Why per term: the
    terms of one loss need very different rules (a 1-d softmax row of a large-variance student ~60 nodes,
    a 2-d cross term ~40, a 4-d SGD-noise term to 2e-2 only ~10) and a common order pays the largest
    everywhere — 63² instead of 47² nodes on the dominant 2-d terms of softmax L = 2.

    ``evaluate(i, θ, (n, kind))``: (E f, ∇E f) of terms[i] on that rule, in place of ``terms[i].evaluate`` (a
    generated module's compiled kernels: ``GaussianExpectation.evaluated_by``).
    """
    if evaluate is None:
        def evaluate(i, th, rule):
            return terms[i].evaluate(th, 0, rule)

    def at(i, order, rule=None):
        return np.r_[evaluate(i, theta, rule or terms[i].rule(order))]

    first = [at(i, start) for i in range(len(terms))]
    total = np.sum(first, axis=0)
    scale = np.max(np.abs(total)) if relative else max(1.0, np.max(np.abs(total)))
    share = tol * max(scale, 1e-300) / len(terms)
    orders, err = [], 0.0
    for i, (t, prev) in enumerate(zip(terms, first)):
        n, kind = t.rule(start)
        if kind == "hermite":
            orders.append(start)
            err += float(np.max(np.abs(prev - at(i, 0, (n - 1, kind))))) if n > 2 else 0.0
            continue
        order, change = start, None
        while True:
            nxt = 2 * int(np.ceil(order * 0.65)) + 1
            n_now, n_next = t.rule(order)[0], t.rule(nxt)[0]
            if n_next <= n_now:                                      # at the node cap
                break
            cur = at(i, nxt)
            change = float(np.max(np.abs(cur - prev))) * _first_order(t, n_now, n_next)
            if change <= share:           # the change estimates the error of the lower order (the rule
                break                     # converges geometrically): keep that one
            order, prev = nxt, cur
            if n_next < 1.2 * n_now:      # the cap was reached on the way: keep it
                break
        if change is None:                                       # capped at the start: compare one step down
            m = t.rule(order)[0]
            low = max(3, int(m / 1.3)) | 1
            change = float(np.max(np.abs(prev - at(i, 0, (low, kind))))) * _first_order(t, low, m)
        orders.append(order)
        err += change
    return tuple(orders), err


def _first_order(term, n_low: int, n_high: int) -> float:
    """The factor from the change between n_low and n_high nodes to the error at n_low: 1 for a rule that
    converges geometrically (the change is the error); n_high/(n_high − n_low) ≈ 4.3 for a term with a
    jump (``QuadTerm.smoothness``, value-only terms included), where the trapezoidal rule converges only like h — Richardson's estimate for a
    first-order rule (measured on Heaviside at 24 random states, tol 1e-3 … 1e-5: the true error of Φ and
    ∇Φ was up to 4.1× the plain change)."""
    return n_high / (n_high - n_low) if term.smoothness == "jump" and n_high > n_low else 1.0


class Calibrated:
    """The calibration steps (module docstring) of an expectation that has ``quad_terms`` (each with ``rule``,
    ``smoothness``, ``half_width``, ``text``), ``tol``, ``start_order``, ``relative``, ``theta(values)``,
    ``check_existence(θ)``, ``_term_values(i, θ, rule, half_width)``, ``value_at_order(values)`` and settable
    ``order`` and ``error``."""

    def calibrate(self, values, tol: float | None = None):
        """Choose each quadrature term's order at θ so that Φ and ∇Φ change by < tol between orders
        (``self.order``: the orders, one per term in ``quad_terms`` order)."""
        if self.quad_terms:
            self.check_existence(self.theta(values))
            from ..progress import note
            note(f"calibrating the Gaussian quadrature of {len(self.quad_terms)} non-polynomial term(s) "
                 f"to {tol or self.tol:.0e}")
            self.order, self.error = adaptive_orders(self.quad_terms, self.theta(values), tol or self.tol,
                                                    start=self.start_order, relative=self.relative,
                                                    evaluate=self._term_values)
            scale = max(1.0, abs(self.value_at_order(values)))
            if not self.error <= DIVERGED * scale:
                from ..errors import NumericalFailure
                raise NumericalFailure(f"the Gaussian quadrature of Φ does not converge (change between orders "
                                       f"{self.error:.1e} at {max(self.order)} nodes per dimension): the loss is "
                                       f"probably singular on the real line")
            self._check_tails(self.theta(values))
            if not self.error <= (tol or self.tol) * 10:
                warnings.warn(f"quadrature reached only ~{self.error:.1e} (asked {tol or self.tol:.0e}) at "
                              f"{max(self.order)} nodes per dimension: the node cap was hit", RuntimeWarning, stacklevel=2)
        return self.order, self.error

    def _check_tails(self, theta):
        """Raise NumericalFailure naming the first quadrature term whose expectation the rule's window
        |z| ≤ half-width does not hold: the coarse rule (TAIL_ORDER nodes per dimension) extended by nodes of
        the same spacing to a window ≥ TAIL_EXTRA wider — the same nodes inside, so that only the tail
        differs — changes the term by more than DIVERGED of its value (10·tol where the expectation is only
        wanted to a coarser tolerance tol, as ν to 2e-2: a kinked ν integrand moves by ≈ 2 % there). A convergent Gaussian expectation leaves
        ≈ 1e-9 beyond the window; an integrand growing as fast as the Gaussian decays (exp(a z²), a ≥ ½ in
        whitened units: the expectation does not exist) or a window too narrow for the law changes by O(1)."""
        for i, t in enumerate(self.quad_terms):
            n, kind = t.rule(TAIL_ORDER)
            if kind != "trapezoid":
                continue
            h = 2.0 * t.half_width / (n - 1)
            k = int(np.ceil(TAIL_EXTRA / h))
            wide = t.half_width + k * h
            with np.errstate(all="ignore"):
                inner = self._term_values(i, theta, (n, kind))[0]
                outer = self._term_values(i, theta, (n + 2 * k, kind), half_width=wide)[0]
            if not abs(outer - inner) <= max(DIVERGED, 10 * self.tol) * max(1.0, abs(inner)):
                from ..errors import NumericalFailure
                raise NumericalFailure(
                    f"the Gaussian expectation of the term {t.text} does not exist here (or not within "
                    f"|z| ≤ {t.half_width:.3g} of its law): widening the window to {wide:.3g} changes "
                    f"it from {inner:.3g} to {outer:.3g}; the integrand grows as fast as the Gaussian decays")
