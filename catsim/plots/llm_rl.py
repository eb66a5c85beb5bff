"""Figures of the LLM pipeline report: pass@k curves, training dynamics, Lemma 3.1 overlay.

Each function takes the pipeline's `results` dict (results.json, as written by
`catsim.experiments.llm_pipeline`) and writes one PNG; the training curves come from each run
entry's `curves` ({metric: [value per RL step]}), never from the run directories.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure
from catsim.theory import active_fraction_prediction


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


def curves_by_label(results: dict) -> dict:
    """{task: {label: [curves of each seed]}} for the runs whose entry has `curves`."""
    out: dict = {}
    for tname, tr in results["tasks"].items():
        for entry in tr["runs"].values():
            if entry.get("curves"):
                out.setdefault(tname, {}).setdefault(entry["label"], []).append(entry["curves"])
    return out


def missing_curves(ax) -> None:
    """Mark a panel whose runs have no recorded curves (results.json from before they were kept)."""
    ax.text(0.5, 0.5, "training curves not in results.json\n(run directories gone)", ha="center",
            va="center", transform=ax.transAxes, fontsize=9, color="0.4")


def _steps(curves: list, key: str) -> np.ndarray:
    """[seed, step] float array of `key` over the common length (NaN where a step has no value)."""
    length = min(len(c["reward"]) for c in curves)
    return np.asarray([[np.nan if v is None else v for v in (c.get(key) or [None] * length)[:length]]
                       for c in curves], np.float64)


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
    return save_figure(fig, path, dpi=120)


def plot_training_dynamics(results: dict, path: str | Path) -> Path:
    """Per task: reward, entropy, active fraction and mean focal weight vs RL step (seed means)."""
    plt = _plt()
    logs = curves_by_label(results)
    keys = [("reward", "train reward"), ("entropy", "entropy (nats)"), ("active_fraction", "active groups"),
            ("mean_g", "mean focal weight g")]
    tasks = [(tname, logs.get(tname, {})) for tname in results["tasks"]]
    fig, axes = plt.subplots(len(tasks), len(keys), figsize=(4 * len(keys), 3 * len(tasks)), squeeze=False)
    for row, (tname, by_label) in zip(axes, tasks):
        for ax, (key, title) in zip(row, keys):
            if not by_label:
                missing_curves(ax)
            for label, runs in by_label.items():
                vals = _steps(runs, key)
                steps = np.arange(1, vals.shape[1] + 1)
                with warnings.catch_warnings():  # all-null columns (e.g. mean_g with no active group)
                    warnings.simplefilter("ignore", RuntimeWarning)
                    ax.plot(steps, np.nanmean(vals, axis=0), label=label)
            ax.set_title(f"{tname}: {title}", fontsize=9)
            ax.set_xlabel("RL step")
            ax.grid(alpha=0.3)
        if by_label:
            row[0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def plot_theory_overlay(results: dict, path: str | Path) -> Path:
    """Lemma 3.1: measured share of active groups per step against 1 − μ^N − (1 − μ)^N at the
    step's mean success rate μ̄ (curves for each N, points = steps of every run)."""
    plt = _plt()
    logs = curves_by_label(results)
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
            x = [v for c in runs for v in c["success_rate"]]
            y = [v for c in runs for v in c["active_fraction"]]
            ax.scatter(x, y, s=8, alpha=0.5, color=colors[n], marker=markers[(ti + li) % len(markers)],
                       label=f"{tname}: {label}")
    if not logs:
        missing_curves(ax)
    ax.set_xlabel("batch success rate μ̄")
    ax.set_ylabel("share of active groups")
    ax.set_title("Active groups vs Lemma 3.1 (points: RL steps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
