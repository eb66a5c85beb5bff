"""Figures of the methods study (`catsim.experiments.methods.MethodsStudy`): final Mret and Qpos
against N per method, and the Mret-vs-Qpos frontier per N."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure


def plot_vs_n(study, path, per_panel: int = 6) -> Path:
    """Final Mret (top row) and Qpos (bottom row) against N, seed mean with seed std bars: the
    methods after the first (the reference, GRPO in the study, drawn thick grey in every panel) split
    over columns of at most `per_panel`, each column with its own legend under it."""
    import matplotlib.pyplot as plt

    n = np.asarray(study.group_sizes)
    trained = study.trained()
    others = list(range(1, len(study.methods)))
    columns = [others[i:i + per_panel] for i in range(0, len(others), per_panel)] or [[]]
    fig, axes = plt.subplots(2, len(columns), figsize=(4.3 * len(columns), 6.4), squeeze=False,
                             sharex=True, sharey="row")
    colors, markers = plt.get_cmap("tab10").colors, "osD^vP<>"
    for col, members in enumerate(columns):
        for row, metric in enumerate(("mret", "qpos")):
            ax = axes[row][col]
            for rank, i in enumerate([0, *members]):
                values = getattr(study, metric)[i]
                mean, std = np.nanmean(values, -1), np.nanstd(values, -1)
                color, marker = ("0.4", "s") if rank == 0 else (colors[rank - 1], markers[(rank - 1) % len(markers)])
                ax.errorbar(n, np.where(trained[i], mean, np.nan), yerr=std, color=color, marker=marker, ms=4,
                            lw=2.6 if rank == 0 else 1.3, capsize=2, label=study.methods[i])
                if not trained[i].all():  # a rule that (almost) never moved the policy: a cross
                    ax.plot(n[~trained[i]], mean[~trained[i]], "x", color=color, ms=8, mew=1.8, label="_untrained")
            ax.set_xscale("log", base=2)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.set_ylabel("final Mret (rare correct mass kept)" if metric == "mret" else "final Qpos")
            if row == 1:
                ax.set_xlabel("group size N")
        axes[1][col].legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.suptitle(f"methods study: {study.seeds} seeds, {study.steps} steps (paper scenario), seed mean ± std; "
                 f"{study.methods[0]} (thick grey) in every panel;\nx: the rule moved the policy on < 1 % of its "
                 "steps (not a result)", fontsize=10)
    fig.tight_layout()
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
        for i in range(len(study.methods)):
            ax.scatter(q[i, j], m[i, j], color=cmap(i % 20), s=28,
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
    fig.suptitle("Mret vs Qpos per N (ringed: on the frontier; x: the rule hardly moved the policy)")
    fig.tight_layout()
    # one plain marker per method (not the first panel's ring), under the panels, clear of their labels
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], ls="", marker="o", ms=5, color=cmap(i % 20)) for i in range(len(study.methods))]
    fig.legend(handles, study.methods, loc="upper center", ncol=5, fontsize=7, bbox_to_anchor=(0.5, 0.0),
               frameon=False)
    return save_figure(fig, path, dpi=120, bbox_inches="tight")
