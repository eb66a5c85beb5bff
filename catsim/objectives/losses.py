"""Policy-gradient surrogate losses, regularisers and their aggregation — shared by the categorical
simulator and the LLM trainer.

Every per-token function is ELEMENTWISE: it takes arrays of one common shape and returns the
per-token LOSS (to minimise; the negative of the paper's objective) of that shape. The same call
serves both users:

  * categorical simulator: one "token" per sample. `logp_N = action_log_probs(logits_V, actions_N)`,
    loss terms [N], then `token_mean(terms_N)` = (1/N)·Σ_j (the paper's 1/N). With sample counts
    c_V instead of draws, `token_mean(terms_V, counts_V)` is the same number (repeats counted).
  * transformer trainer: per-token log-probs [B, T] with a response mask [B, T], then
    `token_mean` (GRPO/DAPO/CISPO in the paper, App. B), `sequence_mean` (original GRPO), or
    `token_sum_constant` (Dr.GRPO).

Legend: V actions/vocabulary, N rollouts in a group, B sequences, T tokens. `logp` = log π_θ(o)
under the parameters being optimised, `old_logp` = log π_old(o) of the behaviour policy that
sampled o (PPO epochs), `ref_logp` = log π_ref(o) of a frozen reference (KL penalty).

Gradients (checked in tests/test_objectives_losses.py on a 6-action softmax, p = softmax(z)):
  linear surrogate (App. J, eq. 5):  −∇_z (1/N)Σ_j w_j p_{o_j}      = −(1/N)Σ_j w_j p_{o_j}(e_{o_j} − p)
  REINFORCE:                          −∇_z (1/N)Σ_j w_j log p_{o_j}  = −(1/N)Σ_j w_j (e_{o_j} − p)
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

__all__ = [
    "action_log_probs",
    "linear_prob_surrogate_loss",
    "reinforce_loss",
    "ppo_clip_loss",
    "dapo_clip_loss",
    "cispo_loss",
    "ppo_clip_fractions",
    "cispo_clip_fraction",
    "kl_k1",
    "kl_k3",
    "kl_k3_bias_corrected",
    "categorical_kl",
    "entropy",
    "token_mean",
    "sequence_mean",
    "token_sum_constant",
    "SURROGATES",
]


def action_log_probs(logits, actions):
    """log softmax(logits)[action]: the log-probabilities of chosen actions/tokens.

    Args:
      logits: [V] (one categorical policy, shared by all draws) or [..., V] (one distribution per
        position, e.g. [B, T, V]).
      actions: int array. With logits [V], any shape (e.g. [N] draws). With logits [..., V], the
        leading shape [...] (e.g. [B, T] tokens).

    Returns:
      float array of `actions`' shape.
    """
    logits = jnp.asarray(logits)
    actions = jnp.asarray(actions)
    log_p = jax.nn.log_softmax(logits, axis=-1)
    if logits.ndim == 1:
        return log_p[actions]
    if logits.shape[:-1] != actions.shape:
        raise CatsimError(
            f"actions shape {actions.shape} must equal logits shape without the last axis "
            f"{logits.shape[:-1]}"
        )
    return jnp.take_along_axis(log_p, actions[..., None], axis=-1)[..., 0]


# --- per-token surrogate losses (elementwise; negative objectives) ---


def linear_prob_surrogate_loss(logp, advantages):
    """−A·π(o): the paper's linear probability surrogate (App. J; BroRL; gradient = eq. 5).

    Ascending (1/N)Σ_j r̃_j p_{o_j} moves logits by Δz_i = (η/N)·Σ_j r̃_j p_{o_j}(δ_{i o_j} − p_i),
    which for distinct sampled actions is eq. 5's (η/N)·p_i(R_i − S_R) (Prop. 3.2 holds for this
    rule only). `advantages` are treated as constants.
    """
    v.check_same_shape(logp=logp, advantages=advantages)
    return -jax.lax.stop_gradient(advantages) * jnp.exp(logp)


def reinforce_loss(logp, advantages):
    """−A·log π(o): log-prob REINFORCE (the policy gradient of GRPO at ratio 1)."""
    v.check_same_shape(logp=logp, advantages=advantages)
    return -jax.lax.stop_gradient(advantages) * logp


def ppo_clip_loss(logp, old_logp, advantages, *, clip_low=0.2, clip_high=0.2, clip_ratio_c=None):
    """PPO/GRPO clipped surrogate −min(ρA, clip(ρ, 1−ε_low, 1+ε_high)·A), ρ = π/π_old (App. B).

    GRPO uses ε_low = ε_high = 0.2; DAPO's clip-higher uses (0.2, 0.28) (`dapo_clip_loss`).
    At ρ = 1 (first PPO epoch, on-policy) the value and gradient equal `reinforce_loss`'s.

    `clip_ratio_c` = c > 1 switches on the dual clip (Ye et al. 2020, "Mastering Complex Control
    in MOBA Games"; verl's `clip_ratio_c`, default 3 there): for A < 0 the loss is bounded by −c·A,
    min(−c·A, −min(ρA, clip(ρ)A)), so a token with a huge ratio and a negative advantage cannot
    dominate the batch (its gradient is zero beyond ρ > c). None (the default) = off, as in TRL.
    """
    v.check_same_shape(logp=logp, old_logp=old_logp, advantages=advantages)
    v.check_nonnegative("clip_low", clip_low)
    v.check_nonnegative("clip_high", clip_high)
    check_clip_ratio_c(clip_ratio_c)
    adv = jax.lax.stop_gradient(advantages)
    ratio = jnp.exp(logp - jax.lax.stop_gradient(old_logp))
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = -jnp.minimum(ratio * adv, clipped * adv)
    if clip_ratio_c is None:
        return loss
    return jnp.where(adv < 0, jnp.minimum(-clip_ratio_c * adv, loss), loss)


def check_clip_ratio_c(clip_ratio_c) -> None:
    """The dual clip's c is None (off) or a number > 1 (verl asserts the same)."""
    if clip_ratio_c is not None:
        c = v.concrete_float(clip_ratio_c)
        if c is not None and not c > 1.0:
            raise CatsimError(f"clip_ratio_c (the dual clip's c) must be > 1, got {clip_ratio_c}")


def dapo_clip_loss(logp, old_logp, advantages, *, clip_low=0.2, clip_high=0.28, clip_ratio_c=None):
    """DAPO clip-higher: `ppo_clip_loss` with the decoupled bounds (0.2, 0.28) (Yu et al. 2025)."""
    return ppo_clip_loss(logp, old_logp, advantages, clip_low=clip_low, clip_high=clip_high,
                         clip_ratio_c=clip_ratio_c)


def cispo_loss(logp, old_logp, advantages, *, clip_low=1.0, clip_high=5.0):
    """CISPO: −sg(clip(ρ, 1−ε_low, 1+ε_high))·A·log π(o) (MiniMax-M1; F-GRPO App. B bounds 1.0/5.0).

    Unlike PPO clipping, no token loses its gradient: only the importance weight is clipped and
    held constant. With ε_low = 1.0 the lower bound is 0 (no lower clipping).
    """
    v.check_same_shape(logp=logp, old_logp=old_logp, advantages=advantages)
    v.check_nonnegative("clip_low", clip_low)
    v.check_nonnegative("clip_high", clip_high)
    ratio = jnp.exp(logp - old_logp)
    weight = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high))
    return -weight * jax.lax.stop_gradient(advantages) * logp


def ppo_clip_fractions(logp, old_logp, advantages, *, clip_low=0.2, clip_high=0.2):
    """Where PPO clipping is active, i.e. the token's gradient is zeroed. Elementwise.

    Returns:
      (low, high): float 0/1 arrays. `low` = ρ < 1−ε_low with A < 0; `high` = ρ > 1+ε_high with
      A > 0. Aggregate with `token_mean(low, mask)` for the clip fractions to log.
    """
    v.check_same_shape(logp=logp, old_logp=old_logp, advantages=advantages)
    ratio = jnp.exp(logp - old_logp)
    low = (ratio < 1.0 - clip_low) & (advantages < 0)
    high = (ratio > 1.0 + clip_high) & (advantages > 0)
    dtype = jnp.result_type(float)
    return low.astype(dtype), high.astype(dtype)


def cispo_clip_fraction(logp, old_logp, *, clip_low=1.0, clip_high=5.0):
    """Where CISPO's importance weight is clipped (ρ outside [1−ε_low, 1+ε_high]). Elementwise 0/1."""
    v.check_same_shape(logp=logp, old_logp=old_logp)
    ratio = jnp.exp(logp - old_logp)
    clipped = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
    return clipped.astype(jnp.result_type(float))


# --- regularisers ---


def kl_k1(logp, ref_logp):
    """k1 estimator of KL(π‖π_ref) per sampled token: log π(o) − log π_ref(o) (o ~ π). Unbiased,
    can be negative per token. Loss term: β·kl_k1."""
    v.check_same_shape(logp=logp, ref_logp=ref_logp)
    return logp - jax.lax.stop_gradient(ref_logp)


def kl_k3(logp, ref_logp):
    """k3 estimator (Schulman 2020; GRPO's KL): π_ref/π − log(π_ref/π) − 1 ≥ 0 per sampled token."""
    v.check_same_shape(logp=logp, ref_logp=ref_logp)
    log_ratio = jax.lax.stop_gradient(ref_logp) - logp
    return jnp.expm1(log_ratio) - log_ratio


def kl_k3_bias_corrected(logp, old_logp, ref_logp):
    """k3 times the importance ratio ρ = π/π_old: the KL estimate of tokens sampled from π_old
    (DeepSeek-V3.2 §"unbiased KL estimate"; TRL's `use_bias_correction_kl`). ρ is NOT held
    constant, as in TRL, so the gradient is ∇(ρ·k3). Equals `kl_k3` on-policy in value (ρ = 1)."""
    v.check_same_shape(logp=logp, old_logp=old_logp, ref_logp=ref_logp)
    return kl_k3(logp, ref_logp) * jnp.exp(logp - jax.lax.stop_gradient(old_logp))


def categorical_kl(logits, ref_logits):
    """Exact KL(softmax(logits) ‖ softmax(ref_logits)) over the last axis: [..., V] -> [...].

    For the simulator, which can afford the full sum over V instead of a sampled estimator.
    """
    v.check_same_shape(logits=logits, ref_logits=ref_logits)
    log_p = jax.nn.log_softmax(logits, axis=-1)
    log_q = jax.nn.log_softmax(jax.lax.stop_gradient(ref_logits), axis=-1)
    return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)


def entropy(logits):
    """Shannon entropy (nats) of softmax(logits) over the last axis: [..., V] -> [...].

    Entropy bonus: add −coef·entropy to the loss (the paper tunes coef in {1e-4, 1e-3}).
    """
    log_p = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)


# --- aggregation ---


def token_mean(per_token, mask=None):
    """Σ mask·loss / Σ mask over ALL entries (token-mean; DAPO, the paper's App. B). [...] -> [].

    `mask` may hold non-negative weights, e.g. sample counts: `token_mean(loss_V, counts_V)` equals
    the per-draw mean (1/N)Σ_j loss_{o_j}. An all-zero mask gives 0.
    """
    per_token = jnp.asarray(per_token)
    if mask is None:
        return jnp.mean(per_token)
    v.check_same_shape(per_token=per_token, mask=mask)
    mask = jnp.asarray(mask, dtype=per_token.dtype)
    return jnp.sum(per_token * mask) / jnp.maximum(jnp.sum(mask), jnp.finfo(per_token.dtype).tiny)


def sequence_mean(per_token_BxT, mask_BxT):
    """Mean over sequences of each sequence's token mean (original GRPO, 1/|o_i| per sequence).

    [B, T], [B, T] -> []. Sequences without valid tokens are left out of the outer mean.
    """
    v.check_rank("per_token_BxT", per_token_BxT, 2)
    v.check_same_shape(per_token_BxT=per_token_BxT, mask_BxT=mask_BxT)
    mask = jnp.asarray(mask_BxT, dtype=jnp.asarray(per_token_BxT).dtype)
    lengths = jnp.sum(mask, axis=-1)
    per_seq = jnp.sum(per_token_BxT * mask, axis=-1) / jnp.maximum(lengths, 1.0)
    has_tokens = (lengths > 0).astype(per_seq.dtype)
    return jnp.sum(per_seq * has_tokens) / jnp.maximum(jnp.sum(has_tokens), 1.0)


def token_sum_constant(per_token_BxT, mask_BxT, max_length):
    """Dr.GRPO aggregation: Σ mask·loss / (B·max_length), a length-independent constant normaliser.

    [B, T], [B, T], int -> []. `max_length` is the generation budget (≥ 1), not the batch's T.
    """
    v.check_rank("per_token_BxT", per_token_BxT, 2)
    v.check_same_shape(per_token_BxT=per_token_BxT, mask_BxT=mask_BxT)
    v.check_positive("max_length", max_length)
    mask = jnp.asarray(mask_BxT, dtype=jnp.asarray(per_token_BxT).dtype)
    batch = per_token_BxT.shape[0]
    return jnp.sum(per_token_BxT * mask) / (batch * max_length)


def _linear(logp, old_logp, advantages):
    del old_logp
    return linear_prob_surrogate_loss(logp, advantages)


def _reinforce(logp, old_logp, advantages):
    del old_logp
    return reinforce_loss(logp, advantages)


# Uniform signature (logp, old_logp, advantages) -> per-token loss, with the paper's defaults,
# for CLIs and method tables. Each entry is one of the functions above, nothing more.
SURROGATES = {
    "linear": _linear,
    "reinforce": _reinforce,
    "grpo": ppo_clip_loss,
    "dapo": dapo_clip_loss,
    "cispo": cispo_loss,
}
# The GRPO family's clipped surrogates (GRPO, DAPO, CISPO): the losses whose F- variants the F-GRPO
# paper defines (§4, A^F = (1 − μ̂)^γ·A^GRPO), hence the method names f-grpo, f-dapo, f-cispo.
CLIPPED = tuple(name for name, loss in SURROGATES.items() if "clip_high" in inspect.signature(loss).parameters)


# --- catsim's positive-sample weight λ (a variant; the published W-REINFORCE is binary.w_reinforce) ---

__all__ += ["positive_sample_weight"]


def positive_sample_weight(advantages, weight=0.1):
    """Per-sample loss weight λ on positive-advantage samples, 1 on the others: catsim's variant.

    Applied to a group-relative rule's advantages (e.g. GRPO's centred ones) this down-weights the
    positive side as Zhu et al. (arXiv 2506.01347) do with λ = 0.1 — but their W-REINFORCE has no
    group baseline (`catsim.objectives.binary.w_reinforce`); this composition is not it. Multiply the per-token loss
    (or, equivalently for every surrogate here, which are all positively homogeneous in A, the
    advantages) by this. A > 0 marks a positive sample; A = 0 (an inactive group) stays 0.
    Elementwise: [...] -> [...]. λ = 1 is the plain loss, λ = 0 keeps only the negative advantages.
    """
    v.check_nonnegative("weight", weight)
    advantages = jnp.asarray(advantages)
    return jnp.where(advantages > 0, jnp.asarray(weight, advantages.dtype), jnp.ones_like(advantages))
