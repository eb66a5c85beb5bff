"""Reward shaping for length: DAPO's overlong penalty and overlong filtering (Yu et al. 2025, §3.4).

DAPO adds a length-aware penalty to the verifier reward of completions that approach the length
cap (its "soft overlong punishment", eq. 13) and can instead drop truncated completions from the
loss ("overlong filtering"). Both are per-rollout functions of the completion length; callers
broadcast over a batch.

    R_length(L) = 0                                   L ≤ L_max − buffer
                = −penalty · (L − (L_max − buffer)) / buffer     L_max − buffer < L ≤ L_max
                = −penalty                            L > L_max

DAPO's own values: L_max = 20,480 tokens, buffer 4,096, penalty 1 (verl's `overlong_buffer`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

__all__ = ["overlong_penalty", "overlong_keep"]


def overlong_penalty(lengths, max_length, buffer, penalty=1.0):
    """DAPO's soft overlong punishment, added to the verifier reward (≤ 0). Shapes broadcast.

    Args:
      lengths: [...] completion lengths in tokens (ints or floats).
      max_length: L_max ≥ 1, the length at which the full penalty is reached.
      buffer: 0 ≤ buffer ≤ L_max, the length of the linear ramp before L_max (0: a step at L_max).
      penalty: the penalty ≥ 0 at and beyond L_max (DAPO: 1.0).

    Returns:
      [...] float penalties: 0 up to L_max − buffer, linear down to −penalty at L_max, −penalty beyond.
    """
    for name, value in (("max_length", max_length), ("buffer", buffer)):
        if isinstance(value, bool) or int(value) != value:
            raise CatsimError(f"{name} must be a whole number, got {value!r}")
    if max_length < 1:
        raise CatsimError(f"max_length must be >= 1, got {max_length}")
    if not 0 <= buffer <= max_length:
        raise CatsimError(f"buffer must lie in [0, max_length={max_length}], got {buffer}")
    v.check_nonnegative("penalty", penalty)
    lengths = jnp.asarray(lengths, dtype=jnp.result_type(float))
    start = max_length - buffer
    if buffer == 0:
        return jnp.where(lengths >= max_length, -penalty, 0.0) * jnp.ones_like(lengths)
    ramp = -penalty * jnp.clip((lengths - start) / buffer, 0.0, 1.0)
    return jnp.where(lengths > max_length, -penalty, ramp)


def overlong_keep(truncated):
    """DAPO's overlong filtering: 1.0 for completions that ended on their own, 0.0 for truncated
    ones, which then carry no loss (multiply into the loss mask). [...] bool -> [...] float."""
    return 1.0 - jnp.asarray(truncated, dtype=jnp.result_type(float))


# --- the unlikeliness reward (He et al., "Rewarding the Unlikely", arXiv 2506.02355, §4) ---

__all__ += ["unlikeliness", "unlikeliness_ranks"]


def unlikeliness_ranks(logp_N, weights_N=None):
    """Rank of each sample in its group by ascending log-prob: 0 for the least likely.

    Every sample is ranked, correct or not, as the authors' code does
    (`torch.argsort(torch.argsort(log_probs))`); ties go by position (a stable sort). Samples of
    weight 0 (padding) rank after every counted one and do not shift the others' ranks.
    [N] float (, [N] 0/1 weights) -> [N] float ranks.
    """
    logp_N = jnp.asarray(logp_N)
    dtype = jnp.result_type(logp_N, float)
    key = logp_N if weights_N is None else jnp.where(jnp.asarray(weights_N) > 0, logp_N, jnp.inf)
    order = jnp.argsort(key, stable=True)
    return jnp.zeros(logp_N.shape, dtype).at[order].set(jnp.arange(logp_N.shape[0], dtype=dtype))


def unlikeliness(rewards_N, logp_N, *, beta=0.25, weights_N=None):
    """The unlikeliness reward: r_i ← r_i·(1 − β·rank_i/N) (He et al., "Rewarding the Unlikely",
    arXiv 2506.02355, §4; β_rank = 0.25).

    rank_i ranks ALL N samples of the group by ascending log-prob under the sampling policy (the
    least likely has rank 0), so a correct sample keeps (1 − β·rank/N) of its reward: the less
    likely, the more. Wrong samples (r = 0) stay 0. GRPO then runs on these rewards. This is the
    authors' code: AndreHe02/rewarding-unlikely-release, `verl/trainer/ppo/ray_lean_trainer.py`
    `_compute_advantages` (ranks by the mean per-token log-prob of each completion, ranks over
    all N). Minimal case: r = [1, 1, 0], log π = [−1, −2, −3], β = 1/4 -> [0.833, 0.917, 0].
    An all-wrong group stays all zero; an all-correct group gets unequal rewards (the rule's
    point: it pushes mass from likely to unlikely correct samples even when all succeed).

    Args:
      rewards_N: [N] verifier rewards in [0, 1] (0 = wrong).
      logp_N: [N] log-probs log π(o_i) of the samples (treated as constants; the authors use the
        mean per-token log-prob of a completion).
      beta: β_rank in [0, 1].
      weights_N: optional [N] 0/1 weights; N is then their sum and weight-0 samples are not ranked.

    Returns:
      [N] shaped rewards.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    v.check_same_shape(rewards_N=rewards_N, logp_N=logp_N)
    v.check_in_closed("beta", beta, 0.0, 1.0)
    rewards_N = jnp.asarray(rewards_N)
    ranks = unlikeliness_ranks(jax.lax.stop_gradient(logp_N), weights_N)
    size = rewards_N.shape[0] if weights_N is None else jnp.sum(jnp.asarray(weights_N, rewards_N.dtype))
    return rewards_N * (1.0 - beta * ranks / size)
