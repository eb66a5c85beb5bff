"""Loss curve of a supervised warm-up run (from its train_log.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

from catsim.plots.save import save_figure


def plot_loss_curve(log_path: str | Path, png_path: str | Path) -> None:
    """Loss and token accuracy against step, written to `png_path`."""
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    if not rows:
        return
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, [r["loss"] for r in rows], lw=1, label="loss (target tokens)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_yscale("log")
    ax2 = ax.twinx()
    ax2.plot(steps, [r["token_accuracy"] for r in rows], lw=1, color="tab:orange", label="token accuracy")
    ax2.set_ylabel("token accuracy")
    ax2.set_ylim(0, 1)
    fig.legend(loc="upper center", ncol=2, fontsize=8)
    fig.tight_layout()
    save_figure(fig, png_path, dpi=120)
