"""A supervised warm-up and its loss curve: `catsim.llm.sft.run_sft` trains, then process 0 draws
loss.png from the run's train_log.jsonl (`catsim.plots.sft`). The runner draws nothing itself; the
CLI (`catsim llm sft`) and every experiment that warms a model up call this, so loss.png stands in
the run directory whichever of them trained it.

    result = run_warm_up(task, SFTConfig(steps=300), ModelSize(), "runs/maze7", eval_prompts=0)
"""

from __future__ import annotations

from pathlib import Path

LOSS_FIGURE = "loss.png"


def run_warm_up(task, cfg, size, out_dir: str | Path, **options):
    """`run_sft(task, cfg, size, out_dir, **options)`, then the loss curve of every step logged so
    far (a stopped run's too) in OUT/loss.png; returns run_sft's `SFTResult`."""
    import jax

    from catsim.llm.sft import LOG_FILE, run_sft
    from catsim.plots.sft import plot_loss_curve

    result = run_sft(task, cfg, size, out_dir, **options)
    log = Path(result.out_dir) / LOG_FILE
    if jax.process_index() == 0 and log.is_file():  # process 0 alone writes the run's files
        plot_loss_curve(log, Path(result.out_dir) / LOSS_FIGURE)
    return result
