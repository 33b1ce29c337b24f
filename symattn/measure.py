"""Order parameters of the current matrices, as the CSV columns of docs/interface.md (docs/theory.md §2, §5, §6).

Traces use factor identities and never form S = WW^T or UV^T:
``Tr(L_a R_a^T L_b R_b^T) = Σ (R_a^T L_b) ∘ (L_a^T R_b)`` (tied: ``‖W_a^T W_b‖_F²``),
``Tr(S L R^T) = Σ R ∘ (S L)`` for a dense (direct) S, ``Tr(cI·S) = c Tr S`` for an identity teacher.
"""
from __future__ import annotations

import numpy as np


def _einsum(subscripts: str, *ops):
    """np.einsum, or torch.einsum for tensors (batched states have a leading seed axis: '...')."""
    if type(ops[0]).__module__.startswith("torch"):
        import torch
        return torch.einsum(subscripts, *ops)
    return np.einsum(subscripts, *ops)


def _T(A):
    return A.swapaxes(-1, -2)


def trace(kind, s: dict, dim: int | None = None):
    """Tr S (unnormalised; per seed for a batched state); ``kind`` from symattn.kinds."""
    form, A, Bm = kind.form(s)
    if form == "f":
        return _einsum("...ij,...ij->...", A, Bm)
    if form == "i":
        return A * (dim if dim is not None else s["S"].shape[0])
    return _einsum("...ii->...", A)


def trace_product(kind_a, sa: dict, kind_b, sb: dict, transpose_b: bool = False, dim: int | None = None):
    """Tr(S_a S_b) or, with ``transpose_b``, Tr(S_a S_b^T) (unnormalised; per seed when batched)."""
    ka, La, Ra = kind_a.form(sa)
    kb, Lb, Rb = kind_b.form(sb)
    if transpose_b:
        if kb == "f":
            Lb, Rb = Rb, Lb
        elif kb == "d":
            Lb = _T(Lb)
    if ka == "i":
        return La * trace(kind_b, sb, dim)
    if kb == "i":
        return Lb * trace(kind_a, sa, dim)
    if ka == "f" and kb == "f":
        A = _T(Ra) @ Lb
        if La is Ra and Lb is Rb:       # tied pair: ‖W_a^T W_b‖²
            return _einsum("...ij,...ij->...", A, A)
        return _einsum("...ij,...ji->...", A, _T(Rb) @ La)
    if ka == "d" and kb == "d":
        return _einsum("...ij,...ji->...", La, Lb)
    if ka == "f":                         # Tr(L R^T S) = Σ R ∘ (S L)
        return _einsum("...ij,...ij->...", Ra, Lb @ La)
    return _einsum("...ij,...ij->...", Rb, La @ Lb)   # Tr(S L R^T) = Σ R ∘ (S L)


def column_names(spec) -> list:
    """Measured order-parameter columns in docs/interface.md order (without time, loss, test_loss)."""
    cols, names, kinds = [], spec.names, [ix.kind for ix in spec.indices]
    for a, n in enumerate(names):
        cols.append(f"tr_{n}")
        cols += kinds[a].index_columns(n)
    for a in range(spec.K):
        for b in range(a, spec.K):
            p = f"{names[a]}_{names[b]}"
            cols += [f"q_{p}", f"p_{p}"]
            if not (kinds[a].symmetric or kinds[b].symmetric):     # Ω ≠ Ψ: Tr(S_a S_bᵀ) and Tr(S_a S_b)
                cols += [f"q1_{p}", f"q2_{p}"]
    return cols


def order_parameter_arrays(spec, state: list, dim: int) -> dict:
    """tr, m, trA, trB, q, p, q1, q2 of the matrices in ``state`` (list of factor dicts), as arrays:
    0-d for one NumPy state, shape (seeds,) for a batched state (NumPy or torch, on its device)."""
    d, names = dim, spec.names
    kinds = [ix.kind for ix in spec.indices]
    out, tr = {}, []
    for a, n in enumerate(names):
        t = trace(kinds[a], state[a], d)
        tr.append(t / d)
        out[f"tr_{n}"] = t / d
        out.update(kinds[a].index_values(n, state[a], t, d, _einsum))
    m2 = spec.features.second_moment         # φ(Σ²): p = q − φ(Σ²) tr·tr vanishes for free matrices (features.py)
    for a in range(spec.K):
        for b in range(a, spec.K):
            p = f"{names[a]}_{names[b]}"
            q = trace_product(kinds[a], state[a], kinds[b], state[b], dim=d) / d
            out[f"q_{p}"] = q
            out[f"p_{p}"] = q - m2 * tr[a] * tr[b]
            if not (kinds[a].symmetric or kinds[b].symmetric):
                out[f"q1_{p}"] = trace_product(kinds[a], state[a], kinds[b], state[b], transpose_b=True, dim=d) / d
                out[f"q2_{p}"] = q
    return out


def order_parameters(spec, state: list, dim: int) -> dict:
    """tr, m, trA, trB, q, p, q1, q2 of the matrices in ``state`` (list of factor dicts), as floats."""
    return {c: float(v) for c, v in order_parameter_arrays(spec, state, dim).items()}


def student_spectra(spec, state: list, dim: int) -> dict:
    """Sorted eigenvalues (length d) of every student's S (its symmetric part where S ≠ Sᵀ), keyed by
    index name; each kind computes its own without forming S where it can (symattn.kinds)."""
    return {spec.names[k]: np.sort(spec.indices[k].kind.spectrum(state[k], dim)) for k in spec.students}


def test_loss(model, rng, samples: int = 4096, chunk: int = 1024) -> float:
    """Monte-Carlo mean of the per-sample loss on ``samples`` fresh samples drawn from ``rng``."""
    total, done = 0.0, 0
    while done < samples:
        n = min(chunk, samples - done)
        X, xi = model.sample(rng, n)
        total += float(np.sum(model.per_sample_loss(X, xi)))
        done += n
    return total / max(samples, 1)
