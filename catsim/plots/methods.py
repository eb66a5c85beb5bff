"""Figures of the methods study (`catsim.experiments.methods.MethodsStudy`): final Mret and Qpos
against N per method, and the Mret-vs-Qpos frontier per N."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure


def plot_vs_n(study, path) -> Path:
    """(a) final Mret vs N, (b) final Qpos vs N; one line per method (seed mean, bars = seed std)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    n = np.asarray(study.group_sizes)
    cmap = plt.get_cmap("tab20")
    trained = study.trained()
    for i, name in enumerate(study.methods):
        for ax, metric in zip(axes, ("mret", "qpos")):
            values = getattr(study, metric)[i]
            mean, std = np.nanmean(values, -1), np.nanstd(values, -1)
            ax.errorbar(n, np.where(trained[i], mean, np.nan), yerr=std, color=cmap(i % 20),
                        marker="o", ms=3, lw=1.2, capsize=2, label=name,
                        ls="-" if i < 6 else "--")
            if not trained[i].all():  # a rule that (almost) never moved the policy: a grey cross
                ax.plot(n[~trained[i]], mean[~trained[i]], "x", color=cmap(i % 20), ms=7, mew=1.5)
    for ax, title in zip(axes, ("(a) final Mret (retained rare correct mass)", "(b) final Qpos")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("group size N")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7, loc="best")
    fig.suptitle(f"methods study: {study.seeds} seeds, {study.steps} steps (paper scenario); "
                 "x: the rule moved the policy on < 1 % of its steps (not a result)")
    return save_figure(fig, path, dpi=120, bbox_inches="tight")


def plot_frontier(study, path) -> Path:
    """Mret vs Qpos per N (one panel each), frontier methods ringed."""
    import matplotlib.pyplot as plt

    cols = min(len(study.group_sizes), 5)
    rows = -(-len(study.group_sizes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    cmap = plt.get_cmap("tab20")
    m, q = study.mean("mret"), study.mean("qpos")
    for j, n in enumerate(study.group_sizes):
        ax = axes.flat[j]
        front = set(study.frontier(j))
        trained = study.trained()[:, j]
        for i, name in enumerate(study.methods):
            ax.scatter(q[i, j], m[i, j], color=cmap(i % 20), s=28, label=name if j == 0 else None,
                       edgecolors=("k" if i in front else "none") if trained[i] else None,
                       linewidths=1.2, zorder=3, marker="o" if trained[i] else "x")
        order = sorted(front, key=lambda i: q[i, j])
        ax.plot(q[order, j], m[order, j], "k-", lw=0.6, zorder=2)
        ax.set_title(f"N = {n}", fontsize=9)
        ax.set_xlabel("Qpos", fontsize=8)
        ax.set_ylabel("Mret", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(study.group_sizes):]:
        ax.axis("off")
    fig.legend(loc="lower center", ncol=5, fontsize=7, bbox_to_anchor=(0.5, -0.02 - 0.03 * rows))
    fig.suptitle("Mret vs Qpos per N (ringed: on the frontier; x: the rule hardly moved the policy)")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120, bbox_inches="tight")
