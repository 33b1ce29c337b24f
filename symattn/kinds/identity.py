"""A frozen scaled identity S = scale·I (teacher only): nothing drawn, nothing trained."""
from __future__ import annotations

import numpy as np

from .. import matrix as mat
from .base import Kind, transpose


class Identity(Kind):
    name = "identity"
    trainable = False
    uses_init_scale = False
    uses_scale = True
    whitens = False            # S̃ = c·Σ is no longer a multiple of I (symattn.features)

    def law(self, ix):
        from ..symbolic.freeprob import Identity as IdentityLaw
        return IdentityLaw(ix.scale)

    def draw(self, ix, dim, rng):
        return {"S": ix.scale * np.eye(dim)}

    def realise(self, ix, N, rng, diagonal):
        return mat.Scalar(float(ix.scale))

    def preactivation(self, P, X, cols, XXt=None, scale=None):
        return scale * (XXt if XXt is not None else X @ transpose(X))

    def form(self, s):
        return "i", (s["scale"] if "scale" in s else float(s["S"][0, 0])), None
