"""Figures of `catsim llm advise` and of its validation study (result objects in, PNG out)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.plots.save import save_figure


def plot_risk(advice, png_path: str | Path, title: str = "") -> None:
    """Lemma 3.1 risk against group size: one thin line per prompt, the mean bold with its
    bootstrap band (a `catsim.theory.planning.Advice`)."""
    import matplotlib.pyplot as plt

    n = np.asarray(advice.group_sizes, float)
    fig, ax = plt.subplots(figsize=(6.2, 3.8))
    for i, row in enumerate(np.asarray(advice.risk)[advice.has_rare]):
        ax.plot(n, row, color="0.55", lw=0.7, alpha=0.6, label="one prompt" if i == 0 else None)
    ax.fill_between(n, advice.mean_risk_lo, advice.mean_risk_hi, color="tab:red", alpha=0.2,
                    label="90 % bootstrap band of the mean")
    ax.plot(n, advice.mean_risk, color="tab:red", lw=2.5, marker="o", label="mean over prompts")
    ax.axvline(advice.recommended_n, color="k", ls="--", lw=1,
               label=f"advice: N = {advice.recommended_n}" + (f", γ = {advice.recommended_gamma:g}"
                                                              if advice.recommended_gamma else ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("group size N")
    ax.set_ylabel("Pr(group active, rare answers missed)")
    ax.set_ylim(0, 1)
    ax.set_title(title or f"Lemma 3.1 risk, {int(advice.has_rare.sum())} prompts with a rare subset "
                          f"(rule {advice.rule}, n = {advice.n_samples})", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    save_figure(fig, png_path, dpi=120)


def plot_study(results: dict, png_path: str | Path) -> None:
    """The advise validation study (a results dict of `experiments.advise_study`): predicted risk
    against the measured change of rare mass per prompt (one colour per N, seeds pooled), and the
    share of prompts that lost rare mass per bin of predicted risk."""
    import matplotlib.pyplot as plt

    sizes = results["config"]["group_sizes"]
    risk = np.asarray([[np.nan if x is None else x for x in row] for row in results["advice"]["risk"]])
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for k, n in enumerate(sizes):
        xs, ys = [], []
        for run in results["runs"].values():
            if run["group_size"] != n:
                continue
            d = np.asarray([np.nan if x is None else x for x in run["delta_log_tau"]])
            xs.append(risk[:, k])
            ys.append(d)
        x, y = np.concatenate(xs), np.concatenate(ys)
        rho = results["summary"][str(n)]["spearman_risk_vs_loss"]
        spread = f" ± {rho[1]:.2f}" if len(results["config"]["seeds"]) > 1 else ""  # one seed: no spread
        label = f"N = {n}" + (f" (ρ = {rho[0]:+.2f}{spread})" if rho else "")
        ax.scatter(x, y, s=10, alpha=0.6, label=label)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("predicted risk (Lemma 3.1, from base samples)")
    ax.set_ylabel("Δ log τ (rare mass after / before)")
    ax.set_title("per prompt and seed; ρ = Spearman(risk, loss)", fontsize=9)
    ax.legend(fontsize=8)
    cal = results["calibration"]
    ax2.plot([c["risk_mean"] for c in cal], [c["lost_share"] for c in cal], marker="o")
    for c in cal:
        ax2.annotate(str(c["prompts"]), (c["risk_mean"], c["lost_share"]), fontsize=7,
                     textcoords="offset points", xytext=(3, 3))
    ax2.set_xlabel("predicted risk (bin mean)")
    ax2.set_ylabel("share of prompts that lost rare mass")
    ax2.set_ylim(0, 1)
    ax2.set_title("calibration (all N and seeds pooled; labels: prompt-runs per bin)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, png_path, dpi=120)
