"""Online SGD on PyTorch: every seed in one leading array axis, on a CPU or a GPU (docs/theory.md §3).

The same step as :mod:`symattn.simulation.sgd`, written for a batch of S seeds at once: the packed
factors F have shape (S, d, n), a batch of tokens X shape (S, B, L, d), and each product is one
batched matrix multiplication serving every seed. The per-sample ∂𝓛/∂G is the theory's SymPy
expression lambdified for torch (``Loss.compile_gradient(backend="torch")``), never written by hand:

    G_k = X S_k Xᵀ/√d (− C Tr S_k/√d for centred indices),   e = ∂𝓛/∂G
    tied    ∇_W = Xᵀ(e + eᵀ)XW/(B√d) − 2 mean_b tr(e C) W/√d
    untied  ∇_U = Xᵀ e X V/(B√d),   ∇_V = Xᵀ eᵀ X U/(B√d)
    direct  ∇_S = Xᵀ sym(e) X/(B√d) − mean_b tr(e C) I/√d
    θ ← (1 − αγ/d) θ − α ∇_θ

Seeds: the initial matrices of seed s are NumPy's ``draw_initial(spec, d, s)`` — the
very matrices of the NumPy backend's seed s — and the batches come from one torch generator on
the device seeded with ``SeedSequence([seed0, seeds, d, 0x7043])`` (another stream than NumPy's,
reproducible for the same seed0, seeds, d and device). Order parameters are computed on the
device in float64 and copied to the host only at the recording times; divergence is checked on
the device every ``CHECK_EVERY`` steps (one host synchronisation there).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import NumericalFailure, UsageError
from ..measure import order_parameter_arrays
from ..symbolic.loss import build_loss
from .init import draw_initial, psd_sqrt
from .sgd import factor_layout, scheduled


def import_torch():
    """PyTorch, or a one-line UsageError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise UsageError("--backend torch: PyTorch is not installed; install it with "
                         "pip install 'symattn[torch]' (or pip install torch)") from None
    return torch


def torch_dtype(torch, name: str):
    return {"float64": torch.float64, "float32": torch.float32}[name]


class TorchModel:
    """The SGD dynamics of one spec at dimension d for S seeds at once (module docstring)."""

    def __init__(self, spec, dim: int, seeds: int, device="cpu", dtype="float64", loss_grad=None):
        torch = import_torch()
        self.torch, self.spec, self.d, self.S = torch, spec, int(dim), int(seeds)
        self.device = torch.device(device)
        self.dtype = torch_dtype(torch, dtype)
        self.L, self.K, self.B = spec.tokens, spec.K, spec.batch_size
        C = np.asarray(spec.covariance, dtype=float)
        self.identity_cov = np.allclose(C, np.eye(self.L))
        self.C = torch.as_tensor(C, dtype=self.dtype, device=self.device)
        self.R = torch.as_tensor(psd_sqrt(C), dtype=self.dtype, device=self.device)
        self.loss_grad = loss_grad or build_loss(spec).compile_gradient(backend="torch")
        self.alpha, self.gamma = spec.step_size(self.d), spec.weight_decay
        self.schedule, self.n = spec.schedule, 0          # step n uses α s(nα/d) (symattn.schedule)
        # whitened variables: every gradient step preconditioned by Σ (symattn.features)
        self.metric = None if spec.features.identity else torch.as_tensor(
            spec.features.eigenvalues(self.d), dtype=self.dtype, device=self.device)
        self.kinds = [ix.kind for ix in spec.indices]
        self.trainable = [ix.trainable for ix in spec.indices]
        self.noise = spec.label_noise if spec.loss is None else 0.0
        self.frozen = {k: kind.draw(spec.indices[k], 1, None) for k, kind in enumerate(self.kinds) if not kind.factors}
        self.scale = {k: kind.form(self.frozen[k])[1] for k, kind in enumerate(self.kinds) if k in self.frozen}

    # ------------------------------------------------------------------ state
    def set_state(self, states: list) -> None:
        """Pack S per-seed states (each a ``draw_initial`` list of factor dicts) into F (S, d, n)."""
        torch = self.torch
        self.cols, n, self.n_train = factor_layout(self.kinds, self.trainable, states[0])
        F = np.empty((self.S, self.d, n))
        for k, cols in enumerate(self.cols):
            for nm, sl in cols.items():
                for s, st in enumerate(states):
                    F[s, :, sl] = st[k][nm]
        self.F = torch.as_tensor(F, dtype=self.dtype, device=self.device)

    @property
    def state(self) -> list:
        """Batched factor dicts (views of F; a frozen c·I: its scale), as ``measure`` reads them."""
        return [{"scale": self.scale[k]} if k in self.scale else
                {nm: self.F[:, :, sl] for nm, sl in self.cols[k].items()} for k in range(self.K)]

    def get_state(self) -> list:
        """Per-seed NumPy copies of the factors (a frozen c·I: c·I), the ``draw_initial`` format."""
        F = self.F.double().cpu().numpy()
        return [[self.kinds[k].draw(self.spec.indices[k], self.d, None) if k in self.scale else
                 {nm: F[s][:, sl].copy() for nm, sl in self.cols[k].items()} for k in range(self.K)]
                for s in range(self.S)]

    def traces(self):
        """Tr S_k per seed, (S,) tensors, accumulated in float64."""
        out = []
        for k, s in enumerate(self.state):
            form, A, Bm = self.kinds[k].form(s)
            if form == "i":
                out.append(A * self.d)
            elif form == "d":
                out.append(A.diagonal(dim1=-2, dim2=-1).sum(-1, dtype=self.torch.float64))
            else:
                out.append((A * Bm).sum((-2, -1), dtype=self.torch.float64))
        return out

    # ------------------------------------------------------------------ samples
    def sample(self, gen, B: int | None = None):
        """Tokens X (S, B, L, d) with E[x_ia x_jb] = C_ij δ_ab, and label noise (S, B, L, L) or None."""
        torch = self.torch
        B = self.B if B is None else B
        # drawn in float64 and rounded: float32 and float64 runs see the same batches
        X = torch.randn((self.S, B, self.L, self.d), generator=gen, device=self.device,
                        dtype=torch.float64).to(self.dtype)
        if not self.identity_cov:
            X = torch.einsum("ij,sbjd->sbid", self.R, X)
        xi = None
        if self.noise > 0:
            xi = (torch.randn((self.S, B, self.L, self.L), generator=gen, device=self.device,
                              dtype=torch.float64) * math.sqrt(self.noise)).to(self.dtype)
        return X, xi

    # ------------------------------------------------------------------ forward / backward
    def forward(self, X):
        """G (S, B, L, L, K) and the products P = X F (S, B, L, n)."""
        torch = self.torch
        S, B, L, d = X.shape
        P = (X.reshape(S, B * L, d) @ self.F).reshape(S, B, L, -1)
        traces = self.traces()
        gs = []
        XXt = X @ X.transpose(-1, -2) if self.scale else None
        for k, kind in enumerate(self.kinds):
            g = kind.preactivation(P, X, self.cols[k], XXt, self.scale.get(k))
            if kind.centred:                               # centred G (docs/theory.md §1)
                tr = torch.as_tensor(traces[k], device=self.device).to(self.dtype)
                g = g - self.C * tr.reshape(-1, 1, 1, 1) if tr.ndim else g - self.C * tr
            gs.append(g / math.sqrt(d))
        return torch.stack(gs, dim=-1), P

    def per_sample_loss(self, X, xi=None):
        G, _ = self.forward(X)
        return self.loss_grad(G, xi)[0]

    def _grad(self, X, xi):
        """Packed batch-mean gradient (S, d, n_train) without the trace terms, c_k = mean_b tr(e_bk C)
        per seed (K, S), and the batch-mean loss per seed (S,)."""
        torch = self.torch
        S, B, L, d = X.shape
        G, P = self.forward(X)
        loss, e = self.loss_grad(G, xi)
        Z = torch.empty((S, B, L, self.n_train), dtype=self.dtype, device=self.device)
        c = torch.zeros((self.K, S), dtype=self.dtype, device=self.device)
        for k, kind in enumerate(self.kinds):
            if not self.trainable[k]:
                continue
            c[k] = torch.einsum("sbij,ij->s", e[..., k], self.C) / B
            kind.backward(e[..., k], P, X, self.cols[k], Z)
        g = X.reshape(S, B * L, d).transpose(-1, -2) @ Z.reshape(S, B * L, self.n_train)
        g = g * (1.0 / (B * math.sqrt(d)))
        return g, c, loss.mean(dim=-1)

    def step(self, X, xi=None):
        """One SGD step of every seed (in place). Returns the batch-mean loss per seed (S,)."""
        g, c, loss = self._grad(X, xi)
        a, d = self.alpha, self.d
        a, gamma = scheduled(self, a, d)
        sq = math.sqrt(d)
        decay = 1.0 - a * gamma / d
        for k, kind in enumerate(self.kinds):
            if not self.trainable[k]:
                continue
            if not kind.fused_update:
                for sl in self.cols[k].values():
                    kind.update(self.F[:, :, sl], g[..., sl], c[k].reshape(-1, 1), a, decay, sq, metric=self.metric)
                    g[..., sl] = 0.0                      # applied above
            else:
                rate = kind.rate(c[k], sq).reshape(-1, 1, 1)
                factor = decay + a * (rate if self.metric is None else rate * self.metric.reshape(1, -1, 1))
                for sl in self.cols[k].values():
                    self.F[:, :, sl] *= factor
        self.F[:, :, :self.n_train] -= a * (g if self.metric is None else self.metric.reshape(1, -1, 1) * g)
        return loss

    def norm_bound(self):
        """max over indices of a cheap bound of Tr(S Sᵀ)/d, per seed (S,) (‖LRᵀ‖_F ≤ ‖L‖_F‖R‖_F)."""
        torch = self.torch
        out = torch.zeros(self.S, dtype=torch.float64, device=self.device)
        for k, kind in enumerate(self.kinds):
            v = kind.norm_bound([(self.F[:, :, sl].double() ** 2).sum((-2, -1)) for sl in self.cols[k].values()])
            if v is not None:
                out = torch.maximum(out, v / self.d)
        return out


def run_torch(spec, dim, seed_list, steps, *, device, dtype, test_samples, potential, potential_names,
              report=None, on_rows=None, check_every=100, bound=1e8, test_stream=7919) -> dict:
    """Simulate every seed of ``seed_list`` at once; returns {seed: {column: array over points}}.

    ``report(k)``: k more steps of every seed done; ``on_rows(rows)``: {seed: row} of a finished
    measurement time (partial output). Raises NumericalFailure for the first diverging seed."""
    torch = import_torch()
    S = len(seed_list)
    model = TorchModel(spec, dim, S, device=device, dtype=dtype)
    model.set_state([draw_initial(spec, dim, s) for s in seed_list])
    gen = torch.Generator(device=model.device)
    gen.manual_seed(int(np.random.SeedSequence([seed_list[0], S, int(dim), 0x7043]).generate_state(1)[0]))
    tgen = torch.Generator(device=model.device)
    tgen.manual_seed(int(np.random.SeedSequence([seed_list[0], S, int(dim), test_stream]).generate_state(1)[0]))
    first_bad = torch.full((S,), -1, dtype=torch.int64, device=model.device)
    rows = {s: [] for s in seed_list}
    n = pending = 0

    def check():
        b = model.norm_bound()
        bad = (first_bad >= 0) | ~torch.isfinite(b)
        if bool(bad.any()):                           # host synchronisation: once per check
            j = int(torch.nonzero(bad)[0, 0])
            at = int(first_bad[j]) if int(first_bad[j]) >= 0 else n
            t = at * model.alpha / dim
            raise NumericalFailure(f"seed {seed_list[j]}: SGD diverged at step n = {at} (time = {t:.6g}): "
                                   f"non-finite loss or parameters; try a smaller training.noise_ratio", time=t)

    with torch.no_grad():
        for target in steps:
            while n < target:
                X, xi = model.sample(gen)
                loss = model.step(X, xi)
                n += 1
                pending += 1
                first_bad = torch.where((first_bad < 0) & ~torch.isfinite(loss),
                                        torch.full_like(first_bad, n), first_bad)
                if n % check_every == 0:
                    check()
                    if report is not None:
                        report(pending)
                        pending = 0
            check()
            state64 = [{k: (v.double() if hasattr(v, "double") else v) for k, v in st.items()} for st in model.state]
            arrs = order_parameter_arrays(spec, state64, dim)
            cols = list(arrs)
            host = torch.stack([torch.as_tensor(arrs[c], device=model.device).double().expand(S)
                                for c in cols]).cpu().numpy()       # the one copy to the host
            big = [(j, c) for j in range(S) for i, c in enumerate(cols)
                   if c.startswith("q") and abs(host[i, j]) > bound]
            if big:
                j, c = big[0]
                t = n * model.alpha / dim
                raise NumericalFailure(f"seed {seed_list[j]}: SGD diverged at step n = {n} (time = {t:.6g}): "
                                       f"{c} = {host[cols.index(c), j]:.3g}", time=t)
            tl = _test_loss(model, tgen, test_samples) if test_samples else np.full(S, np.nan)
            finished = {}
            for j, s in enumerate(seed_list):
                row = {c: float(host[i, j]) for i, c in enumerate(cols)}
                row["loss"] = float(potential.value({k: row[k] for k in potential_names})) \
                    if potential is not None else float("nan")
                row["test_loss"] = float(tl[j])
                rows[s].append(row)
                finished[s] = row
            if on_rows is not None:
                on_rows(finished)
    if report is not None and pending:
        report(pending)
    return {s: {c: np.array([r[c] for r in rs]) for c in rs[0]} for s, rs in rows.items()}


def _test_loss(model, gen, samples: int, chunk: int = 1024) -> np.ndarray:
    """Monte-Carlo mean of the per-sample loss on ``samples`` fresh samples, per seed."""
    total, done = 0.0, 0
    while done < samples:
        n = min(chunk, samples - done)
        X, xi = model.sample(gen, n)
        total = total + model.per_sample_loss(X, xi).double().sum(dim=-1)
        done += n
    return (total / max(samples, 1)).cpu().numpy()
