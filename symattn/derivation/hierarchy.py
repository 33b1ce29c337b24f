"""Moment hierarchies of online SGD in the limit d → ∞ (docs/theory.md §4, §5), on package time nα/d.

Every parameterisation is a *letter flow*: the time derivative of a trainable letter written as
a linear combination of letter strings with coefficients that depend on the order parameters,

    tied   (§5):  Ṡ_k = −4 Σ_l Γ_kl (S_l S_k + S_k S_l) − 2γ S_k
    direct (§4):  Ṡ_k = −2 Σ_l Γ_kl S_l − γ S_k

so that, by the product rule under the trace, dμ_w/dt = Σ_i μ(w with letter i replaced by its
flow); the O(ε) SGD-noise terms (``derive.noise``) add products of two moments. Words longer than the truncation M are set to zero (P eq. 13). The system is stored as a
list of sparse terms ``dμ[row] += val · coef[key] · μ[c1] · μ[c2]`` (μ[0] = 1 is the empty word;
quadratic terms come from the SGD-noise corrections), with ``coef`` computed from Φ at the
current order parameters. Code generation and integration read only this structure.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..kinds import alphabet_of
from ..spec import Spec, load_spec
from ..symbolic.words import Alphabet, word_name
from ..transient import PicklesWithoutCaches
from .noise import (
    fill_noise_coefficients,
    noise_terms,
    nu_expectations,
    nu_names,
)
from .potential import Potential


@dataclass
class MomentSystem(PicklesWithoutCaches):
    """dμ/dt = Σ_terms val·coef[key]·μ[c1]·μ[c2] with coef = coefficients(μ)."""

    TRANSIENT = ("_module", "_retruncated")           # the imported module; lower truncations

    spec: Spec
    truncation: int
    alphabet: Alphabet
    words: list                    # words[0] = () is the constant 1
    coef_names: list               # coef[0] = 1, coef[1] = γ, then Γ_kl ...
    terms: np.ndarray              # structured: row, c1, c2, key, val
    theta_words: list              # word index of every potential parameter (Potential.names order)
    potential: Potential
    nu: dict = field(default_factory=dict)    # name -> GaussianExpectation of ν (derive.noise)

    @property
    def size(self) -> int:
        return len(self.words)

    def index(self, word) -> int:
        return self._index[self.alphabet.canonical(tuple(word))]

    def __post_init__(self):
        self._index = {w: i for i, w in enumerate(self.words)}

    def word_names(self) -> list:
        return ["1"] + [word_name(w, self.spec.names) for w in self.words[1:]]

    def spec_text(self) -> str:
        return json.dumps(self.spec.structure, indent=1, sort_keys=True, default=str)

    def params(self, epsilon: float = 0.0, y=None, values=None) -> np.ndarray:
        """Run-time parameters of the RHS: [weight decay γ, noise ratio ε, non-polynomial ν at θ(y)...]
        (``derive.noise.noise_params``)."""
        from .noise import noise_params
        return noise_params(self, epsilon, y, values)

    def theta_of(self, y) -> np.ndarray:
        """The order parameters θ of Φ at state y."""
        return np.asarray(y, dtype=float)[self.theta_words]

    # Reference (pure Python/NumPy) implementation; the generated module computes the same.
    def coefficients(self, mu, params) -> np.ndarray:
        K = self.spec.K
        theta = np.asarray(mu)[self.theta_words]
        grads = self.potential.gradients(theta)
        coef = np.zeros(len(self.coef_names))
        coef[0], coef[1] = 1.0, params[0]
        coef[2:2 + K * K] = grads.gamma.reshape(-1)
        fill_noise_coefficients(coef, self.coef_names, self.nu, theta, params[1])
        return coef

    kind = "direct/tied moment hierarchy"
    supports_noise = True

    def initial(self, init="free", dim=None, seed=0) -> np.ndarray:
        """μ(0): free-probability limit, moments of simulate's seed matrices, or an explicit vector."""
        from ..initial import free_moments, sample_moments
        if isinstance(init, str) and init == "free":
            return free_moments(self.spec, self.words)
        if isinstance(init, str) and init == "sample":
            if dim is None:
                raise ValueError("init='sample' needs the dimension d")
            return sample_moments(self.spec, self.words, dim, seed)
        return np.asarray(init, dtype=float)

    def observables(self, Y, phi=None, loss: bool = True) -> dict:
        """CSV columns (docs/interface.md) from moment trajectories Y[time, word]; the loss (unless not
        ``loss``) by ``phi`` (θ ↦ Φ, e.g. the compiled module's), else by the reference potential."""
        Y = np.atleast_2d(Y)
        spec, out = self.spec, {}
        tr = {k: Y[:, self.index(((k, "S"),))] for k in range(spec.K)}
        for k, name in enumerate(spec.names):
            out[f"tr_{name}"] = tr[k]
        for k in range(spec.K):
            for l in range(k, spec.K):
                q = Y[:, self.index(((k, "S"), (l, "S")))]
                pair = f"{spec.names[k]}_{spec.names[l]}"
                out[f"q_{pair}"] = q
                out[f"p_{pair}"] = q - tr[k] * tr[l]
        theta = Y[:, self.theta_words]
        if loss:
            out["loss"] = np.array([(phi or self.potential.value)(th) for th in theta])
        return out

    def retruncate(self, M: int):
        """The same system at another truncation (shares the potential and ν)."""
        return derive_symmetric(self.spec, M, potential=self.potential, nu=self.nu)

    def rhs(self, t, mu, params):
        coef = self.coefficients(mu, params)
        T = self.terms
        out = np.zeros_like(mu)
        np.add.at(out, T["row"], T["val"] * coef[T["key"]] * mu[T["c1"]] * mu[T["c2"]])
        return out


TERM_DTYPE = np.dtype([("row", np.int64), ("c1", np.int64), ("c2", np.int64), ("key", np.int64), ("val", np.float64)])


def letter_flows(spec: Spec, coef_index) -> dict:
    """Flow of every trainable letter: letter -> [(coef key, replacement letters, factor)] (each
    student's kind, symattn.kinds)."""
    flows = {}
    sym = [ix.symmetric for ix in spec.indices]
    for k in spec.students:
        flows.update(spec.indices[k].kind.letter_flow(k, spec.K, coef_index, sym))
    return flows


def apply_flows(words, alphabet, flows, truncation):
    """Sparse terms of dμ_w/dt = Σ_i μ(w with letter i replaced by its flow), truncated at M."""
    from ..progress import Progress, notes_enabled
    index = {w: i for i, w in enumerate(words)}
    acc = defaultdict(float)
    bar = Progress(len(words), "derive", enabled=notes_enabled() and len(words) > 5000, unit="moment")
    for row, w in enumerate(words):
        if row % 256 == 0:
            bar.update(row)
        for i, letter in enumerate(w):
            for key, repl, factor in flows.get(letter, ()):
                new = w[:i] + tuple(repl) + w[i + 1:]
                if len(new) > truncation:
                    continue                      # zero truncation
                col = index[alphabet.canonical(new)]
                acc[(row, col, 0, key)] += factor
    bar.close()
    return acc


def pack_terms(acc) -> np.ndarray:
    items = sorted((k, v) for k, v in acc.items() if v != 0.0)
    T = np.zeros(len(items), dtype=TERM_DTYPE)
    for n, ((row, c1, c2, key), val) in enumerate(items):
        T[n] = (row, c1, c2, key, val)
    return T


def symmetric_coef_names(spec) -> list:
    K = spec.K
    return ["1", "gamma"] + [f"Gamma_{k}_{l}" for k in range(K) for l in range(K)] + nu_names(spec)


def derive_symmetric(spec, truncation: int | None = None, potential: Potential | None = None,
                     nu: dict | None = None) -> MomentSystem:
    """The direct/tied hierarchy of a spec whose indices are all symmetric (docs/theory.md §4, §5)."""
    spec = load_spec(spec)
    M = truncation or spec.truncation
    P = potential or Potential(spec)
    alphabet = alphabet_of(spec)
    if not all(alphabet.symmetric):
        raise NotImplementedError("untied indices: use derive.untied")
    # flows that preserve the word length (direct S) close the system at M = 2 (§4)
    M = 2 if all(spec.indices[k].kind.closes for k in spec.students) else M
    words = [()] + alphabet.words(M)
    coef_names = symmetric_coef_names(spec)
    cidx = {n: i for i, n in enumerate(coef_names)}
    acc = apply_flows(words, alphabet, letter_flows(spec, cidx), M)
    for key, val in noise_terms(spec, words, alphabet, cidx, M).items():
        acc[key] += val
    nu = nu if nu is not None else nu_expectations(P)
    theta_words = []
    index = {w: i for i, w in enumerate(words)}
    for name in P.names:
        a, b = name.split("_")[1:]
        ka, kb = spec.names.index(a), spec.names.index(b)
        theta_words.append(index[alphabet.canonical(((ka, "S"), (kb, "S")))])
    return MomentSystem(spec, M, alphabet, words, coef_names, pack_terms(acc), theta_words, P, nu)
