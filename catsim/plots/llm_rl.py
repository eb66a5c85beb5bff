"""Figures of the LLM pipeline report: pass@k curves, training dynamics, Lemma 3.1 overlay.

Each function takes the pipeline's `results` dict (results.json) and writes one PNG.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from catsim.llm.metrics import active_fraction_prediction


def _plt():
    import matplotlib.pyplot as plt

    return plt


def _at(table: dict, k: int):
    return table[k] if k in table else table[str(k)]


def _by_label(task_res: dict) -> dict:
    groups: dict = {}
    for entry in task_res["runs"].values():
        groups.setdefault(entry["label"], []).append(entry)
    return groups


def passk_panel(ax, task_res: dict, colors: dict | None = None) -> None:
    """One task's pass@k vs k on `ax` (log2 axis): the base model dashed, each run label's mean
    over seeds with its seed range as a band; `colors` maps labels to colours (default: the cycle)."""
    ks = task_res["base"]["ks"]
    ax.plot(ks, [_at(task_res["base"]["pass_at_k"], k) for k in ks], "k--", label="base")
    for label, entries in _by_label(task_res).items():
        curves = np.asarray([[_at(e["eval"]["pass_at_k"], k) for k in ks] for e in entries])
        style = {} if colors is None else {"color": colors[label]}
        line, = ax.plot(ks, curves.mean(axis=0), marker="o", ms=3, label=label, **style)
        if len(entries) > 1:
            ax.fill_between(ks, curves.min(axis=0), curves.max(axis=0), color=line.get_color(), alpha=0.15)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")


def plot_passk_curves(results: dict, path: str | Path) -> Path:
    """pass@k vs k (log2 axis), one panel per task; lines = mean over seeds, band = seed range."""
    plt = _plt()
    tasks = list(results["tasks"].items())
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, (tname, tr) in zip(axes[0], tasks):
        passk_panel(ax, tr)
        ax.set_ylabel("pass@k (held-out)")
        ax.set_title(tname)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_training_dynamics(results: dict, path: str | Path) -> Path:
    """Per task: reward, entropy, active fraction and mean focal weight vs RL step (seed means)."""
    from catsim.llm.pipeline import training_logs

    plt = _plt()
    logs = training_logs(results)
    keys = [("reward", "train reward"), ("entropy", "entropy (nats)"), ("active_fraction", "active groups"),
            ("mean_g", "mean focal weight g")]
    tasks = list(logs.items())
    fig, axes = plt.subplots(len(tasks), len(keys), figsize=(4 * len(keys), 3 * len(tasks)), squeeze=False)
    for row, (tname, by_label) in zip(axes, tasks):
        for ax, (key, title) in zip(row, keys):
            for label, runs in by_label.items():
                length = min(len(r) for r in runs)
                vals = np.asarray([[np.nan if rec.get(key) is None else rec[key] for rec in r[:length]]
                                   for r in runs], np.float64)
                steps = np.arange(1, length + 1)
                with warnings.catch_warnings():  # all-null columns (e.g. mean_g with no active group)
                    warnings.simplefilter("ignore", RuntimeWarning)
                    ax.plot(steps, np.nanmean(vals, axis=0), label=label)
            ax.set_title(f"{tname}: {title}", fontsize=9)
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def plot_theory_overlay(results: dict, path: str | Path) -> Path:
    """Lemma 3.1: measured share of active groups per step against 1 − μ^N − (1 − μ)^N at the
    step's mean success rate μ̄ (curves for each N, points = steps of every run)."""
    from catsim.llm.pipeline import training_logs

    plt = _plt()
    logs = training_logs(results)
    fig, ax = plt.subplots(figsize=(6, 4.5))
    mu = np.linspace(0, 1, 201)
    sizes = sorted({e["group_size"] for tr in results["tasks"].values() for e in tr["runs"].values()})
    colors = {n: c for n, c in zip(sizes, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4)}
    for n in sizes:
        ax.plot(mu, active_fraction_prediction(mu, n), color=colors[n], label=f"Lemma 3.1, N={n}")
    markers = "osD^v<>"
    for ti, (tname, by_label) in enumerate(logs.items()):
        for li, (label, runs) in enumerate(by_label.items()):
            n = next(e["group_size"] for e in results["tasks"][tname]["runs"].values() if e["label"] == label)
            x = [rec["success_rate"] for r in runs for rec in r]
            y = [rec["active_fraction"] for r in runs for rec in r]
            ax.scatter(x, y, s=8, alpha=0.5, color=colors[n], marker=markers[(ti + li) % len(markers)],
                       label=f"{tname}: {label}")
    ax.set_xlabel("batch success rate μ̄")
    ax.set_ylabel("share of active groups")
    ax.set_title("Active groups vs Lemma 3.1 (points: RL steps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
