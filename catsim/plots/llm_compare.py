"""The method-comparison figure of the LLM pipeline (GRPO vs F-GRPO vs asym-GRPO).

One row per task: training reward vs RL step (with the steps-to-target line), held-out accuracy
at τ = 1 vs step (when measured), pass@1 by difficulty level (when the task has levels), and
pass@k vs k. Lines are means over seeds, bands / error bars the seed range. Input: the
pipeline's results dict (results.json); training curves from each run entry's `curves`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.llm_rl import _at, _by_label, _steps, curves_by_label, missing_curves, passk_panel
from catsim.plots.save import save_figure


def _not_measured(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_comparison(results: dict, path: str | Path) -> Path:
    """Write the comparison figure for the pipeline's `results` dict (results.json) to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = curves_by_label(results)
    tasks = list(results["tasks"].items())
    fig, axes = plt.subplots(len(tasks), 4, figsize=(18, 3.8 * len(tasks)), squeeze=False)
    target = results["config"].get("target_reward")
    for row, (tname, tr) in zip(axes, tasks):
        groups = _by_label(tr)
        colors = dict(zip(groups, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
        ax = row[0]
        if tname not in logs:
            missing_curves(ax)
        for label, runs in logs.get(tname, {}).items():
            vals = _steps(runs, "reward")
            steps = np.arange(1, vals.shape[1] + 1)
            ax.plot(steps, vals.mean(axis=0), color=colors[label], label=label)
            if len(runs) > 1:
                ax.fill_between(steps, vals.min(axis=0), vals.max(axis=0), color=colors[label], alpha=0.15)
        if target is not None:
            ax.axhline(target, color="k", ls=":", lw=1, label=f"target {target:g}")
        ax.set_title(f"{tname}: training reward (rollout τ)", fontsize=9)
        ax.set_xlabel("RL step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        ax = row[1]
        if not any(e.get("heldout_curve") for entries in groups.values() for e in entries):
            _not_measured(ax, "held-out accuracy not measured\n(RL option --heldout-every K)")
        for label, entries in groups.items():
            curves = [e.get("heldout_curve") for e in entries if e.get("heldout_curve")]
            if not curves:
                continue
            length = min(len(c) for c in curves)
            steps = [s for s, _ in curves[0][:length]]
            vals = np.asarray([[a for _, a in c[:length]] for c in curves], np.float64)
            ax.plot(steps, vals.mean(axis=0), marker="o", ms=3, color=colors[label], label=label)
            if len(curves) > 1:
                ax.fill_between(steps, vals.min(axis=0), vals.max(axis=0), color=colors[label], alpha=0.15)
        ax.set_title(f"{tname}: held-out accuracy (τ = 1)", fontsize=9)
        ax.set_xlabel("RL step")
        ax = row[2]
        if "base_levels" in tr:
            levels = list(tr["base_levels"])
            width = 0.8 / (len(groups) + 1)
            x = np.arange(len(levels))
            ax.bar(x, [_at(_at(tr["base_levels"], lv)["pass_at_k"], 1) for lv in levels], width, color="0.6",
                   label="base")
            for i, (label, entries) in enumerate(groups.items(), start=1):
                vals = np.asarray([[_at(_at(e["levels"], lv)["pass_at_k"], 1) for lv in levels] for e in entries])
                mean = vals.mean(axis=0)
                err = np.vstack([mean - vals.min(axis=0), vals.max(axis=0) - mean])
                ax.bar(x + i * width, mean, width, yerr=err, capsize=2, color=colors[label], label=label)
            ax.set_xticks(x + 0.4 - width / 2, [f"level {lv}" for lv in levels])
            ax.legend(fontsize=7)
        else:
            _not_measured(ax, "this task has no difficulty levels\n(maze: --sizes 5,7,9)")
        ax.set_title(f"{tname}: pass@1 by difficulty level", fontsize=9)
        ax = row[3]
        passk_panel(ax, tr, colors)
        ax.set_title(f"{tname}: pass@k (held-out)", fontsize=9)
        for a in row:
            a.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
