"""Anisotropic token features: x_i ~ N(0, Σ) with a d×d covariance Σ given by its spectral law
(docs/theory.md §1, "Feature covariance").

Σ is diagonal without loss of generality (every initial law of the package is rotation invariant), with
eigenvalues of mean 1 (Tr Σ/d = 1). Everything is written in the *whitened* variables S̃ = Σ^{½} S Σ^{½}
(W̃ = Σ^{½} W, Ũ = Σ^{½} U, Ṽ = Σ^{½} V): with x = Σ^{½} z, z ~ N(0, I),

    G_ijk = (x_iᵀ S_k x_j − C_ij Tr(S_k Σ))/√d = (z_iᵀ S̃_k z_j − C_ij Tr S̃_k)/√d,

so the loss, Φ, its Gaussian limit and the SGD-noise constants are the isotropic ones of the whitened
matrices, and the order parameters are the Σ-weighted traces tr_k = Tr(ΣS_k)/d, q_kl = Tr(ΣS_kΣS_l)/d. What Σ
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

    def eigenvalues(self, n: int) -> np.ndarray:
        """The n eigenvalues of Σ at size n (ascending, mean 1): the law's quantiles."""
        n = int(n)
        if self.law == "identity":
            lam = np.ones(n)
        elif self.law == "power":
            lam = (np.arange(1, n + 1) / n) ** (-self._p("exponent"))
        elif self.law == "two_level":
            high = int(round(self._p("weight") * n))
            lam = np.r_[np.ones(n - high), np.full(high, self._p("ratio"))]
        else:
            v = np.sort(np.asarray(self.values))
            lam = np.quantile(v, (np.arange(n) + 0.5) / n, method="inverted_cdf")     # the empirical law's steps
        lam = np.sort(lam)
        return lam / lam.mean()

    def root(self, n: int) -> np.ndarray:
        """Σ^{½} (its diagonal) at size n."""
        return np.sqrt(self.eigenvalues(n))

    @property
    def second_moment(self) -> float:
        """φ(Σ²) of the limit law (φ(Σ) = 1)."""
        if self.law == "identity":
            return 1.0
        if self.law == "power":
            a = self._p("exponent")
            return (1 - a) ** 2 / (1 - 2 * a)
        if self.law == "two_level":
            r, w = self._p("ratio"), self._p("weight")
            return (w * r * r + 1 - w) / (w * r + 1 - w) ** 2
        v = np.asarray(self.values)
        return float(np.mean(v ** 2))

    def describe(self) -> str:
        if self.identity:
            return "identity"
        return f"{self.law} (" + ", ".join(f"{k} = {v}" for k, v in self.params) + ")"


IDENTITY = FeatureCovariance()


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


def _from_file(src, key, path, base):
    if not isinstance(path, str) or not path:
        raise SpecError(f"{src}: {key}.path: expected a file name, got {path!r}")
    p = Path(path)
    if not p.is_absolute() and base is not None:
        p = base / p
    try:
        if p.suffix == ".npy":
            v = np.load(p, allow_pickle=False)
        else:
            text = p.read_text()
            if len(text) > 50_000_000:
                raise SpecError(f"{src}: {key}.path: {path}: file too large")
            v = np.array(text.split(), dtype=float)
    except SpecError:
        raise
    except (OSError, ValueError) as exc:
        raise SpecError(f"{src}: {key}.path: {path}: cannot read eigenvalues ({exc})") from None
    v = np.asarray(v, dtype=float).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v < 0) or not np.any(v > 0):
        raise SpecError(f"{src}: {key}.path: {path}: expected non-negative finite eigenvalues, not all zero")
    if v.max() / max(v.mean(), 1e-300) > MAX_RATIO:
        raise SpecError(f"{src}: {key}.path: {path}: the largest eigenvalue is more than {MAX_RATIO:g} times the mean")
    v = v / v.mean()
    return FeatureCovariance("file", (("path", str(path)),), tuple(float(x) for x in v))
