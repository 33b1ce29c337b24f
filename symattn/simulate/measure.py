"""Order parameters of the current matrices, as the CSV columns of INTERFACE.md (THEORY.md §2, §5, §6).

Traces use factor identities and never form S = WW^T or UV^T:
``Tr(L_a R_a^T L_b R_b^T) = Σ (R_a^T L_b) ∘ (L_a^T R_b)`` (tied: ``‖W_a^T W_b‖_F²``),
``Tr(S L R^T) = Σ R ∘ (S L)`` for a dense (direct) S, ``Tr(cI·S) = c Tr S`` for an identity teacher.
"""
from __future__ import annotations

import numpy as np


def _factors(par: str, s: dict):
    """(kind, left, right) with S = left·right^T ('f'), dense ('d') or c·I ('i')."""
    if par == "tied":
        return "f", s["W"], s["W"]
    if par == "untied":
        return "f", s["U"], s["V"]
    if par == "identity":
        return "i", float(s["S"][0, 0]), None
    return "d", s["S"], None


def trace(par: str, s: dict) -> float:
    """Tr S (unnormalised)."""
    kind, A, Bm = _factors(par, s)
    if kind == "f":
        return float(np.einsum("ij,ij->", A, Bm))
    if kind == "i":
        return A * (s["S"].shape[0])
    return float(np.trace(A))


def trace_product(par_a: str, sa: dict, par_b: str, sb: dict, transpose_b: bool = False) -> float:
    """Tr(S_a S_b) or, with ``transpose_b``, Tr(S_a S_b^T) (unnormalised)."""
    ka, La, Ra = _factors(par_a, sa)
    kb, Lb, Rb = _factors(par_b, sb)
    if transpose_b:
        if kb == "f":
            Lb, Rb = Rb, Lb
        elif kb == "d":
            Lb = Lb.T
    if ka == "i":
        return La * trace(par_b, sb)
    if kb == "i":
        return Lb * trace(par_a, sa)
    if ka == "f" and kb == "f":
        A = Ra.T @ Lb
        if La is Ra and Lb is Rb:       # tied pair: ‖W_a^T W_b‖²
            return float(np.einsum("ij,ij->", A, A))
        return float(np.einsum("ij,ji->", A, Rb.T @ La))
    if ka == "d" and kb == "d":
        return float(np.einsum("ij,ji->", La, Lb))
    if ka == "f":                         # Tr(L R^T S) = Σ R ∘ (S L)
        return float(np.einsum("ij,ij->", Ra, Lb @ La))
    return float(np.einsum("ij,ij->", Rb, La @ Lb))   # Tr(S L R^T) = Σ R ∘ (S L)


def column_names(spec) -> list:
    """Measured order-parameter columns in INTERFACE.md order (without time, loss, test_loss)."""
    cols, names, par = [], spec.names, [ix.parameterization for ix in spec.indices]
    for a, n in enumerate(names):
        cols.append(f"tr_{n}")
        if par[a] == "untied":
            cols += [f"m_{n}", f"trA_{n}", f"trB_{n}"]
    for a in range(spec.K):
        for b in range(a, spec.K):
            p = f"{names[a]}_{names[b]}"
            cols += [f"q_{p}", f"p_{p}"]
            if par[a] == "untied" and par[b] == "untied":
                cols += [f"q1_{p}", f"q2_{p}"]
    return cols


def order_parameters(spec, state: list, dim: int) -> dict:
    """tr, m, trA, trB, q, p, q1, q2 of the matrices in ``state`` (list of factor dicts)."""
    d, names = dim, spec.names
    par = [ix.parameterization for ix in spec.indices]
    out, tr = {}, []
    for a, n in enumerate(names):
        t = trace(par[a], state[a])
        tr.append(t / d)
        out[f"tr_{n}"] = t / d
        if par[a] == "untied":
            U, V = state[a]["U"], state[a]["V"]
            out[f"m_{n}"] = t / np.sqrt(d)
            out[f"trA_{n}"] = float(np.einsum("ij,ij->", U, U)) / d
            out[f"trB_{n}"] = float(np.einsum("ij,ij->", V, V)) / d
    for a in range(spec.K):
        for b in range(a, spec.K):
            p = f"{names[a]}_{names[b]}"
            q = trace_product(par[a], state[a], par[b], state[b]) / d
            out[f"q_{p}"] = q
            out[f"p_{p}"] = q - tr[a] * tr[b]
            if par[a] == "untied" and par[b] == "untied":
                out[f"q1_{p}"] = trace_product(par[a], state[a], par[b], state[b], transpose_b=True) / d
                out[f"q2_{p}"] = q
    return out


def student_spectra(spec, state: list, dim: int) -> dict:
    """Sorted eigenvalues (length d) of every student's S, keyed by index name (issue 6).

    tied: squares of the singular values of W (d×d_k), padded with zeros to d (S = WW^T is never
    formed); direct: ``eigvalsh`` of the symmetrised S; untied: ``eigvalsh`` of the symmetric part
    (UV^T + VU^T)/2 (S itself is not symmetric)."""
    out = {}
    for k in spec.students:
        ix, s = spec.indices[k], state[k]
        par = ix.parameterization
        if par == "tied":
            sv = np.linalg.svd(s["W"], compute_uv=False)
            ev = np.concatenate([np.zeros(max(dim - len(sv), 0)), sv[:dim] ** 2])
        elif par == "untied":
            M = s["U"] @ s["V"].T
            ev = np.linalg.eigvalsh(0.5 * (M + M.T))
        else:
            ev = np.linalg.eigvalsh(0.5 * (s["S"] + s["S"].T))
        out[spec.names[k]] = np.sort(ev)
    return out


def test_loss(model, rng, samples: int = 4096, chunk: int = 1024) -> float:
    """Monte-Carlo mean of the per-sample loss on ``samples`` fresh samples drawn from ``rng``."""
    total, done = 0.0, 0
    while done < samples:
        n = min(chunk, samples - done)
        X, xi = model.sample(rng, n)
        total += float(np.sum(model.per_sample_loss(X, xi)))
        done += n
    return total / max(samples, 1)
