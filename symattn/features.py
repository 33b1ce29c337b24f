"""Anisotropic token features: x_i ~ N(0, Σ) with a d×d covariance Σ given by its spectral law
(docs/theory.md §1, "Feature covariance").

Σ is diagonal without loss of generality (every initial law of the package is rotation invariant), with
eigenvalues of mean 1 (Tr Σ/d = 1). Everything is written in the *whitened* variables S̃ = Σ^{½} S Σ^{½}
(W̃ = Σ^{½} W, Ũ = Σ^{½} U, Ṽ = Σ^{½} V): with x = Σ^{½} z, z ~ N(0, I),

    G_ijk = (x_iᵀ S_k x_j − C_ij Tr(S_k Σ))/√d = (z_iᵀ S̃_k z_j − C_ij Tr S̃_k)/√d,

so the loss, Φ, its Gaussian limit and the SGD-noise constants are the isotropic ones of the whitened
matrices, and the order parameters are the Σ-weighted traces tr_k = Tr(ΣS_k)/d, q_kl = Tr(ΣS_kΣS_l)/d; the
structural overlap is p_kl = q_kl − φ(Σ²) tr_k tr_l, which vanishes for independent (free) S_k, S_l as
φ(ΣXΣY) = φ(Σ²)φ(X)φ(Y) (p_kk = φ(S²) − φ(S)², the spread of S's spectrum, as without Σ). What Σ
changes is the geometry of the descent: a step on W is −α∇_W𝓛 = −αΣ^{½}∇_{W̃}𝓛, so on the whitened factors
every gradient step — of SGD, of its mean, of its noise — is preconditioned by Σ:

    W̃ ← W̃ − αΣ∇_{W̃}𝓛,  S̃ ← S̃ − αΣ(∇_{S̃}𝓛)Σ (a matrix trained as it is),   weight decay unchanged,

(each kind's ``matrix_velocity`` and ``noise_map`` apply it: ``Kind.precondition``). Laws (the key
``model.feature_covariance``):

* ``"identity"`` (default): Σ = I;
* ``{law = "power", exponent = a}``: eigenvalues ∝ (i/d)^(−a), i = 1 … d, 0 ≤ a < ½ — the limit law
  (1 − a)u^(−a), u ∈ (0, 1], has φ(Σ²) = (1 − a)²/(1 − 2a), which the order parameters need finite;
* ``{law = "two_level", ratio = r, weight = w}``: a fraction w of the eigenvalues r times the others;
* ``{law = "file", path = "..."}``: the empirical law of the eigenvalues in a text file (whitespace-separated
  numbers) or a ``.npy`` file, resampled at each size by its quantiles.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import SpecError

LAWS = {"identity": (), "power": ("exponent",), "two_level": ("ratio", "weight"), "file": ("path",)}
MAX_RATIO = 1e6


@dataclass(frozen=True)
class FeatureCovariance:
    """The spectral law of Σ (module docstring)."""

    law: str = "identity"
    params: tuple = field(default=())            # sorted (name, value) pairs
    values: tuple = field(default=(), repr=False, compare=False)    # the file's eigenvalues, mean 1

    @property
    def identity(self) -> bool:
        return self.law == "identity"

    def _p(self, name):
        return dict(self.params)[name]

    def eigenvalues(self, n: int, matched: bool = False) -> np.ndarray:
        """The n eigenvalues of Σ at size n (ascending, mean 1): the spec's definition at dimension n (the power
        law's (i/n)^(−a)). ``matched`` (the matrix-level theory's realisation of the limit law): the largest one
        moved so that φ(Σ²) is the limit law's — the power law's φ(Σ²) converges only like n^(−(1 − 2a)) from
        below (its singular end), 0.52 short of 1.8 at n = 128 for a = 0.4, which slowed the theory's
        convergence in N to the same rate."""
        n = int(n)
        if self.law == "identity":
            lam = np.ones(n)
        elif self.law == "power":
            lam = (np.arange(1, n + 1) / n) ** (-self._p("exponent"))
            if matched and n > 2:
                lam = _match_second_moment(lam, self.second_moment)
        elif self.law == "two_level":
            high = int(round(self._p("weight") * n))
            lam = np.r_[np.ones(n - high), np.full(high, self._p("ratio"))]
        else:
            v = np.sort(np.asarray(self.values))
            lam = np.quantile(v, (np.arange(n) + 0.5) / n, method="inverted_cdf")     # the empirical law's steps
        lam = np.sort(lam)
        return lam / lam.mean()

    def root(self, n: int, matched: bool = False) -> np.ndarray:
        """Σ^{½} (its diagonal) at size n (``matched``: see ``eigenvalues``)."""
        return np.sqrt(self.eigenvalues(n, matched))

    @property
    def second_moment(self) -> float:
        """φ(Σ²) of the limit law (φ(Σ) = 1)."""
        return self.moment(2)

    def moment(self, n: int) -> float:
        """φ(Σ^n) of the limit law: power law ∫₀¹((1 − a)u^(−a))^n du = (1 − a)^n/(1 − na), infinite for
        n ≥ 1/a; two levels (w rⁿ + 1 − w)/(w r + 1 − w)ⁿ; a file's mean of λⁿ."""
        if self.law == "identity" or n == 0:
            return 1.0
        if self.law == "power":
            a = self._p("exponent")
            return (1 - a) ** n / (1 - n * a) if n * a < 1 else math.inf
        if self.law == "two_level":
            r, w = self._p("ratio"), self._p("weight")
            return (w * r ** n + 1 - w) / (w * r + 1 - w) ** n
        return float(np.mean(np.asarray(self.values) ** n))

    def finite_moments(self) -> float:
        """The largest n with φ(Σ^n) finite (∞ but for a power law: the largest n < 1/a)."""
        if self.law != "power" or self._p("exponent") == 0:
            return math.inf
        return math.ceil(1 / self._p("exponent")) - 1

    @property
    def convergence_order(self) -> float:
        """p with the matrix-level realisation's traces converging like N^(−p) to the limit: a power law's higher
        moments φ(Σ^k) (k ≥ 3, which the dynamics reach) are infinite for a ≥ 1/k, and its realisation's
        converge like N^(−(1 − 2a)) at best; 1 for the other laws. The matrix-level error estimate and
        extrapolation use it (``spectral.solve_spectral``)."""
        return min(1.0, 1.0 - 2.0 * self._p("exponent")) if self.law == "power" else 1.0

    def describe(self) -> str:
        if self.identity:
            return "identity"
        return f"{self.law} (" + ", ".join(f"{k} = {v}" for k, v in self.params) + ")"


IDENTITY = FeatureCovariance()


def _match_second_moment(lam: np.ndarray, m2: float) -> np.ndarray:
    """λ (ascending) with its largest value replaced and all rescaled so that mean λ = 1 and mean λ² = m2: the
    larger root x of (n − m2)x² − 2 m2 A x + nB − m2 A² = 0, A and B the sum and sum of squares of the others."""
    n = len(lam)
    rest = np.sort(lam)[:-1]
    A, B = rest.sum(), float(rest @ rest)
    a, b, c = n - m2, -2.0 * m2 * A, n * B - m2 * A * A
    disc = b * b - 4 * a * c
    if a <= 0 or disc < 0:
        return lam
    x = (-b + np.sqrt(disc)) / (2 * a)
    out = np.r_[rest, x]
    return out / out.mean()


def parse_features(src: str, raw, base: Path | None = None) -> FeatureCovariance:
    """The FeatureCovariance of ``model.feature_covariance``; SpecError naming the key otherwise."""
    key = "model.feature_covariance"
    if raw == "identity":
        return IDENTITY
    if not isinstance(raw, dict):
        raise SpecError(f"{src}: {key}: expected \"identity\" or a table such as {{law = \"power\", exponent = 0.3}}")
    law = raw.get("law")
    if law not in LAWS or law == "identity":
        raise SpecError(f"{src}: {key}.law: {law!r}; allowed: power, two_level, file (or the string \"identity\")")
    unknown = sorted(set(raw) - {"law", *LAWS[law]})
    if unknown:
        raise SpecError(f"{src}: {key}.{unknown[0]}: unknown key for law {law!r}; allowed: {', '.join(LAWS[law])}")
    for name in LAWS[law]:
        if name not in raw:
            raise SpecError(f"{src}: {key}.{name}: required for law {law!r}")
    if law == "file":
        return _from_file(src, key, raw["path"], base)
    params = {}
    for name in LAWS[law]:
        v = raw[name]
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))):
            raise SpecError(f"{src}: {key}.{name}: expected a number, got {v!r}")
        params[name] = float(v)
    if law == "power" and not 0 <= params["exponent"] < 0.5:
        raise SpecError(f"{src}: {key}.exponent: must be in [0, 0.5), got {params['exponent']:g} (the limit law "
                        f"(1 − a)u^(−a) has φ(Σ²) = (1 − a)²/(1 − 2a), infinite from a = 1/2 on)")
    if law == "two_level":
        if not 0 < params["ratio"] <= MAX_RATIO:
            raise SpecError(f"{src}: {key}.ratio: must be in (0, {MAX_RATIO:g}], got {params['ratio']:g}")
        if not 0 < params["weight"] < 1:
            raise SpecError(f"{src}: {key}.weight: must be in (0, 1), got {params['weight']:g}")
    return FeatureCovariance(law, tuple(sorted(params.items())))


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _from_file(src, key, path, base):
    if not isinstance(path, str) or not path:
        raise SpecError(f"{src}: {key}.path: expected a file name, got {path!r}")
    p = Path(path)
    if not p.is_absolute() and base is not None:
        p = base / p
    from .files import read_input_or_refuse
    data = read_input_or_refuse(p, 50_000_000, "feature covariance's eigenvalues", f"{src}: {key}.path: {path}")
    try:
        if p.suffix == ".npy":
            import io
            v = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            words = data.decode("utf-8").split()
            bad = next((i for i, w in enumerate(words) if not _is_number(w)), None)
            if bad is not None:       # the file's own text is not echoed (it may be anything, e.g. the environment)
                raise ValueError(f"entry {bad + 1} is not a number")
            v = np.array(words, dtype=float)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError(f"{src}: {key}.path: {path}: cannot read eigenvalues ({type(exc).__name__ if isinstance(exc, UnicodeDecodeError) else exc}; "
                        f"expected whitespace-separated numbers or a .npy array)") from None
    v = np.asarray(v, dtype=float).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v < 0) or not np.any(v > 0):
        raise SpecError(f"{src}: {key}.path: {path}: expected non-negative finite eigenvalues, not all zero")
    if v.max() / max(v.mean(), 1e-300) > MAX_RATIO:
        raise SpecError(f"{src}: {key}.path: {path}: the largest eigenvalue is more than {MAX_RATIO:g} times the mean")
    v = v / v.mean()
    return FeatureCovariance("file", (("path", str(path)),), tuple(float(x) for x in v))
