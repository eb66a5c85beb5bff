"""What an RL run ends with: its final step's metrics and where its files are (`catsim llm rl`'s
closing lines; a notebook gets the same from `summary_lines(run_rl(...), label)`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from catsim.llm.rl.loop import LOG_FILE, STATE_FILE, RLResult, read_log

RECENT = 10  # steps the summary also averages: one step's reward is a noisy read of the policy


def summary_lines(result: RLResult, label: str) -> list[str]:
    """Lines saying how the run ended, its final step's metrics (reward, success rate, active share
    against Lemma 3.1's prediction, entropy, length), the mean over its last `RECENT` steps, the last
    held-out accuracy, and the files it wrote."""
    out = Path(result.out_dir)
    steps = f"{result.steps_done} step{'' if result.steps_done == 1 else 's'}"
    lines = [f"{label}: {'finished' if result.finished else 'stopped'} after {steps} in {result.seconds:.1f} s"
             + ("" if result.finished else "; rerun the same command to resume")]
    records = [r for r in read_log(out) if r["step"] <= result.steps_done] if (out / LOG_FILE).is_file() else []
    last = result.last or (records[-1] if records and records[-1]["step"] == result.steps_done else None)
    if last is not None:
        entropy = "–" if last.get("entropy") is None else f"{last['entropy']:.3f}"
        lines.append(f"step {last['step']}: reward {last['reward']:.3f}, success rate {last['success_rate']:.3f}, "
                     f"active groups {last['active_fraction']:.2f} (Lemma 3.1 at every group's own success rate: "
                     f"{last['active_pred_groups']:.2f}; at the batch's mean: {last['active_pred_pooled']:.2f}), "
                     f"entropy {entropy}, response length {last['response_length']:.1f} tokens")
        recent = records[-RECENT:]
        if len(recent) > 1:
            lines.append(f"last {len(recent)} steps: mean reward {np.mean([r['reward'] for r in recent]):.3f}, "
                         f"mean success rate {np.mean([r['success_rate'] for r in recent]):.3f}")
        heldout = [r for r in records if r.get("heldout_accuracy") is not None]
        if heldout:
            lines.append(f"held-out accuracy {heldout[-1]['heldout_accuracy']:.3f} "
                         f"(step {heldout[-1]['step']}, one sample per prompt)")
    saved = [(out / "model", "the final policy (a model directory: catsim llm eval / sample read it)")
             if result.finished else (out / STATE_FILE, "the training state a rerun resumes from"),
             (out / LOG_FILE, "every step's metrics, one JSON line each")]
    saved += [(out / name, what) for name, what in (("tensorboard", "TensorBoard event files"),
                                                    ("wandb", "the W&B run")) if (out / name).is_dir()]
    lines += ["saved:"] + [f"  {path}  {what}" for path, what in saved]
    return lines
