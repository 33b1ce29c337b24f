"""Moment hierarchies of online SGD in the limit d → ∞ (docs/theory.md §4, §5), on package time nα/d.

Every parameterisation is a *letter flow*: the time derivative of a trainable letter written as
a linear combination of letter strings with coefficients that depend on the order parameters,

    tied   (§5):  Ṡ_k = −4 Σ_l Γ_kl (S_l S_k + S_k S_l) − 2γ S_k
    direct (§4):  Ṡ_k = −2 Σ_l Γ_kl S_l − γ S_k

so that, by the product rule under the trace, dμ_w/dt = Σ_i μ(w with letter i replaced by its
flow); the O(ε) SGD-noise terms (``derive.noise``) add products of two moments. Words longer than the truncation M are set to zero (P eq. 13). The system is stored as a
list of sparse terms ``dμ[row] += val · coef[key] · μ[c1] · μ[c2]`` (μ[0] = 1 is the empty word;
quadratic terms come from the SGD-noise corrections), with ``coef`` computed from Φ at the
current order parameters: a ``derivation.system.System``, pure data that the reference backend and
code generation read.
"""
from __future__ import annotations

from collections import defaultdict

from ..kinds import alphabet_of, metric_letters
from ..spec import Spec, require_spec
from . import closes
from .noise import noise_terms, nu_expectations, nu_names
from .potential import Potential
from .system import DECAY, GRADIENT, LOSS, NOISE, ONE, STATE, Coef, Column, System, pack_terms, pair_columns

DESCRIPTION = "direct/tied moment hierarchy"


def letter_flows(spec: Spec, coef_index) -> dict:
    """Flow of every trainable letter: letter -> [(coef key, replacement letters, factor)] (each
    student's kind, symattn.kinds; whitened and preconditioned by Σ with a feature covariance)."""
    flows = {}
    sym = [ix.symmetric for ix in spec.indices]
    for k in spec.students:
        flows.update(spec.indices[k].kind.letter_flow(k, spec.K, coef_index, sym, metric_letters(spec)))
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


def symmetric_coefficient_rules(spec) -> tuple:
    """coef = [1, γ, Γ_kl (row-major), ε ν...] (module docstring)."""
    K = spec.K
    return ((Coef("1", ONE), Coef("gamma", DECAY))
            + tuple(Coef(f"Gamma_{k}_{l}", GRADIENT, ("Gamma", k, l)) for k in range(K) for l in range(K))
            + tuple(Coef(n, NOISE, (n,)) for n in nu_names(spec)))


def derive_symmetric(spec, truncation: int | None = None, potential: Potential | None = None,
                     nu: dict | None = None) -> System:
    """The direct/tied hierarchy of a spec whose indices are all symmetric (docs/theory.md §4, §5)."""
    spec = require_spec(spec, "derive_symmetric")
    M = truncation or spec.truncation
    P = potential or Potential(spec)
    alphabet = alphabet_of(spec)
    if not all(alphabet.symmetric):
        raise NotImplementedError("untied indices: use derive.untied")
    # flows that preserve the word length (direct S) close the system at M = 2 (§4) — not with Σ letters
    M = 2 if closes(spec) else M
    words = [()] + alphabet.words(M)
    rules = symmetric_coefficient_rules(spec)
    cidx = {c.name: i for i, c in enumerate(rules)}
    acc = apply_flows(words, alphabet, letter_flows(spec, cidx), M)
    for key, val in noise_terms(spec, words, alphabet, cidx, M, metric_letters(spec)).items():
        acc[key] += val
    nu = nu if nu is not None else nu_expectations(P)
    theta_words = []
    index = {w: i for i, w in enumerate(words)}
    for name in P.names:
        a, b = name.split("_")[1:]
        ka, kb = spec.names.index(a), spec.names.index(b)
        theta_words.append(index[alphabet.canonical(((ka, "S"), (kb, "S")))])
    def at(word):
        return index[alphabet.canonical(word)]
    cols = [Column(f"tr_{name}", STATE, (at(((k, "S"),)),)) for k, name in enumerate(spec.names)]
    cols += pair_columns(spec, at, alphabet.symmetric, spec.features.second_moment) + [Column("loss", LOSS)]
    return System(DESCRIPTION, spec, M, alphabet, words, rules, pack_terms(acc), theta_words, P, tuple(cols), nu=nu)
