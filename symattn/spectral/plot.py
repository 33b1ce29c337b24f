"""Histograms of the students' evolving eigenvalue densities."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .result import SpectralResult


def plot_spectra(result: SpectralResult, sim_eigs=None, path="spectra.png", times=None, bins: int = 60,
                 drop_zero_atom: bool = True):
    """Histograms of the evolving eigenvalue density of each student at a few times.

    ``sim_eigs`` (optional): eigenvalues of simulated students, ``{student: {time: eigs}}`` or, for
    a single student, ``{time: eigs}``; they are drawn next to the spectral solution at the result
    time nearest to each given time. The exact zero atom of a rank-deficient tied student is left
    out of the histograms (its mass is written in the legend)."""
    import matplotlib
    from matplotlib.figure import Figure

    names = list(result.spectra)
    if sim_eigs is not None and names and not isinstance(next(iter(sim_eigs.values())), dict):
        sim_eigs = {names[0]: sim_eigs}
    tgrid = result.time
    fig = Figure(figsize=(7, 3.2 * max(1, len(names))))
    axes = fig.subplots(len(names), 1, squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        sims = (sim_eigs or {}).get(name, {})
        ts = list(sims) if sims else (times if times is not None else np.linspace(tgrid[0], tgrid[-1], 4))
        colors = matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(ts)))
        idx = [int(np.argmin(np.abs(tgrid - float(t)))) for t in ts]
        pool = [result.spectra[name][i] for i in idx] + [np.asarray(sims[t], float) for t in sims]
        lo = min(float(np.min(v)) for v in pool)
        hi = max(float(np.max(v)) for v in pool)
        edges = np.linspace(lo, hi if hi > lo else lo + 1.0, bins + 1)      # common bins
        width = edges[1] - edges[0]

        def _hist(ev, **kw):
            ev = np.asarray(ev, dtype=float)
            keep = np.abs(ev) > 1e-10 * max(np.abs(ev).max(), 1e-300) if drop_zero_atom else np.ones(len(ev), bool)
            ax.hist(ev[keep], bins=edges, weights=np.full(keep.sum(), 1.0 / (len(ev) * width)), **kw)
            return 1.0 - keep.mean()

        for t, i, col in zip(ts, idx, colors):
            atom = _hist(result.spectra[name][i], histtype="step", color=col, lw=1.5)
            ax.plot([], [], color=col, label=f"spectral t={tgrid[i]:.3g}" + (f" (atom {atom:.2f} at 0)" if atom > 0 else ""))
            if sims:
                _hist(sims[t], histtype="stepfilled", alpha=0.25, color=col, label=f"simulation t={float(t):.3g}")
        ax.set_title(f"{result.spec_name}: eigenvalue density of {name} (N = {result.size})")
        ax.set_xlabel("eigenvalue")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
    fig.tight_layout()
    from ..files import atomic_target
    path = Path(path)
    with atomic_target(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")
    return path
