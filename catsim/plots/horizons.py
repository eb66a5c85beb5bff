"""Figure 2 across horizons: heat maps of Mret over (N, t) per γ and of the γ difference, and the
half-loss step and Mret at chosen horizons against N (`catsim sweep --study horizons`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure
from catsim.sim.horizons import HALF_LOSS_LEVEL
from catsim.sim.results import SimResults


def _step_edges(steps: np.ndarray) -> np.ndarray:
    """Cell edges of the records after step 0 on a log axis (geometric midpoints)."""
    s = np.asarray(steps[1:], dtype=float)
    mid = np.sqrt(s[:-1] * s[1:])
    return np.concatenate([[s[0] ** 2 / mid[0]], mid, [s[-1] ** 2 / mid[-1]]]) if s.size > 1 \
        else np.array([s[0] / 1.5, s[0] * 1.5])


def _all_seed_stats(steps_NK: np.ndarray):
    """Mean, min and max over seeds of [N, K] crossing steps; NaN where a seed never crossed."""
    every = np.all(np.isfinite(steps_NK), axis=1)
    filled = np.where(every[:, None], steps_NK, 0.0)
    return tuple(np.where(every, f(filled, axis=1), np.nan) for f in (np.mean, np.min, np.max))


def plot_heatmaps(results: SimResults, crossings_GNS: np.ndarray, path, *,
                  method: str | None = None) -> Path:
    """Seed-mean Mret over (t, N), one panel per γ (white dots: the seed-mean half-loss step
    where every seed crossed), and largest γ − smallest γ when there are two or more."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    method = method or results.methods[0]
    mean_GNS = np.nanmean(results.sel("mret", method=method), axis=2)[..., 1:]  # [G, N, S-1]
    gammas = list(results.gammas)
    x = _step_edges(results.steps)
    y = np.arange(len(results.group_sizes) + 1) - 0.5
    panels = len(gammas) + (1 if len(gammas) > 1 else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.8), constrained_layout=True,
                             squeeze=False)
    axes = axes[0]
    for i, g in enumerate(gammas):
        ax = axes[i]
        mesh = ax.pcolormesh(x, y, mean_GNS[i], cmap="viridis", vmin=0, vmax=1, shading="flat")
        mean_step, _, _ = _all_seed_stats(crossings_GNS[i])
        ax.plot(mean_step, np.arange(len(results.group_sizes)), "o", color="white", mec="k", mew=0.5, ms=4,
                label=f"half-loss step (Mret = {HALF_LOSS_LEVEL:g})")
        ax.set_title(f"Mret, γ = {g:g} (mean of {len(results.seeds)} seed(s))")
        fig.colorbar(mesh, ax=ax, shrink=0.85)
        ax.legend(fontsize=7, loc="lower left")
    if len(gammas) > 1:
        ax = axes[-1]
        diff = mean_GNS[-1] - mean_GNS[0]
        bound = max(float(np.nanmax(np.abs(diff))), 1e-6)
        mesh = ax.pcolormesh(x, y, diff, cmap="RdBu", shading="flat",
                             norm=TwoSlopeNorm(0.0, -bound, bound))
        ax.set_title(f"Mret γ = {gammas[-1]:g} − γ = {gammas[0]:g}")
        fig.colorbar(mesh, ax=ax, shrink=0.85)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("step t")
        ax.set_yticks(np.arange(len(results.group_sizes)))
        ax.set_yticklabels([f"{n:,}" for n in results.group_sizes], fontsize=7)
        ax.set_ylabel("group size N")
    fig.suptitle(f"Mret(N, t) — method '{method}', {int(results.steps[-1]):,} steps", fontsize=11)
    return save_figure(fig, path, dpi=130)


def plot_half_loss(results: SimResults, crossings_GNS: np.ndarray, path, *,
                   report_steps: Sequence[int] = (), method: str | None = None) -> Path:
    """(a) the half-loss step against N per γ (seed mean, bars min–max; triangles at the top: some
    seed never crossed within the horizon); (b) seed-mean Mret against N at `report_steps`."""
    import matplotlib.pyplot as plt

    method = method or results.methods[0]
    horizon = int(results.steps[-1])
    ns = np.asarray(results.group_sizes)
    styles = ("-", "--", ":", "-.")
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6), constrained_layout=True)
    for i, g in enumerate(results.gammas):
        mean, lo, hi = _all_seed_stats(crossings_GNS[i])
        every = np.isfinite(mean)
        colour = f"C{i}"
        a.errorbar(ns, mean, yerr=np.vstack([mean - lo, hi - mean]), fmt="o" + styles[i % 4],
                   color=colour, ms=4, capsize=2, label=f"γ={g:g}")
        never = ~every
        a.plot(ns[never], np.full(never.sum(), horizon * (1.4 + 0.35 * i)), "^", color=colour, ms=6,
               label=f"γ={g:g}: a seed never within {horizon:,}" if never.any() else None)
    a.axhline(horizon, color="0.5", lw=0.8, ls=":")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("group size N")
    a.set_ylabel(f"first step with Mret ≤ {HALF_LOSS_LEVEL:g}")
    a.set_title("(a) half-loss step (seed mean, min–max)")
    a.grid(alpha=0.3)
    a.legend(fontsize=7)
    runs = results.sel("mret", method=method)  # [G, N, K, S]
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, max(1, len(report_steps))))
    for t, colour in zip(report_steps, colours):
        ix = int(np.flatnonzero(results.steps == t)[0])
        for i in range(len(results.gammas)):
            b.plot(ns, runs[i, :, :, ix].mean(axis=-1), styles[i % 4], marker="o", ms=3,
                   color=colour, label=f"t={t:,}" if i == 0 else None)
    handles, labels = b.get_legend_handles_labels()
    for i, g in enumerate(results.gammas):
        handles.append(plt.Line2D([], [], color="k", ls=styles[i % 4]))
        labels.append(f"γ={g:g}")
    b.legend(handles, labels, fontsize=7)
    b.set_xscale("log", base=2)
    b.set_ylim(-0.02, 1.02)
    b.set_xlabel("group size N")
    b.set_ylabel("Mret (seed mean)")
    b.set_title("(b) Mret against N at several horizons")
    b.grid(alpha=0.3)
    fig.suptitle(f"How the Fig. 2 regimes move with the horizon — method '{method}'", fontsize=11)
    return save_figure(fig, path, dpi=130)
