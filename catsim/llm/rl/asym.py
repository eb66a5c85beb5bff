"""The asym-GRPO components on a training batch (docs/asymmetric-grpo.md): channel and confidence
weights on the advantages (or the literal baseline-free channels), mixed-group weights, and the
recomposition mask, each from `catsim.objectives.asymmetric`.

Ranking: where the article ranks rollouts of a group ("best positive", "top-3 negatives",
cluster leaders, "top-k positives") the objectives functions rank by score, then by a distance, and
break the remaining ties by position. Here the rollouts of a group are first ordered by their
sequence log-prob under the behaviour policy, log π̄ = mean response-token log π_old (most probable
first), so every tie is broken by that criterion instead of by sampling order.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm.model.sharding import to_host
from catsim.llm.rl.config import RLConfig
from catsim.llm.rl.step import Functions, build_batch
from catsim.llm.rollout import Groups
from catsim.objectives import asymmetric
from catsim.objectives.asymmetric import AsymmetricConfig


def asymmetric_batch(batch, groups: Groups, adv_PxN, group_mask, cfg: RLConfig, fns: Functions, params,
                     put=lambda b: jax.tree.map(jnp.asarray, b), focal_P=None):
    """The training batch with the asym-GRPO components switched on in `cfg`, and their statistics.

    Advantages (computed on the FULL groups first) are multiplied by the mixed-group weights, then
    re-weighted by channel / confidence; with `asym_advantage = baseline_free` the literal channels
    w⁺·r − w⁻·(1 − r) replace them (times the focal weight `focal_P` and the group mask). The
    recomposition mask goes on `loss_mask`.

    Returns:
      (batch, stats): stats["mixed_near_frac"] = share of the negatives of mixed kept groups that lie
      within δ of a positive (the ones the mixed-group rule keeps); None when mixed groups are off
      or there are none.
    """
    w = groups.prompt_tokens.shape[1]
    resp = np.zeros_like(batch["loss_mask"])
    resp[:, w - 1:] = groups.mask  # response tokens, aligned with the targets
    adv = np.asarray(adv_PxN, np.float32)
    p, n = adv.shape
    seq_logp = sequence_logp(batch["old_logp"], resp).reshape(p, n)
    threshold = cfg.components.positive_threshold
    dist = edit_distances(groups) if cfg.use("mixed") or cfg.use("recompose") else None
    stats = {"mixed_near_frac": None}
    conf = None
    if cfg.use("confidence"):
        parts = []
        for s0 in range(0, resp.shape[0], cfg.micro_batch):  # micro-batched like the gradient pass
            chunk = put({k: batch[k][s0:s0 + cfg.micro_batch] for k in ("tokens", "real")})
            parts.append(to_host(fns.confidence(params, chunk["tokens"], chunk["real"])))
        conf = np.concatenate(parts)
    if cfg.use("mixed"):
        mixed = mixed_weights(groups.scores, seq_logp, dist, cfg.asym, threshold)
        stats["mixed_near_frac"] = mixed_near_fraction(groups.scores, dist, group_mask, cfg.asym.delta, threshold)
    if cfg.components.advantage == "baseline_free":
        g = np.ones(p, np.float32) if focal_P is None else np.asarray(focal_P, np.float32)
        adv = baseline_free_advantages(groups.scores, batch["old_logp"], resp, cfg.asym, conf)
        adv = adv * (g * np.asarray(group_mask, np.float32))[:, None]
        if cfg.use("mixed"):
            adv = adv * mixed
    else:
        if cfg.use("mixed"):
            adv = adv * mixed
        if cfg.use("channels"):
            adv = asymmetric_advantages(adv, groups.scores, batch["old_logp"], resp, cfg.asym, conf)
        elif conf is not None:  # the confidence weight alone, on the negative channel
            c = (np.sum(conf * resp, axis=1) / np.maximum(resp.sum(axis=1), 1.0)).reshape(adv.shape)
            adv = np.where(adv < 0, c * adv, adv).astype(np.float32)
    if cfg.use("mixed") or cfg.use("channels") or conf is not None:
        batch = {**batch, "adv": build_batch(groups, adv.astype(np.float32), group_mask)["adv"]}
    if cfg.use("recompose"):
        keep = recompose_keep(groups.scores, seq_logp, dist, cfg.asym, threshold).reshape(-1)
        batch = {**batch, "loss_mask": batch["loss_mask"] * keep[:, None]}
    return batch, stats


def sequence_logp(old_logp_BxT, resp_BxT) -> np.ndarray:
    """[B] log π̄ = mean over each row's response tokens of log π_old (0 for an empty response)."""
    resp = np.asarray(resp_BxT, np.float32)
    return (np.sum(np.asarray(old_logp_BxT, np.float32) * resp, axis=1)
            / np.maximum(resp.sum(axis=1), 1.0)).astype(np.float32)


def _sequence_weights(old_logp_BxT, resp_BxT, p, n, conf_BxT):
    """(π̄ [P, N], mean token confidence [P, N] or None) of the rows of a batch."""
    resp = jnp.asarray(resp_BxT, jnp.float32)
    tokens = jnp.maximum(jnp.sum(resp, axis=1), 1.0)
    pi = jnp.exp(jnp.sum(jnp.asarray(old_logp_BxT) * resp, axis=1) / tokens).reshape(p, n)
    conf = None if conf_BxT is None else (jnp.sum(jnp.asarray(conf_BxT) * resp, axis=1) / tokens).reshape(p, n)
    return pi, conf


def asymmetric_advantages(adv_PxN, scores_PxN, old_logp_BxT, resp_BxT, asym: AsymmetricConfig, conf_BxT=None):
    """Channel-weighted advantages of P groups (`objectives.asymmetric.asymmetric_advantages`).

    π̄ of a rollout = exp(mean over its response tokens of log π_old) (the geometric-mean token
    probability, docs/asymmetric-grpo.md §2 "Which π"); its confidence weight is the mean over
    its response tokens of `conf_BxT` (if given). w⁺ reads the verifier score in [0, 1]. Rows of
    the B x T arrays are prompt-major (B = P·N). Returns [P, N] float32.
    """
    p, n = np.shape(adv_PxN)
    pi, conf = _sequence_weights(old_logp_BxT, resp_BxT, p, n, conf_BxT)
    one = functools.partial(asymmetric.asymmetric_advantages, config=asym)
    adv, scores = jnp.asarray(adv_PxN, jnp.float32), jnp.asarray(scores_PxN, jnp.float32)
    if conf is None:
        out = jax.vmap(lambda a, r, q: one(a, r, q))(adv, scores, pi)
    else:
        out = jax.vmap(one)(adv, scores, pi, conf)
    return np.asarray(out, np.float32)


def baseline_free_advantages(scores_PxN, old_logp_BxT, resp_BxT, asym: AsymmetricConfig, conf_BxT=None):
    """The article's literal channels without a group baseline, w⁺(r)·r − w⁻(π̄)·c·(1 − r)
    (`objectives.asymmetric.asymmetric_reinforce_coefficients`), r = the verifier score, π̄ and c
    as in `asymmetric_advantages`. An all-wrong group gets a negative signal. Returns [P, N]."""
    p, n = np.shape(scores_PxN)
    pi, conf = _sequence_weights(old_logp_BxT, resp_BxT, p, n, conf_BxT)
    one = functools.partial(asymmetric.asymmetric_reinforce_coefficients, config=asym)
    scores = jnp.asarray(scores_PxN, jnp.float32)
    out = jax.vmap(lambda r, q: one(r, q))(scores, pi) if conf is None else jax.vmap(one)(scores, pi, conf)
    return np.asarray(out, np.float32)


def edit_distances(groups: Groups) -> np.ndarray:
    """[P, N, N] token edit distances between the responses of each group
    (`objectives.asymmetric.pairwise_edit_distance`, the article's code-task distance)."""
    p, n = groups.scores.shape
    tokens = jnp.asarray(groups.tokens, jnp.int32).reshape(p, n, -1)
    lengths = jnp.asarray(groups.mask.sum(axis=1), jnp.int32).reshape(p, n)
    return np.asarray(_edit_distances(tokens, lengths), np.float32)


# Compiled once per shape. Called eagerly, the rules' scans and loops were traced afresh and compiled
# again at every training step (a new closure each time): 5 s a step at the Maze study's batch, and
# the growing pile of compiled code ended the run (LLVM "Cannot allocate memory") after ~120 steps.
_edit_distances = jax.jit(jax.vmap(asymmetric.pairwise_edit_distance))


def _by_logp(fn, seq_logp_N, vectors, matrix):
    """fn(*vectors, matrix) on the group reordered by descending log π̄ (stable), mapped back: the
    position-based tie-breaks inside `fn` then prefer the more probable rollout."""
    order = jnp.argsort(-seq_logp_N, stable=True)
    back = jnp.argsort(order)
    out = fn(*(x[order] for x in vectors), matrix[order][:, order])
    return out[back]


def recompose_keep(scores_PxN, seq_logp_PxN, distances_PxNxN, asym: AsymmetricConfig,
                   threshold: float) -> np.ndarray:
    """[P, N] 0/1: the rollouts `objectives.asymmetric.recompose_group` keeps in each group.

    Positive = score ≥ positive_threshold. Rich groups keep the positive of highest score, then
    highest log π̄; poor groups keep the `top_negatives` negatives nearest (token edit distance) to a
    positive, ties to the higher log π̄; all-negative groups keep one leader per δ-cluster of the
    edit distance, leaders taken in (score, log π̄) order.
    """
    return _per_group(_recompose_rule, scores_PxN, seq_logp_PxN, distances_PxNxN, asym, threshold)


def mixed_weights(scores_PxN, seq_logp_PxN, distances_PxNxN, asym: AsymmetricConfig,
                  threshold: float) -> np.ndarray:
    """[P, N] multipliers of `objectives.asymmetric.mixed_group_weights` per group: positives
    (score ≥ positive_threshold) ranked by score, then log π̄; a negative is near when its token edit
    distance to the nearest positive is < δ (`mixed_delta`)."""
    return _per_group(_mixed_rule, scores_PxN, seq_logp_PxN, distances_PxNxN, asym, threshold)


def _recompose_rule(pos, s, d, asym):
    return asymmetric.recompose_group(pos, s, d, config=asym)


def _mixed_rule(pos, s, d, asym):
    return asymmetric.mixed_group_weights(pos, d, s, config=asym)


def _per_group(rule, scores_PxN, seq_logp_PxN, distances_PxNxN, asym: AsymmetricConfig,
               threshold: float) -> np.ndarray:
    """[P, N] float32: `rule(is_positive_N, scores_N, distances_NxN, asym)` of every group, its
    rollouts ordered by log π̄ first (`_by_logp`), positives = score ≥ threshold."""
    out = _per_group_jit(jnp.asarray(scores_PxN, jnp.float32), jnp.asarray(seq_logp_PxN, jnp.float32),
                         jnp.asarray(distances_PxNxN, jnp.float32), rule=rule, asym=asym,
                         threshold=float(threshold))
    return np.asarray(out, np.float32)


@functools.partial(jax.jit, static_argnames=("rule", "asym", "threshold"))
def _per_group_jit(scores_PxN, seq_logp_PxN, distances_PxNxN, *, rule, asym, threshold):
    def one(s, lp, d):
        return _by_logp(lambda s_, d_: rule(s_ >= threshold, s_, d_, asym), lp, (s,), d)

    return jax.vmap(one)(scores_PxN, seq_logp_PxN, distances_PxNxN)


def nearest_positive_distances(scores_PxN, distances_PxNxN, group_mask_P, threshold: float) -> np.ndarray:
    """Distance of every negative of a mixed kept group to its nearest positive (1-D, float):
    what the mixed-group rule compares with δ."""
    scores, dist = np.asarray(scores_PxN), np.asarray(distances_PxNxN, np.float64)
    pos = scores >= threshold
    mixed = pos.any(axis=1) & (~pos).any(axis=1) & (np.asarray(group_mask_P) > 0)
    nearest = np.min(np.where(pos[:, None, :], dist, np.inf), axis=2)  # [P, N]: row j to positives
    return nearest[mixed[:, None] & ~pos]


def mixed_near_fraction(scores_PxN, distances_PxNxN, group_mask_P, delta: float, threshold: float) -> float | None:
    """Share of the negatives of mixed kept groups within δ of a positive (kept by the rule)."""
    nearest = nearest_positive_distances(scores_PxN, distances_PxNxN, group_mask_P, threshold)
    return float(np.mean(nearest < delta)) if nearest.size else None
