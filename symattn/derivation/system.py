"""A derived limit system as pure data (docs/theory.md §4–§7): what every backend consumes.

The state y holds the moments μ_w of the canonical words (``words[0] = ()``, μ = 1), then, for a
model with untied indices, their means m_k (§6). The vector field is

    dy[row]/dt = Σ_terms val · coef[key] · y[c1] · y[c2]        (+ the slaved-mean velocities, §6)

with ``coef`` given by ``coefficient_rules`` (a ``Coef`` per key) as functions of Φ's gradient at the
order parameters θ = y[theta_words] (the trainable means first moved onto ∂Φ/∂m = 0), of the
run-time parameters params = [γ, ε, s², ν...] and of a few state entries. The CSV columns are
``columns`` (a ``Column`` each). Nothing here evaluates anything: the NumPy reference backend
(``symattn.derivation.state``) and the generated Numba module (``symattn.codegen``) interpret the same data;
Φ, ν and their derivatives (the coefficient functions) are the ``potential`` and ``nu`` expectations.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from ..spec import Spec
from ..symbolic.words import Alphabet, word_name
from ..transient import PicklesWithoutCaches

TERM_DTYPE = np.dtype([("row", np.int64), ("c1", np.int64), ("c2", np.int64), ("key", np.int64), ("val", np.float64)])

# Coef.source: how coef[key] is formed (``args`` in brackets)
ONE = "one"              # 1
ZERO = "zero"            # 0 (an unused key)
DECAY = "decay"          # the weight decay γ = params[0]
GRADIENT = "gradient"    # [matrix, k, l]: GΩ_kl ("GO"), GΨ_kl ("GP") or Γ_kl = GΩ_kl + GΨ_kl ("Gamma") at θ
MEAN_FORCE = "mean_force"  # [k, ((matrix, l, i, j), ...), (a, b)]: β_k = −2 Σ G_kl (y_i + y_j) / (y_a + y_b) (§6)
NOISE = "noise"          # [name]: ε ν_name(θ) (§7)

# Column.source: how a CSV column is formed from the state (``args`` in brackets)
STATE = "state"          # [i]: y_i
CENTRED = "centred"      # [i, a, b(, c)]: y_i − c y_a y_b  (p = q − φ(Σ²) tr·tr; c = 1 if absent)
THETA = "theta"          # [p]: θ_p at the slaved means
OVERLAP = "overlap"      # [(i, j), (a, b), (c, e)]: (y_i + y_j) / √|(y_a + y_b)(y_c + y_e)|
LOSS = "loss"            # []: Φ(θ)


@dataclass(frozen=True)
class Coef:
    """coef[key] of the sparse terms: ``source`` (module constants) with its ``args``."""

    name: str
    source: str
    args: tuple = ()


@dataclass(frozen=True)
class Column:
    """One CSV column (docs/interface.md) of a trajectory: ``source`` (module constants) with its ``args``."""

    name: str
    source: str
    args: tuple = ()


@dataclass(eq=False)
class System(PicklesWithoutCaches):
    """A derived limit system (module docstring): state layout, sparse terms, coefficient rules,
    observables, and the expectations (Φ, ν) its coefficients are read from."""

    TRANSIENT = ("_module", "_retruncated", "_equations")    # the imported module; lower truncations; SymPy view

    description: str               # e.g. "direct/tied moment hierarchy" (module headers)
    spec: Spec
    truncation: int
    alphabet: Alphabet
    words: list                    # words[0] = () is the constant 1
    coefficient_rules: tuple       # Coef per key: coef[0] = 1, coef[1] = γ, ...
    terms: np.ndarray              # TERM_DTYPE: row, c1, c2, key, val
    theta_words: list              # state entry of every order parameter (Potential.names order)
    potential: object              # derivation.potential.Potential, or a warm run's codegen.potential.CompiledPotential
    columns: tuple = ()            # Column per CSV column
    mean_indices: list = field(default_factory=list)   # untied k with a mean in the state, in spec order
    nu: dict = field(default_factory=dict)             # name -> GaussianExpectation of ν (derivation.noise)
    supports_noise: bool = True

    def __post_init__(self):
        self._index = {w: i for i, w in enumerate(self.words)}
        self.n_moments = len(self.words)
        self.mean_state = {k: self.n_moments + j for j, k in enumerate(self.mean_indices)}
        trainable = [k for k in self.mean_indices if self.spec.indices[k].trainable]
        pos = {n: i for i, n in enumerate(self.potential.names)}
        self.mean_trainable = trainable                                  # means slaved to ∂Φ/∂m = 0
        self.mean_pos = [pos[f"m_{self.spec.names[k]}"] for k in trainable]   # their positions in θ

    @property
    def size(self) -> int:
        return self.n_moments + len(self.mean_indices)

    @property
    def coef_names(self) -> list:
        return [c.name for c in self.coefficient_rules]

    def index(self, word) -> int:
        """State entry of a word (any spelling of it)."""
        return self._index[self.alphabet.canonical(tuple(word))]

    def word_names(self) -> list:
        """Names of the state entries: "1", the words, then m_<name> of the means."""
        names = list(self.spec.names) + ["Sigma"]                 # the feature covariance's letter (K, "S")
        out = ["1"] + [word_name(w, names) for w in self.words[1:]]
        return out + [f"m_{self.spec.names[k]}" for k in self.mean_indices]

    def spec_text(self) -> str:
        return json.dumps(self.spec.structure, indent=1, sort_keys=True, default=str)

    # ---------------------------------------------------------------- the equations (derivation.equations)
    @property
    def _sympy(self):
        eq = self.__dict__.get("_equations")
        if eq is None:
            from .equations import Equations
            eq = self._equations = Equations(self)
        return eq

    def symbols(self) -> dict:
        """Word name (``word_names``) → SymPy symbol of its moment (μ_{sst}, m_s), and coefficient name
        (``coef_names``: Gamma_0_1, GO_0_1, beta_0, nu_0_0, gamma; epsilon) → its symbol."""
        return self._sympy.symbols()

    def equations(self, closed: bool = False) -> dict:
        """Word name → dμ_w/dτ as a SymPy expression (package time τ = nα/d); ``closed``: the coefficients
        replaced by their closed forms in the moments (docs/theory.md §4–§7; ``derivation.equations``)."""
        return self._sympy.equations(closed)

    def latex(self, closed: bool = False) -> str:
        """The equations as a LaTeX ``aligned`` block (the moving entries)."""
        return self._sympy.latex(closed)

    def jacobian(self, closed: bool = True):
        """The SymPy Jacobian ∂(dy/dτ)/∂y of the moving state entries."""
        return self._sympy.jacobian(closed)

    def rhs_function(self, closed: bool = True, epsilon: float | None = None, gamma: float | None = None):
        """f(τ, y) → dy/dτ (NumPy), lambdified from the SymPy equations."""
        return self._sympy.function(closed, epsilon=epsilon, gamma=gamma)

    def column_equations(self, closed: bool = True) -> dict:
        """A closed (direct, general) system as an ODE in the CSV's order parameters: column name → its time
        derivative in the columns' symbols (``derivation.equations.column_equations``)."""
        from .equations import column_equations
        return column_equations(self, closed)

    def __repr__(self):
        return (f"<System {self.spec.name}: {self.description}, M = {self.truncation}, {self.size} moments, "
                f"{len(self.terms)} terms>")

    def _repr_latex_(self):
        if self.size > 80:
            return None                      # too long to read as one block: the plain repr
        return "$$" + self.latex() + r"\qquad(\text{package time } \tau = n\alpha/d)$$"


def pack_terms(acc) -> np.ndarray:
    """Sparse terms {(row, c1, c2, key): val} as a sorted TERM_DTYPE array (zeros dropped)."""
    items = sorted((k, v) for k, v in acc.items() if v != 0.0)
    T = np.zeros(len(items), dtype=TERM_DTYPE)
    for n, ((row, c1, c2, key), val) in enumerate(items):
        T[n] = (row, c1, c2, key, val)
    return T


def pair_columns(spec, index, symmetric, sigma2: float = 1.0) -> list:
    """q_<a>_<b> = Tr(S_a S_b)/d, p_<a>_<b> = q − φ(Σ²) tr_a tr_b (φ(Σ²) = 1 without a feature
    covariance), and for two untied indices q1 = Tr(M_a M_bᵀ)/d, q2 = Tr(M_a M_b)/d (docs/interface.md);
    ``index``: word → state entry."""
    names, cols = spec.names, []
    for k in range(spec.K):
        for l in range(k, spec.K):
            pair, q = f"{names[k]}_{names[l]}", index(((k, "S"), (l, "S")))
            centre = (q, index(((k, "S"),)), index(((l, "S"),))) + (() if sigma2 == 1.0 else (float(sigma2),))
            cols += [Column(f"q_{pair}", STATE, (q,)), Column(f"p_{pair}", CENTRED, centre)]
            if not symmetric[k] and not symmetric[l]:
                cols += [Column(f"q1_{pair}", STATE, (index(((k, "S"), (l, "T"))),)), Column(f"q2_{pair}", STATE, (q,))]
    return cols
