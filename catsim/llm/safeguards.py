"""The asym-GRPO safeguards of the RL loop (article §4.2; docs/asymmetric-grpo.md §7).

The article names three failure modes; this module turns two of them into warnings the trainer
logs (the `warnings` field of each `rl_log.jsonl` record) and prints (one line on stderr):

- reward collapse — "held-out accuracy suddenly at zero": `collapse_warning` on the history of
  held-out accuracies, measured every `RunConfig.heldout_every` steps (`rl.loop.heldout_accuracy`); the
  accuracy before the zero must be high enough that a zero by chance is unlikely
  (`collapse_threshold`);
- exploration stagnation — "the rollout temperature reached τ_min too early" while the pass@k
  signal is frozen: `stagnation_warning` on the held-out accuracy history (the training reward
  when no held-out accuracy is measured); reported once per run.

The third safeguard, weight smoothing against reward collapse, is not a warning but the ε of
w⁻(π) = (π + ε)/(D − π + ε) (`AsymmetricConfig.negative_eps`, default 0.01), applied in every asym-GRPO
advantage. The detection functions are pure functions of the log records, so a resumed run
(which rebuilds its history from the log) warns exactly as an uninterrupted one. This module
imports nothing of the trainer: it reads records and a config.
"""

from __future__ import annotations

import jax

from catsim.objectives.asymmetric import collapse_warning, stagnation_warning

STAGNATION = "exploration stagnation"  # prefix of stagnation_warning's message (reported once)


def step_warnings(records, cfg) -> tuple[str, ...]:
    """Warnings raised by the newest of `records` (step log dicts, oldest first) for run `cfg`.

    Collapse is checked whenever the newest record carries a held-out accuracy; stagnation only
    under a temperature schedule, on the held-out accuracy history (or the training rewards when
    there is none), and only until it has been reported once.
    """
    if not records:
        return ()
    latest = records[-1]
    accuracy = [r["heldout_accuracy"] for r in records if r.get("heldout_accuracy") is not None]
    messages: list[str] = []
    if latest.get("heldout_accuracy") is not None:
        messages += collapse_warning(accuracy, previous_min=collapse_threshold(cfg.run.heldout_prompts))
    if cfg.temperature_plan() != "constant":
        reported = any(m.startswith(STAGNATION) for r in records[:-1] for m in r.get("warnings") or ())
        if not reported:
            history = accuracy if accuracy else [r["reward"] for r in records]
            messages += stagnation_warning(latest["step"] - 1, cfg.run.steps, latest["temperature"],
                                           cfg.rollout.temperature_min, pass_at_k=history)
    return tuple(messages)


def collapse_threshold(prompts: int, chance: float = 0.01) -> float:
    """Smallest previous accuracy p whose fall to exactly 0 on `prompts` held-out prompts is
    "sudden": (1 − p)^prompts < chance, i.e. p ≥ 1 − chance^(1/prompts) (at least 0.05, the
    detector's own floor). 0.134 for 32 prompts, 0.438 for 8: a small held-out set is noisy."""
    return max(0.05, 1.0 - chance ** (1.0 / prompts))


def heldout_key(base_key, step: int):
    """The held-out sampling key of step `step`: disjoint from the rollout keys (step, round)."""
    return jax.random.fold_in(jax.random.fold_in(base_key, step), 0x5AFE)
