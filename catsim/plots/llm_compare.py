"""The method-comparison figure of the LLM pipeline (GRPO vs F-GRPO vs asym-GRPO).

One row per task: training reward vs RL step (with the steps-to-target line), held-out accuracy
at τ = 1 vs step (when measured), pass@1 by difficulty level (when the task has levels), and
pass@k vs k; a panel without data is left out and named in a footnote. Lines are means over seeds, bands / error bars the seed range. Input: the
pipeline's results dict (results.json); training curves from each run entry's `curves`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.llm_rl import _at, _by_label, _steps, curves_by_label, passk_panel
from catsim.plots.save import save_figure


def _reward_panel(ax, tname, runs_by_label, colors, target) -> None:
    for label, runs in runs_by_label.items():
        vals = _steps(runs, "reward")
        steps = np.arange(1, vals.shape[1] + 1)
        ax.plot(steps, vals.mean(axis=0), color=colors[label], label=label)
        if len(runs) > 1:
            ax.fill_between(steps, vals.min(axis=0), vals.max(axis=0), color=colors[label], alpha=0.15)
    if target is not None:
        ax.axhline(target, color="k", ls=":", lw=1, label=f"target {target:g}")
    ax.set_title(f"{tname}: training reward (rollout τ)", fontsize=9)
    ax.set_xlabel("RL step")
    ax.legend(fontsize=7)


def _heldout_panel(ax, tname, groups, colors) -> None:
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


def _levels_panel(ax, tname, tr, groups, colors) -> None:
    levels = list(tr["base_levels"])
    width = 0.8 / (len(groups) + 1)
    x = np.arange(len(levels))
    ax.bar(x, [_at(_at(tr["base_levels"], lv)["pass_at_k"], 1) for lv in levels], width, color="0.6", label="base")
    for i, (label, entries) in enumerate(groups.items(), start=1):
        vals = np.asarray([[_at(_at(e["levels"], lv)["pass_at_k"], 1) for lv in levels] for e in entries])
        mean = vals.mean(axis=0)
        err = np.vstack([mean - vals.min(axis=0), vals.max(axis=0) - mean])
        ax.bar(x + i * width, mean, width, yerr=err, capsize=2, color=colors[label], label=label)
    ax.set_xticks(x + 0.4 - width / 2, [f"level {lv}" for lv in levels])
    ax.set_title(f"{tname}: pass@1 by difficulty level", fontsize=9)
    ax.legend(fontsize=7)


def _passk(ax, tname, tr, colors) -> None:
    passk_panel(ax, tr, colors)
    ax.set_title(f"{tname}: pass@k (held-out)", fontsize=9)


def plot_comparison(results: dict, path: str | Path) -> Path:
    """Write the comparison figure for the pipeline's `results` dict (results.json) to `path`: a row
    per task holding only the panels it has data for (a footnote names what was not measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    logs = curves_by_label(results)
    target = results["config"].get("target_reward")
    rows, missing = [], []
    for tname, tr in results["tasks"].items():
        groups = _by_label(tr)
        colors = dict(zip(groups, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4))
        panels = []
        if tname in logs:
            panels.append(lambda ax, t=tname, c=colors: _reward_panel(ax, t, logs[t], c, target))
        else:
            missing.append(f"{tname}: training curves (not in results.json)")
        if any(e.get("heldout_curve") for entries in groups.values() for e in entries):
            panels.append(lambda ax, t=tname, g=groups, c=colors: _heldout_panel(ax, t, g, c))
        else:
            missing.append(f"{tname}: held-out accuracy against step (RL option --heldout-every K)")
        if "base_levels" in tr:
            panels.append(lambda ax, t=tname, r=tr, g=groups, c=colors: _levels_panel(ax, t, r, g, c))
        panels.append(lambda ax, t=tname, r=tr, c=colors: _passk(ax, t, r, c))
        rows.append(panels)
    cols = max(len(panels) for panels in rows)
    fig, axes = plt.subplots(len(rows), cols, figsize=(4.5 * cols, 3.8 * len(rows) + 0.3 * bool(missing)),
                             squeeze=False)
    for row, panels in zip(axes, rows):
        for ax, draw in zip(row, panels):
            draw(ax)
            ax.grid(alpha=0.3)
        for ax in row[len(panels):]:
            ax.remove()
    if missing:
        fig.text(0.5, 0.005, "Not measured: " + "; ".join(missing) + ".", ha="center", va="bottom", fontsize=8,
                 color="0.3")
    fig.tight_layout(rect=(0, 0.3 / fig.get_size_inches()[1] if missing else 0, 1, 1))
    return save_figure(fig, path, dpi=110)
