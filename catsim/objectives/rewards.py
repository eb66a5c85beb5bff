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


def unlikeliness_ranks(correct_N, logp_N, weights_N=None):
    """Rank of each correct sample among the group's correct samples by ascending log-prob.

    Rank 0 is the least likely correct sample; ties go by position (a stable sort, as the
    authors' argsort). Wrong samples (and samples of weight 0) get rank 0 and are not counted.
    [N] bool, [N] float (, [N] 0/1 weights) -> [N] float ranks.
    """
    correct_N = jnp.asarray(correct_N, bool)
    if weights_N is not None:
        correct_N = correct_N & (jnp.asarray(weights_N) > 0)
    logp_N = jnp.asarray(logp_N)
    key = jnp.where(correct_N, logp_N, jnp.inf)  # correct samples first, least likely first
    order = jnp.argsort(key, stable=True)
    ranks = jnp.zeros(logp_N.shape, jnp.result_type(logp_N, float)).at[order].set(
        jnp.arange(logp_N.shape[0], dtype=jnp.result_type(logp_N, float)))
    return jnp.where(correct_N, ranks, 0.0)


def unlikeliness(rewards_N, logp_N, *, beta=0.25):
    """The unlikeliness reward: r_i ← r_i·(1 − β·rank_i/N) (arXiv 2506.02355, §4; β_rank = 0.25).

    rank_i ranks the group's correct samples (r_i > 0) by ascending log-prob under the sampling
    policy, so the least likely correct sample keeps its full reward and the most likely loses up
    to β·(c − 1)/N of it; wrong samples (r = 0) are unchanged. GRPO then runs on these rewards.
    An all-wrong group stays all zero; an all-correct group gets unequal rewards (the rule's
    point: it pushes mass from likely to unlikely correct samples even when all succeed).

    Args:
      rewards_N: [N] verifier rewards in [0, 1] (0 = wrong).
      logp_N: [N] sequence log-probs log π(o_i) of the samples (treated as constants).
      beta: β_rank in [0, 1].

    Returns:
      [N] shaped rewards.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    v.check_same_shape(rewards_N=rewards_N, logp_N=logp_N)
    v.check_in_closed("beta", beta, 0.0, 1.0)
    rewards_N = jnp.asarray(rewards_N)
    ranks = unlikeliness_ranks(rewards_N > 0, jax.lax.stop_gradient(logp_N))
    return rewards_N * (1.0 - beta * ranks / rewards_N.shape[0])
