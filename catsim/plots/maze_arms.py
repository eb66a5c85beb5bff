"""Figures of the Maze study's arms (`catsim.experiments.maze.arms`): each takes arms.json's dict and
the study's results.json dict, and writes one PNG atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.maze_study import _plt, seeds_text, warm_up_on_curve_mazes
from catsim.plots.save import save_figure


def plot_frontier(arms: dict, results: dict, path: str | Path, m: int, *, rules: bool = False) -> Path:
    """pass@1 against pass@m, one point per arm (seed mean, seed sample std as error bars), the
    warm-up marked: which fix keeps pass@k at what pass@1 cost. `rules`: the rule zoo's arms (with
    GRPO and F-GRPO γ = 0.5) instead of the other arms."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9.0, 5.4))
    bases = list(results["bases"].values())
    ax.plot(np.mean([b["pass_at_k"][str(m)] for b in bases]), np.mean([b["pass_at_k"]["1"] for b in bases]),
            "k*", ms=12, label="warm-up")
    steps = {a["name"]: a["steps"] for a in arms["arms"]}
    zoo = {a["name"] for a in arms["arms"] if a.get("rule")}
    shown = [s for s in arms["summary"] if not steps.get(s["arm"])  # another horizon: its own figure
             and ((s["arm"] in zoo or s["arm"] in ("grpo", "f-grpo-g0.5")) if rules else s["arm"] not in zoo)]
    tab20 = plt.get_cmap("tab20").colors  # the ten strong hues, then their light shades: 20 colours
    colors, markers = tab20[0::2] + tab20[1::2], "osD^vPX<>hpd8"
    for i, s in enumerate(shown):
        x, y = s["pass_at_k"][str(m)], s["pass_at_k"]["1"]
        if s["arm"] == "grpo":  # the reference: what lies right of / above it keeps more than GRPO
            ax.axvline(x, color="0.6", lw=0.8, ls="--")
            ax.axhline(y, color="0.6", lw=0.8, ls="--")
        ax.errorbar(x, y, xerr=s["pass_at_k_std"][str(m)], yerr=s["pass_at_k_std"]["1"], fmt=markers[i % len(markers)],
                    color=colors[i % len(colors)], ms=6, capsize=3, label=f"{s['arm']} ({len(s['seeds'])})")
    ax.set_xlabel(f"pass@{m} (held-out mazes)")
    ax.set_ylabel("pass@1")
    ax.set_title(f"{'Rules' if rules else 'Arms'}: seed mean ± seed std (seeds in brackets); dashed: GRPO")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def plot_horizon(arms: dict, results: dict, path: str | Path, ks=(1, 64)) -> Path:
    """pass@k against RL step of the arms that run past the study's horizon (checkpoint evaluations,
    seed means with the seeds' range as a band; step 0 = the warm-up on the same mazes); GRPO's
    arms in one colour, F-GRPO's in another, each horizon a line style."""
    plt = _plt()
    long = [a for a in arms["arms"] if a["steps"]]
    styles = dict(zip(sorted({a["steps"] for a in long}, reverse=True), ("-", "--", ":", "-.")))
    fig, axes = plt.subplots(1, len(ks), figsize=(5.6 * len(ks), 3.9), squeeze=False)
    for ax, k in zip(axes[0], ks):
        for a in long:
            runs = [r for r in arms["runs"] if r["arm"] == a["name"]]
            curves = [[warm_up_on_curve_mazes(results, r["seed"], k)] + [c["pass_at_k"].get(str(k)) for c in r["curve"]]
                      for r in runs]
            if not runs or any(v is None for c in curves for v in c) or len({len(c) for c in curves}) > 1:
                continue
            steps = [0] + [c["step"] for c in runs[0]["curve"]]
            color = "C1" if a["options"].get("gamma") else "C0"
            ax.plot(steps, np.mean(curves, axis=0), ls=styles.get(a["steps"], "-"), marker="o", ms=2.5, color=color,
                    label=f"{a['name']} ({seeds_text(len(runs))})")
            if len(runs) > 1:
                ax.fill_between(steps, np.min(curves, axis=0), np.max(curves, axis=0), color=color, alpha=0.12, lw=0)
        ax.set_title(f"pass@{k} against RL step (band: the seeds' range)", fontsize=9)
        ax.set_xlabel("RL step (step 0: the warm-up)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def plot_screen(rows: list[dict], result: dict, path: str | Path, m: int) -> Path:
    """The simulator as a screen: per rule, the simulator's change against GRPO at N = 8 (x) against
    the Maze's change against GRPO (y, points; filled: significant), Mret → pass@m on the left and
    Qpos → pass@1 on the right, with Spearman's ρ and its permutation p in each title."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.4))
    panels = ((axes[0], "d_mret", "d_pass_m", "sig_m", "pass_m", f"Δ pass@{m}", "Δ Mret (rare correct mass kept)"),
              (axes[1], "d_qpos", "d_pass_1", "sig_1", "pass_1", "Δ pass@1", "Δ Qpos (correct mass)"))
    for ax, x, y, sig, key, ylabel, xlabel in panels:
        for r in rows:
            ax.scatter(r[x], 100 * r[y], s=36, color="C0", edgecolors="C0",
                       facecolors="C0" if r[sig] else "none", zorder=3)
            ax.annotate(r["arm"], (r[x], 100 * r[y]), fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.axhline(0, color="0.6", lw=0.8, ls="--")
        ax.axvline(0, color="0.6", lw=0.8, ls="--")
        c = result[key]
        rho = "ρ undefined" if c["rho"] is None else f"ρ = {c['rho']:+.2f}, p = {c['p_value']:.3f}"
        ax.set_title(f"{ylabel}: {rho} ({c['n']} rules) — {c['verdict']}", fontsize=9)
        ax.set_xlabel(f"simulator, N = 8: {xlabel} − GRPO's", fontsize=8)
        ax.set_ylabel(f"Maze: {ylabel} − GRPO's (points)", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("Does the simulator's ranking of the rules predict the Maze's? (filled: significant on the Maze)",
                 fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
