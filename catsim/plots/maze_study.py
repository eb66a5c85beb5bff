"""Figures of the Maze study report; each takes the study's `results` dict (results.json of
`catsim.experiments.maze.study`) and writes one PNG atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _k_axis(ax, title: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_title(title)
    ax.set_xlabel("k")
    ax.grid(alpha=0.3)


def seeds_text(count: int) -> str:
    """"1 seed", "3 seeds"."""
    return f"{count} seed{'' if count == 1 else 's'}"


def _name(entry: dict) -> str:
    return "GRPO" if entry["method"] == "grpo" else f"F-GRPO γ={entry['gamma']:g}"


def runs_of(results: dict, entry: dict) -> list[dict]:
    """The runs (one per seed) of a summary entry's (method, N, γ)."""
    key = (entry["method"], entry["group_size"], entry["gamma"])
    return [r for r in results["runs"] if (r["method"], r["group_size"], r["gamma"]) == key]


def _sizes(results: dict) -> list[int]:
    return sorted({r["group_size"] for r in results["runs"]})


def plot_passk(results: dict, path: str | Path) -> Path:
    """pass@k against k per N: warm-up (seed mean), each method's seed mean with its seed range."""
    plt = _plt()
    sizes = _sizes(results)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.6), squeeze=False, sharey=True)
    base_ks = sorted(int(k) for k in next(iter(results["bases"].values()))["pass_at_k"])
    base = np.mean([[b["pass_at_k"][str(k)] for k in base_ks] for b in results["bases"].values()], axis=0)
    for ax, n in zip(axes[0], sizes):
        ax.plot(base_ks, base, "k--", label="warm-up")
        for s in (s for s in results["summary"] if s["group_size"] == n):
            ks = sorted(int(k) for k in s["pass_at_k"])
            runs = runs_of(results, s)
            vals = np.asarray([[r["final"]["pass_at_k"][str(k)] for k in ks] for r in runs])
            (line,) = ax.plot(ks, vals.mean(axis=0), marker="o", ms=3, label=f"{_name(s)} ({seeds_text(len(runs))})")
            if len(runs) > 1:
                ax.fill_between(ks, vals.min(axis=0), vals.max(axis=0), color=line.get_color(), alpha=0.2)
        _k_axis(ax, f"N = {n}")
        ax.legend(fontsize=7, loc="lower right")  # each panel's own seed counts (they differ per N)
    axes[0][0].set_ylabel("pass@k (held-out mazes)")
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def warm_up_on_curve_mazes(results: dict, seed: int, k: int) -> float | None:
    """The warm-up's pass@k on the checkpoint evaluations' mazes (the first `curve_prompts`), from its
    n-sample counts: an unbiased estimate of the quantity each checkpoint point estimates."""
    from catsim.llm.metrics import pass_at_k

    base = results["bases"][str(seed)]
    if k > base["n"] or k > results["preset"]["curve_n"]:
        return None
    counts = np.asarray(base["num_correct"][:results["preset"]["curve_prompts"]])
    return float(pass_at_k(base["n"], counts, k).mean())


def plot_passk_vs_step(results: dict, path: str | Path, ks=(1, 64)) -> Path:
    """pass@k against RL step (checkpoint evaluations; step 0 = the warm-up on the same mazes), per N,
    seed means."""
    plt = _plt()
    sizes = _sizes(results)
    p = results["preset"]
    subset = f"first {p['curve_prompts']} held-out mazes × {p['curve_n']} samples"
    fig, axes = plt.subplots(len(ks), len(sizes), figsize=(3.6 * len(sizes), 2.7 * len(ks) + 0.5), squeeze=False)
    for row, k in enumerate(ks):
        for ax, n in zip(axes[row], sizes):
            starts = set()
            for s in (s for s in results["summary"] if s["group_size"] == n):
                runs = runs_of(results, s)
                curves = []
                for r in runs:
                    curves.append([warm_up_on_curve_mazes(results, r["seed"], k)]
                                  + [c["pass_at_k"].get(str(k)) for c in r["curve"]])
                if any(v is None for c in curves for v in c):
                    continue
                steps = [0] + [c["step"] for c in runs[0]["curve"]]
                mean = np.mean(curves, axis=0)
                ax.plot(steps, mean, marker="o", ms=3, label=_name(s))
                starts.add(float(mean[0]))
            for i, v in enumerate(sorted(starts)):  # the series' step 0: their warm-ups, one per seed set
                ax.plot([0], [v], "k*", ms=8, zorder=3, label="warm-up (step 0)" if i == 0 else None)
            ax.set_title(f"N = {n}: pass@{k}", fontsize=10)
            ax.set_xlabel("RL step", fontsize=8)
            ax.set_ylabel(f"pass@{k}", fontsize=8)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.text(0.5, 0.005, f"Checkpoint evaluations, seed means, on the {subset} (not the final "
             f"{p['eval_prompts']}-maze evaluation); step 0 = the warm-up evaluated on the same subset.",
             ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return save_figure(fig, path, dpi=110)


def plot_solution_mass(results: dict, path: str | Path) -> Path:
    """Per-maze π(solution) after RL against before (the warm-up), one panel per method at each N
    (a row per N when the study has at most three methods; seed 0 and every maze: points under the
    diagonal lost solution mass)."""
    plt = _plt()
    first = min(x["seed"] for x in results["runs"])
    runs = sorted((r for r in results["runs"] if r["seed"] == first),
                  key=lambda r: (r["group_size"], r["method"] != "grpo", r["gamma"]))
    cols = min(3, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 2.7 * rows + 0.4), squeeze=False,
                             sharex=True, sharey=True)
    for ax, r in zip(axes.flat, runs):
        before = np.asarray(results["bases"][str(r["seed"])]["solution_prob"])
        after = np.asarray(r["final"]["solution_prob"])
        ax.scatter(before, after, s=4, alpha=0.5)
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        lost = float(np.mean(after < before))
        ax.set_title(f"N = {r['group_size']}: {_name(r)}\nlost on {lost:.0%} of mazes", fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(runs):]:
        ax.remove()
    for ax in axes[:, 0]:
        ax.set_ylabel("π(solution) after RL", fontsize=8)
    for j in range(cols):
        column = [axes[i, j] for i in range(rows) if i * cols + j < len(runs)]
        column[-1].set_xlabel("π(solution) warm-up", fontsize=8)
        column[-1].xaxis.set_tick_params(labelbottom=True)
    fig.suptitle(f"π(solution) per held-out maze, seed {first}: under the diagonal = lost mass", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def plot_pvalues(results: dict, path: str | Path) -> Path:
    """F-GRPO − GRPO against k, per N (a column each) and γ: (top) mean subsampled Δpass@k with its
    95 % interval, (bottom) the test's p-value on a log axis. A p of 0 (no subsampled Δ on the other
    side of 0) is drawn at the test's resolution 1/iterations as an open triangle: p < 1/iterations."""
    plt = _plt()
    sizes = _sizes(results)
    fig, axes = plt.subplots(2, len(sizes), figsize=(3.8 * len(sizes), 5.8), squeeze=False, sharex=True,
                             sharey="row", height_ratios=(3, 2))
    iterations = {t["iterations"] for t in results["tests"]}
    floor = 1 / max(iterations)
    alphas = sorted({t["alpha"] for t in results["tests"]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    gammas = sorted({t["gamma"] for t in results["tests"]})
    for col, n in enumerate(sizes):
        top, bottom = axes[0][col], axes[1][col]
        for gamma in (g for g in gammas if any(t["group_size"] == n and t["gamma"] == g for t in results["tests"])):
            color = colors[gammas.index(gamma) % len(colors)]
            ts = sorted((t for t in results["tests"] if t["group_size"] == n and t["gamma"] == gamma),
                        key=lambda t: t["k"])
            ks = np.asarray([t["k"] for t in ts])
            d = np.asarray([t["delta_mean"] for t in ts])
            lo = d - np.asarray([t["interval"][0] for t in ts])
            hi = np.asarray([t["interval"][1] for t in ts]) - d
            top.errorbar(ks, d, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], marker="o", ms=3, capsize=2,
                         color=color, label=f"γ={gamma:g}")
            p = np.asarray([t["p_value"] for t in ts])
            zero = p == 0
            x = ks * 2 ** (0.12 * (gammas.index(gamma) - (len(gammas) - 1) / 2))  # γ side by side
            bottom.plot(x, np.where(zero, floor, p), "-", color=color, lw=1)
            bottom.plot(x[~zero], p[~zero], "o", ms=4, color=color)
            bottom.plot(x[zero], np.full(zero.sum(), floor), "v", ms=6, mfc="none", color=color)
        top.axhline(0, color="k", lw=0.8)
        _k_axis(top, f"N = {n}: F-GRPO − GRPO")
        top.set_xlabel("")
        _k_axis(bottom, "")
        bottom.set_yscale("log")
        bottom.axhline(floor, color="0.5", lw=0.8, ls=":")
        for alpha in alphas:
            bottom.axhline(alpha, color="0.3", lw=0.8, ls="--")
    axes[0][-1].legend(fontsize=7)
    axes[0][0].set_ylabel("Δ pass@k (95 % interval:\nsubsampling)", fontsize=9)
    axes[1][0].set_ylabel("p-value", fontsize=9)
    axes[1][0].set_ylim(floor / 3, 1.5)
    fig.text(0.5, 0.005, f"Open triangles: p < {floor:.0e} (no subsampled Δ on the other side of 0 in "
             f"{max(iterations):,} iterations: the test's resolution, dotted); dashed: α = "
             f"{', '.join(f'{a:g}' for a in alphas)}.", ha="center", va="bottom", fontsize=8)
    fig.tight_layout(rect=(0, 0.035, 1, 1))
    return save_figure(fig, path, dpi=110)
