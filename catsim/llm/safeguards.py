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

Non-finite numbers are not warnings but errors (`NonFinite`): a training step whose loss or
gradient norm is NaN or infinite stops the run (`check_step`, on the metrics the loop already has on
the host), no state with a non-finite parameter is written (`check_params`, before each save), and a
model whose weights are not finite is refused where it is loaded (`check_model`), so an evaluation
never reports a pass rate of NaN weights as a result.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
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


# ----------------------------------------------------------------------------- non-finite numbers
QUANTITIES = {"loss": "the loss", "grad_norm": "the gradient norm"}  # step metrics that must be finite


class NonFinite(CatsimError):
    """A training step or a model produced NaN or infinite numbers (the run stops; nothing
    non-finite is saved)."""


@jax.jit
def _finite_leaves(tree):
    return jax.tree.map(lambda x: jnp.all(jnp.isfinite(x)), tree)


def non_finite_leaves(tree) -> list[str]:
    """Paths ("layers/wq", ...) of the arrays of `tree` holding a NaN or an infinity: one reduction
    per array on its devices, one boolean each to the host (every process of a multi-process run
    must call it, as for any computation on global arrays)."""
    from catsim.llm.model.sharding import to_host

    flags = jax.tree_util.tree_flatten_with_path(to_host(_finite_leaves(tree)))[0]
    return ["/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
            for path, ok in flags if not bool(ok)]


def _kept(last_good: int, state_dir: str | Path) -> str:
    if last_good > 0:
        return f"the last good state (step {last_good}) is kept in {state_dir}"
    return "no step was saved before it (a rerun starts again from step 0)"


def check_step(what: str, step: int, metrics: Mapping[str, float], last_good: int, state_dir: str | Path) -> None:
    """Raise `NonFinite` when step `step`'s loss or gradient norm (host floats of `metrics`) is
    NaN or infinite. The check costs nothing (the loop reads these numbers anyway) and runs before
    the step is logged or saved, so the last saved state, step `last_good`, stays the last good one."""
    for name, quantity in QUANTITIES.items():
        value = float(metrics[name])
        if not np.isfinite(value):
            raise NonFinite(f"{what} step {step}: {quantity} is not finite ({value}); {_kept(last_good, state_dir)}")


def check_params(what: str, step: int, params, last_good: int, state_dir: str | Path) -> None:
    """Raise `NonFinite` when a parameter after step `step` is NaN or infinite; called before
    each save, so no non-finite state or model is written (a finite loss and gradient can still
    overflow the parameters at a huge learning rate)."""
    if bad := non_finite_leaves(params):
        raise NonFinite(f"{what} step {step}: the parameters are not finite ({', '.join(bad[:3])}); "
                        f"{_kept(last_good, state_dir)}")


def check_resumed(what: str, step: int, params, state_dir: str | Path) -> None:
    """Refuse to go on from a saved state (step `step` > 0) whose parameters are not finite: a run
    directory written before these checks existed can hold one, and resuming it would train, or
    save as the final model, NaN weights."""
    if step > 0 and (bad := non_finite_leaves(params)):
        raise NonFinite(f"{what}: the state saved at step {step} in {state_dir} is not finite "
                        f"({', '.join(bad[:3])}); remove {Path(state_dir) / str(step)} to resume from an "
                        "earlier one, or rerun with --overwrite")


def check_model(params, source: str | Path) -> None:
    """Refuse a loaded model whose weights hold a NaN or an infinity: every number it would give
    (a pass rate, a sample, a training run from it) would be wrong."""
    if bad := non_finite_leaves(params):
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        raise NonFinite(f"{source}: the model's weights are not finite (NaN or infinity in "
                        f"{', '.join(bad[:3])}{more})")
