"""The two advantage channels: w⁺(reward) on positives, w⁻(π)·confidence on negatives (article §2.2)."""

from __future__ import annotations

import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives.asymmetric.config import NEGATIVE_READINGS, AsymmetricConfig


def positive_weight(rewards, tau=1.0):
    """w⁺(r) = min(1, r/τ) (article §2.2): full weight for rewards ≥ τ, linear below. Elementwise.

    τ > 0 is a reward scale. For binary rewards {0, 1} and τ ≤ 1 it is 1 on every positive.
    """
    v.check_positive("tau", tau)
    return jnp.minimum(1.0, jnp.asarray(rewards) / tau)


def negative_weight_formula(prob, d=1.0, eps=1e-2):
    """w⁻(π) = (π + ε)/(D − π + ε): the article's FORMULA (§2.2, smoothed as in §4.2). Elementwise.

    Increases with π: confident negatives get MORE weight (for D = 1 it is the smoothed odds
    π/(1−π)); it reaches (D + ε)/ε at π = D. π is clipped to [0, D].
    """
    v.check_positive("d", d)
    v.check_nonnegative("eps", eps)
    p = jnp.clip(jnp.asarray(prob), 0.0, d)
    return (p + eps) / (d - p + eps)


def negative_weight_text(prob, d=1.0, eps=1e-2):
    """w⁻(π) = (D − π + ε)/(D + ε): the article's TEXT reading, "weaken high-confidence
    negatives" (§2.2 comment, consistent with §2.1). Elementwise.

    Decreases from 1 at π = 0 to ε/(D + ε) at π = D; bounded in (0, 1], so it cannot blow up.
    The smoothing ε keeps a floor > 0 (no negative is silenced completely, article §4.2).
    """
    v.check_positive("d", d)
    v.check_nonnegative("eps", eps)
    p = jnp.clip(jnp.asarray(prob), 0.0, d)
    return (d - p + eps) / (d + eps)


def negative_weight(prob, *, reading="text", d=1.0, eps=1e-2):
    """Dispatch to `negative_weight_text` (default) or `negative_weight_formula`."""
    if reading == "text":
        return negative_weight_text(prob, d, eps)
    if reading == "formula":
        return negative_weight_formula(prob, d, eps)
    raise CatsimError(
        f"negative reading must be one of {', '.join(NEGATIVE_READINGS)}, got {reading!r}"
    )


def asymmetric_advantages(advantages_N, rewards_N, probs_N, confidence_N=None, *, config=None):
    """GRPO advantages split into the two channels (the default "asym-grpo" composition).

    A_j > 0 (positive channel):  w⁺(r_j)·A_j
    A_j < 0 (negative channel):  w⁻(π_j)·c_j·A_j   (c = confidence weight, 1 if not given)
    A_j = 0: unchanged (0).

    Args:
      advantages_N: [N] group-relative advantages (GRPO/Dr.GRPO, possibly focal-scaled).
      rewards_N: [N] rewards (w⁺ reads them).
      probs_N: [N] the policy probability π of each rollout used by w⁻ — the action probability in
        the simulator; for sequences, e.g. exp(mean token log-prob) (the caller's choice).
      confidence_N: optional [N] confidence weights (e.g. `confidence_weight` averaged per sequence).
      config: AsymmetricConfig (defaults if None).

    Returns:
      [N] advantages.
    """
    cfg = config or AsymmetricConfig()
    v.check_rank("advantages_N", advantages_N, 1)
    v.check_same_shape(
        advantages_N=advantages_N, rewards_N=rewards_N, probs_N=probs_N, confidence_N=confidence_N
    )
    a = jnp.asarray(advantages_N)
    w_pos = positive_weight(rewards_N, cfg.positive_tau)
    w_neg = negative_weight(
        probs_N, reading=cfg.negative_reading, d=cfg.negative_d, eps=cfg.negative_eps
    )
    if confidence_N is not None:
        w_neg = w_neg * jnp.asarray(confidence_N)
    return jnp.where(a > 0, w_pos * a, jnp.where(a < 0, w_neg * a, a))


def asymmetric_reinforce_coefficients(rewards_N, probs_N, confidence_N=None, *, config=None):
    """The article's literal channels, without a group baseline (§2.2):

        coefficient_j = w⁺(r_j)·r_j − w⁻(π_j)·c_j·(1 − r_j),    r ∈ [0, 1]

    used as the advantage of `losses.reinforce_loss`. The article writes the negative channel as
    +w⁻·(1−r)·∇log π; read literally that would RAISE the probability of wrong answers, so the
    minus sign (a penalty) is taken here. Unlike `asymmetric_advantages`, an all-wrong group still
    gets a (negative) signal. [N] -> [N].
    """
    cfg = config or AsymmetricConfig()
    v.check_rank("rewards_N", rewards_N, 1)
    v.check_same_shape(rewards_N=rewards_N, probs_N=probs_N, confidence_N=confidence_N)
    r = jnp.asarray(rewards_N)
    w_neg = negative_weight(
        probs_N, reading=cfg.negative_reading, d=cfg.negative_d, eps=cfg.negative_eps
    )
    if confidence_N is not None:
        w_neg = w_neg * jnp.asarray(confidence_N)
    return positive_weight(r, cfg.positive_tau) * r - w_neg * (1.0 - r)
