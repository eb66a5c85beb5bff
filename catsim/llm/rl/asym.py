"""The asym-GRPO components on a training batch (docs/asymmetric-grpo.md): channel and confidence
weights on the advantages, mixed-group weights, and the recomposition mask, each from
`catsim.objectives.asymmetric`.
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


def asymmetric_batch(batch, groups: Groups, adv_PxN, group_mask, cfg: RLConfig, fns: Functions, params,
                     put=lambda b: jax.tree.map(jnp.asarray, b)):
    """The training batch with the asym-GRPO components switched on in `cfg`: advantages
    (computed on the FULL groups first) re-weighted by channel / confidence, then the
    recomposition mask on `loss_mask`."""
    w = groups.prompt_tokens.shape[1]
    resp = np.zeros_like(batch["loss_mask"])
    resp[:, w - 1:] = groups.mask  # response tokens, aligned with the targets
    adv = np.asarray(adv_PxN, np.float32)
    if cfg.use("mixed"):
        adv = adv * mixed_weights(groups, cfg)
        batch = {**batch, "adv": build_batch(groups, adv, group_mask)["adv"]}
    if cfg.use("channels") or cfg.use("confidence"):
        conf = None
        if cfg.use("confidence"):
            parts = []
            for s0 in range(0, resp.shape[0], cfg.micro_batch):
                chunk = put({k: batch[k][s0:s0 + cfg.micro_batch] for k in ("tokens", "real")})
                parts.append(to_host(fns.confidence(params, chunk["tokens"], chunk["real"])))
            conf = np.concatenate(parts)
        if cfg.use("channels"):
            adv = asymmetric_advantages(adv, groups.scores, batch["old_logp"], resp, cfg, conf)
        else:  # the confidence weight alone, on the negative channel
            c = (np.sum(conf * resp, axis=1) / np.maximum(resp.sum(axis=1), 1.0)).reshape(adv.shape)
            adv = np.where(adv < 0, c * adv, adv).astype(np.float32)
        batch = {**batch, "adv": build_batch(groups, adv, group_mask)["adv"]}
    if cfg.use("recompose"):
        keep = recompose_keep(groups.scores, cfg).reshape(-1)
        batch = {**batch, "loss_mask": batch["loss_mask"] * keep[:, None]}
    return batch


def asymmetric_advantages(adv_PxN, scores_PxN, old_logp_BxT, resp_BxT, cfg: RLConfig, conf_BxT=None):
    """Channel-weighted advantages of P groups (`objectives.asymmetric.asymmetric_advantages`).

    π̄ of a rollout = exp(mean over its response tokens of log π_old) (the geometric-mean token
    probability, docs/asymmetric-grpo.md §2 "Which π"); its confidence weight is the mean over
    its response tokens of `conf_BxT` (if given). w⁺ reads the verifier score in [0, 1]. Rows of
    the B x T arrays are prompt-major (B = P·N). Returns [P, N] float32.
    """
    p, n = np.shape(adv_PxN)
    resp = jnp.asarray(resp_BxT, jnp.float32)
    tokens = jnp.maximum(jnp.sum(resp, axis=1), 1.0)
    pi = jnp.exp(jnp.sum(jnp.asarray(old_logp_BxT) * resp, axis=1) / tokens).reshape(p, n)
    one = functools.partial(asymmetric.asymmetric_advantages, config=cfg.asym)
    adv, scores = jnp.asarray(adv_PxN, jnp.float32), jnp.asarray(scores_PxN, jnp.float32)
    if conf_BxT is None:
        out = jax.vmap(lambda a, r, q: one(a, r, q))(adv, scores, pi)
    else:
        conf = (jnp.sum(jnp.asarray(conf_BxT) * resp, axis=1) / tokens).reshape(p, n)
        out = jax.vmap(one)(adv, scores, pi, conf)
    return np.asarray(out, np.float32)


def recompose_keep(scores_PxN, cfg: RLConfig) -> np.ndarray:
    """[P, N] 0/1: the rollouts `objectives.asymmetric.recompose_group` keeps in each group
    (positive = score ≥ positive_threshold; ranked by score, ties to the lower index; no distances,
    so an all-negative group keeps every rollout)."""
    scores = jnp.asarray(scores_PxN, jnp.float32)
    threshold = cfg.components.positive_threshold
    keep = jax.vmap(lambda s: asymmetric.recompose_group(s >= threshold, s, config=cfg.asym))(scores)
    return np.asarray(keep, np.float32)


def mixed_weights(groups: Groups, cfg: RLConfig) -> np.ndarray:
    """[P, N] multipliers of `objectives.asymmetric.mixed_group_weights` per group: positives
    (score ≥ positive_threshold) ranked by score, distance = token edit distance between responses
    (`pairwise_edit_distance`, the article's code-task distance; the KL reading needs logits)."""
    p, n = groups.scores.shape
    tokens = jnp.asarray(groups.tokens, jnp.int32).reshape(p, n, -1)
    lengths = jnp.asarray(groups.mask.sum(axis=1), jnp.int32).reshape(p, n)
    scores = jnp.asarray(groups.scores, jnp.float32)
    threshold = cfg.components.positive_threshold

    def one(tok, ln, sc):
        dist = asymmetric.pairwise_edit_distance(tok, ln)
        return asymmetric.mixed_group_weights(sc >= threshold, dist, sc, config=cfg.asym)

    return np.asarray(jax.vmap(one)(tokens, lengths, scores), np.float32)
