"""Figures of the Maze study report; each takes the study's `results` dict (results.json of
`catsim.experiments.maze_study`) and writes one PNG atomically."""

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


def _finish(fig, axes, ylabel: str, path: str | Path) -> Path:
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


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
            (line,) = ax.plot(ks, vals.mean(axis=0), marker="o", ms=3, label=f"{_name(s)} ({len(runs)} seeds)")
            if len(runs) > 1:
                ax.fill_between(ks, vals.min(axis=0), vals.max(axis=0), color=line.get_color(), alpha=0.2)
        _k_axis(ax, f"N = {n}")
    return _finish(fig, axes, "pass@k (held-out mazes)", path)


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
    fig, axes = plt.subplots(len(ks), len(sizes), figsize=(4.2 * len(sizes), 3.0 * len(ks)), squeeze=False)
    for row, k in enumerate(ks):
        for ax, n in zip(axes[row], sizes):
            for s in (s for s in results["summary"] if s["group_size"] == n):
                runs = runs_of(results, s)
                curves = []
                for r in runs:
                    curves.append([warm_up_on_curve_mazes(results, r["seed"], k)]
                                  + [c["pass_at_k"].get(str(k)) for c in r["curve"]])
                if any(v is None for c in curves for v in c):
                    continue
                steps = [0] + [c["step"] for c in runs[0]["curve"]]
                ax.plot(steps, np.mean(curves, axis=0), marker="o", ms=3, label=_name(s))
            ax.set_title(f"N = {n}: pass@{k}")
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def plot_solution_mass(results: dict, path: str | Path) -> Path:
    """Per-maze π(solution) after RL against before (the warm-up), one panel per method at each N
    (seed 0 and every maze: points under the diagonal lost solution mass)."""
    plt = _plt()
    runs = [r for r in results["runs"] if r["seed"] == min(x["seed"] for x in results["runs"])]
    fig, axes = plt.subplots(1, len(runs), figsize=(2.8 * len(runs), 3.0), squeeze=False, sharey=True)
    for ax, r in zip(axes[0], runs):
        before = np.asarray(results["bases"][str(r["seed"])]["solution_prob"])
        after = np.asarray(r["final"]["solution_prob"])
        ax.scatter(before, after, s=5, alpha=0.6)
        ax.plot([0, 1], [0, 1], "k:", lw=0.8)
        lost = float(np.mean(after < before))
        ax.set_title(f"{_name(r)} N={r['group_size']}\nlost on {lost:.0%}", fontsize=8)
        ax.set_xlabel("π(solution) warm-up", fontsize=8)
    axes[0][0].set_ylabel("π(solution) after RL", fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def plot_pvalues(results: dict, path: str | Path) -> Path:
    """F-GRPO − GRPO: mean subsampled Δpass@k with its 95 % interval and p-value against k, per N and γ."""
    plt = _plt()
    sizes = _sizes(results)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.4), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], sizes):
        for gamma in sorted({t["gamma"] for t in results["tests"] if t["group_size"] == n}):
            ts = [t for t in results["tests"] if t["group_size"] == n and t["gamma"] == gamma]
            ks = [t["k"] for t in ts]
            d = np.asarray([t["delta_mean"] for t in ts])
            lo = d - np.asarray([t["interval"][0] for t in ts])
            hi = np.asarray([t["interval"][1] for t in ts]) - d
            ax.errorbar(ks, d, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], marker="o", ms=3, capsize=2,
                        label=f"γ={gamma:g}")
            for k, dv, t in zip(ks, d, ts):
                ax.annotate(f"p={t['p_value']:.2g}", (k, dv), fontsize=6, textcoords="offset points", xytext=(2, 4))
        ax.axhline(0, color="k", lw=0.8)
        _k_axis(ax, f"N = {n}: F-GRPO − GRPO")
    return _finish(fig, axes, "Δ pass@k (interval: subsampling)", path)
