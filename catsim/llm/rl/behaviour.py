"""The behaviour policy's log-probs of a step's rollouts, scored before the advantages: what the
unlikeliness reward ranks by (He et al., "Rewarding the Unlikely", arXiv 2506.02355 §4).

The authors' trainer (AndreHe02/rewarding-unlikely-release, `ray_lean_trainer.py`
`_compute_advantages`) recomputes the old log-probs with the actor at the rollout temperature and
takes `masked_mean(old_log_probs, eos_mask)`: each completion's mean response-token log-prob. This is
the same number from the trainer's own scoring function (`Functions.logp`, at the step's log-prob
temperature τ), so the ranking sees the distribution the update's ratio is taken against, not the
sampler's top-p-truncated one. When the run needs the behaviour log-probs in its batch too (several
updates per step, asym-GRPO), the loop hands it these, scored once.
"""

from __future__ import annotations

import numpy as np

from catsim.llm.model.sharding import to_host
from catsim.llm.rl.asym import sequence_logp
from catsim.llm.rl.step import build_batch
from catsim.llm.rollout import Groups


def token_logps(logp_fn, put, params, groups: Groups, micro_batch: int, temperature: float) -> np.ndarray:
    """B x (T−1) token log-probs log π(token) of the step's rollouts under `params` (the behaviour
    policy, before the step's update) at log-prob temperature τ = `temperature`, aligned with the
    training batch of `step.build_batch(groups, ...)`: the array `loop.score` would compute as the
    batch's old_logp (the same function, micro-batches and placement).

    Args:
      logp_fn: (params, tokens_BxT, real_BxT, τ) -> (logp B x (T−1), _), the run's `Functions.logp`.
      put: host batch -> device batch (the trainer's placement: sharded over its mesh, or plain).
      groups: the step's P × N rollouts (padding masked by `groups.mask`).
      micro_batch: rows per forward pass (the run's micro-batch).
    """
    p, n = np.shape(groups.scores)
    batch = build_batch(groups, np.zeros((p, n), np.float32), np.ones(p, np.float32))
    tau, parts = np.float32(temperature), []
    for s0 in range(0, batch["tokens"].shape[0], micro_batch):
        chunk = put({k: batch[k][s0:s0 + micro_batch] for k in ("tokens", "real")})
        parts.append(to_host(logp_fn(params, chunk["tokens"], chunk["real"], tau)[0]))
    return np.concatenate(parts)


def completion_logps(logp_BxT, groups: Groups) -> np.ndarray:
    """[P, N] mean over each completion's response tokens (padding masked) of `token_logps`."""
    resp = np.zeros(np.shape(logp_BxT), np.float32)
    resp[:, groups.prompt_tokens.shape[1] - 1:] = groups.mask  # response tokens, aligned with the targets
    return sequence_logp(logp_BxT, resp).reshape(np.shape(groups.scores))
