"""Which rollouts of a group count, and how much: mixed-group weights (article §2.3) and batch
recomposition by the number of positives (article §3.2). One group of N rollouts; callers vmap."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives.asymmetric.config import AsymmetricConfig


def _rank_mask(scores, candidates, k):
    """0/1 mask of the k highest-scoring candidates (ties → lower index first). [N]."""
    n = scores.shape[0]
    keyed = jnp.where(candidates, scores, -jnp.inf)
    order = jnp.argsort(-keyed, stable=True)
    ranks = jnp.zeros(n, jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
    return candidates & (ranks < k)


def mixed_group_weights(is_positive_N, distances_NxN, scores_N=None, *, config=None):
    """Per-rollout multipliers for a group with both positives and negatives (article §2.3).

    * the top-k positives by `scores_N` (default: all equal → lowest indices) get `amplify`,
      the other positives 1;
    * a negative j is "near" when min_{i positive} distances[j, i] < δ and keeps weight 1;
    * far negatives get 0 (dropped).
    A group that is not mixed (no positive or no negative) gets all ones.

    Args:
      is_positive_N: [N] bool.
      distances_NxN: [N, N] distances; row = the negative, column = the positive (e.g.
        `pairwise_kl` of token distributions, so KL(neg‖pos); or `pairwise_edit_distance`).
      scores_N: optional [N] ranking of positives (higher = better), e.g. graded reward.

    Returns:
      [N] float weights to multiply the advantages with.
    """
    cfg = config or AsymmetricConfig()
    v.check_rank("is_positive_N", is_positive_N, 1)
    v.check_rank("distances_NxN", distances_NxN, 2)
    pos = jnp.asarray(is_positive_N, dtype=bool)
    n = pos.shape[0]
    distances_NxN = jnp.asarray(distances_NxN)
    if distances_NxN.shape != (n, n):
        raise CatsimError(f"distances_NxN must have shape ({n}, {n}), got {distances_NxN.shape}")
    scores = (
        jnp.zeros(n) if scores_N is None else jnp.asarray(scores_N, dtype=jnp.result_type(float))
    )
    dist = jnp.asarray(distances_NxN, dtype=jnp.result_type(float))
    nearest_pos = jnp.min(jnp.where(pos[None, :], dist, jnp.inf), axis=1)
    top = _rank_mask(scores, pos, cfg.top_k)
    weights = jnp.where(
        top, cfg.amplify, jnp.where(pos, 1.0, jnp.where(nearest_pos < cfg.delta, 1.0, 0.0))
    )
    mixed = jnp.any(pos) & jnp.any(~pos)
    return jnp.where(mixed, weights, 1.0)


# --- batch recomposition (article §3.2) ---


def _leader_clusters(candidates, scores, dist, radius):
    """Greedy leader clustering: in score order, a candidate becomes a representative when it is
    at distance ≥ radius from every representative chosen so far. Returns a 0/1 [N] mask."""
    n = scores.shape[0]
    order = jnp.argsort(-jnp.where(candidates, scores, -jnp.inf), stable=True)

    def body(k, reps):
        j = order[k]
        far = jnp.all(jnp.where(reps, dist[j] >= radius, True))
        return reps.at[j].set(candidates[j] & far)

    return jax.lax.fori_loop(0, n, body, jnp.zeros(n, bool))


def recompose_group(is_positive_N, scores_N=None, distances_NxN=None, *, config=None):
    """Which rollouts of one group to keep, by its number of positives P (article §3.2). [N] 0/1.

    * P ≥ rich_positives (3):  only the best positive (highest score);
    * 1 ≤ P < rich_positives:  all positives and the `top_negatives` (3) negatives nearest to a
      positive (by distances[j, positive]; by score when no distances are given);
    * P = 0:                   cluster the negatives (leader clustering with radius δ on
      `distances_NxN`, in score order) and keep one representative per cluster; without
      distances every negative is kept.
    Advantages should be computed on the FULL group first and masked afterwards: a group reduced to
    one rollout would otherwise get zero advantage. With group-relative advantages an all-wrong
    binary group carries no signal anyway; its representatives matter only for the literal
    channels (`asymmetric_reinforce_coefficients`) or graded rewards.

    Args:
      is_positive_N: [N] bool.
      scores_N: optional [N], higher = better (graded reward, or −NLL for "best" positive).
      distances_NxN: optional [N, N] distances (row j to column i), as in `mixed_group_weights`.
    """
    cfg = config or AsymmetricConfig()
    v.check_rank("is_positive_N", is_positive_N, 1)
    pos = jnp.asarray(is_positive_N, dtype=bool)
    n = pos.shape[0]
    scores = (
        jnp.zeros(n) if scores_N is None else jnp.asarray(scores_N, dtype=jnp.result_type(float))
    )
    num_pos = jnp.sum(pos)

    rich = _rank_mask(scores, pos, 1)
    if distances_NxN is None:
        neg_key = scores
        clusters = ~pos
    else:
        distances_NxN = jnp.asarray(distances_NxN)
        if distances_NxN.shape != (n, n):
            raise CatsimError(
                f"distances_NxN must have shape ({n}, {n}), got {distances_NxN.shape}"
            )
        dist = jnp.asarray(distances_NxN, dtype=jnp.result_type(float))
        neg_key = -jnp.min(jnp.where(pos[None, :], dist, jnp.inf), axis=1)
        clusters = _leader_clusters(~pos, scores, dist, cfg.delta)
    poor = pos | _rank_mask(neg_key, ~pos, cfg.top_negatives)
    keep = jnp.where(num_pos >= cfg.rich_positives, rich, jnp.where(num_pos >= 1, poor, clusters))
    return keep.astype(jnp.result_type(float))
