"""Confidence weight b + (1−b)·sigmoid(−KL) of a position's distribution (article §2.1)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives.asymmetric.config import KL_DIRECTIONS


def kl_uniform_to_policy(logits):
    """KL(u‖p) = Σ_v u_v(log u_v − log p_v) with u uniform: [..., V] -> [...].

    This is what the article's code computes: `F.kl_div(probs.log(), uniform).sum(-1)` is
    Σ target·(log target − input) with target = uniform. It is 0 for a uniform policy and grows
    with the policy's confidence; it is dominated by the smallest probabilities (−mean log p).
    """
    log_p = jax.nn.log_softmax(logits, axis=-1)
    size = log_p.shape[-1]
    return -math.log(size) - jnp.mean(log_p, axis=-1)


def kl_policy_to_uniform(logits):
    """KL(p‖u) = log V − H(p): [..., V] -> [...]. The other direction (an option)."""
    log_p = jax.nn.log_softmax(logits, axis=-1)
    size = log_p.shape[-1]
    return math.log(size) + jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


def confidence_weight_from_kl(kl, baseline=0.3):
    """w = b + (1 − b)·sigmoid(−KL) (article §2.1). Elementwise.

    With KL ≥ 0 the weight lies in (b, (1+b)/2]: 0.65 for a uniform (hesitant) distribution,
    falling towards b = 0.3 as the distribution gets confident. The article says "(0, 1)"; the
    attainable range is narrower because KL ≥ 0.
    """
    v.check_in_closed("baseline", baseline, 0.0, 1.0)
    return baseline + (1.0 - baseline) * jax.nn.sigmoid(-jnp.asarray(kl))


def confidence_weight(logits, *, baseline=0.3, kl_direction="uniform_to_policy"):
    """Confidence weight of each position's distribution: [..., V] -> [...].

    For a transformer, logits [T, V] give one weight per token (average them over the response
    mask for a per-sequence weight). For the categorical simulator, logits [V] give one weight
    shared by all draws of the step. Applied to NEGATIVE samples (hesitant errors are penalised
    more, confident errors moderately — article §2.1).
    """
    if kl_direction == "uniform_to_policy":
        kl = kl_uniform_to_policy(logits)
    elif kl_direction == "policy_to_uniform":
        kl = kl_policy_to_uniform(logits)
    else:
        raise CatsimError(
            f"kl_direction must be one of {', '.join(KL_DIRECTIONS)}, got {kl_direction!r}"
        )
    return confidence_weight_from_kl(kl, baseline)
