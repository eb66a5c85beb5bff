"""Figure 2 of the paper from simulator results: (a) Qpos vs step, (b) Mret vs step for selected N
(solid γ = 0, dashed γ = 1), (c) final Qpos and Mret vs N with the regimes found from the data
and the Lemma 3.1 tail-miss probability of one non-anchor correct action overlaid."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure
from catsim.sim.analysis import regimes_of
from catsim.sim.results import SimResults

CURVE_GROUP_SIZES = (2, 256, 8192, 131072)  # the N shown in panels (a) and (b), as in the paper


def _lemma_curve(results: SimResults, method: str, sizes):
    """Pr(B) of Lemma 3.1 for one non-anchor correct action of the initial policy vs N."""
    from catsim.sim import config as sim_config
    from catsim.sim import policy as sim_policy
    from catsim.theory import tail_miss_probability

    desc = results.attrs.get(method, {}).get("policy")
    pol = sim_config.PolicyConfig(**desc) if desc else sim_config.PolicyConfig()
    p0 = sim_policy.initial_probs(pol)
    correct = sim_policy.correct_mask(pol)
    if pol.num_correct < 2:
        return None
    tau, mu = float(p0[1]), float(p0[correct].sum())
    return np.asarray(tail_miss_probability(np.asarray(sizes, dtype=float), tau, mu)), tau, mu


def trajectory_sizes(group_sizes, curve_sizes=CURVE_GROUP_SIZES, most: int = 4) -> list[int]:
    """The N whose trajectories panels (a) and (b) draw: `curve_sizes` when the grid holds them all
    (the paper's grid), else the grid's own N — all of them up to `most`, else `most` spread evenly
    over the sorted grid, its smallest and largest included."""
    grid = sorted(int(n) for n in group_sizes)
    if all(n in grid for n in curve_sizes):
        return list(curve_sizes)
    if len(grid) <= most:
        return grid
    return [grid[i] for i in sorted({round(j * (len(grid) - 1) / (most - 1)) for j in range(most)})]


def plot_fig2(results: SimResults, path, *, method: str | None = None,
              curve_sizes=CURVE_GROUP_SIZES) -> Path:
    """Draw Fig. 2 for `method` (default: the first) and save it to `path` (.png, .pdf, …)."""
    import matplotlib.pyplot as plt

    method = method or results.methods[0]
    gammas = sorted(results.gammas)[:2]
    styles = {g: ls for g, ls in zip(gammas, ("-", "--"))}
    sizes = trajectory_sizes(results.group_sizes, curve_sizes)
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(sizes)))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6), constrained_layout=True)
    steps = results.steps

    for ax, metric, title in ((axes[0], "qpos", "(a) $Q_{pos}$"), (axes[1], "mret", "(b) $M_{ret}$")):
        for n, colour in zip(sizes, colours):
            for g in gammas:
                runs = results.sel(metric, method=method, gamma=g, n=n)  # [seed, step]
                mean = np.nanmean(runs, axis=0)
                ax.plot(steps, mean, styles[g], color=colour, lw=1.6,
                        label=f"N={n}" if g == gammas[0] else None)
                if runs.shape[0] > 1:
                    ax.fill_between(steps, runs.min(0), runs.max(0), color=colour, alpha=0.12, lw=0)
        ax.set_xlabel("step")
        ax.set_ylabel(metric.capitalize() if metric == "mret" else "Qpos")
        ax.set_title(title)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    for g in gammas:
        handles.append(plt.Line2D([], [], color="k", ls=styles[g]))
        labels.append(f"γ={g:g}")
    axes[0].legend(handles, labels, fontsize=8, loc="lower right")

    ax = axes[2]
    ns = np.asarray(results.group_sizes)
    regimes = regimes_of(results, method)
    shades = {"I": "#4c72b0", "II": "#dd8452", "III": "#55a868"}
    for name, members in ((k, regimes[k]) for k in ("I", "II", "III")):
        if members:
            lo, hi = min(members), max(members)
            ax.axvspan(lo / 2**0.5, hi * 2**0.5, color=shades[name], alpha=0.10, lw=0)
            ax.text((lo * hi) ** 0.5, 1.05, name, ha="center", va="bottom", fontsize=11,
                    fontweight="bold", color=shades[name])
    for metric, colour in (("qpos", "tab:blue"), ("mret", "tab:red")):
        for g in gammas:
            final = results.sel(metric, method=method, gamma=g)[..., -1]  # [n, seed]
            mean = np.nanmean(final, axis=1)
            err = np.vstack([mean - np.nanmin(final, 1), np.nanmax(final, 1) - mean])
            ax.errorbar(ns, mean, yerr=err, fmt="o" + styles[g], color=colour, ms=3.5, lw=1.4,
                        capsize=2, label=f"final {'Qpos' if metric == 'qpos' else 'Mret'} γ={g:g}")
    lemma = _lemma_curve(results, method, ns)
    if lemma is not None:
        prob, tau, mu = lemma
        twin = ax.twinx()
        twin.plot(ns, prob, ":", color="0.3", lw=1.5, label=f"Lemma 3.1 Pr(B), τ={tau:.2g}, μ={mu:.2f}")
        twin.set_ylabel("Pr(active & a rare correct action unsampled)", fontsize=8)
        twin.set_ylim(0, 1.15)
        twin.legend(fontsize=7, loc="lower left")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("group size N")
    ax.set_ylim(-0.02, 1.15)
    ax.set_title(f"(c) final values after {int(steps[-1])} steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center")
    fig.suptitle(f"Figure 2 reproduction — method '{method}' "
                 f"({len(results.seeds)} seed(s); solid γ={gammas[0]:g}"
                 + (f", dashed γ={gammas[1]:g})" if len(gammas) > 1 else ")"), fontsize=11)
    return save_figure(fig, path, dpi=130)
