"""Group-relative advantages for ONE group of N rollouts of one prompt (callers `vmap` over groups).

Shapes: `rewards_N` is the rewards of the N rollouts of one prompt. Every function is pure,
jittable and differentiable where that makes sense; hyper-parameters that are Python numbers are
validated eagerly (`CatsimError`), traced ones are taken as given.

Paper references (F-GRPO, arXiv 2602.06717):
  * success rate μ̂ = (R̄ − Rw)/(Rc − Rw) = X/N for binary rewards (§4);
  * mean-centred rewards r̃_j = R_j − R̄, no std (App. J, the categorical simulation);
  * GRPO A_j = (R_j − R̄)/(std(R) + ε) (App. B); Dr.GRPO drops the std (Liu et al. 2025);
  * a group is "active" when its rewards are not all equal (Lemma 3.1): an inactive group gives
    zero advantage under every rule here, which is what DAPO's dynamic sampling filters out.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

__all__ = [
    "success_rate",
    "is_active",
    "mean_centred",
    "grpo",
    "dr_grpo",
    "binary_group_advantages",
    "batch_renormalise",
    "safe_divide",
]


def safe_divide(num, den):
    """num/den where den > 0, else 0 (never NaN): the one guard of every std or rate division."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.zeros_like(num))


def success_rate(rewards_N, *, reward_correct=1.0, reward_wrong=0.0):
    """μ̂ = (R̄ − Rw)/(Rc − Rw) for one group (F-GRPO §4).

    Args:
      rewards_N: [N] rewards of one group, graded rewards allowed in [Rw, Rc].
      reward_correct: Rc, the reward of a fully correct rollout.
      reward_wrong: Rw < Rc, the reward of a wrong rollout (may be negative, e.g. −1 in App. J).

    Returns:
      [] the success rate, clipped to [0, 1] so that rounding of graded rewards cannot push the
      focal weight (1 − μ̂)^γ outside [0, 1]. For binary rewards it equals X/N exactly.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    v.check_reward_levels(reward_correct, reward_wrong)
    _check_rewards_in_range(rewards_N, reward_correct, reward_wrong)
    rewards_N = jnp.asarray(rewards_N)
    mean = jnp.mean(rewards_N)
    rate = (mean - reward_wrong) / (reward_correct - reward_wrong)
    return jnp.clip(rate, 0.0, 1.0)


def _check_rewards_in_range(rewards_N, reward_correct, reward_wrong) -> None:
    """Concrete rewards must lie in [Rw, Rc] (up to rounding); traced ones cannot be checked."""
    r = v.concrete_array(rewards_N)
    rc, rw = v.concrete_float(reward_correct), v.concrete_float(reward_wrong)
    if r is None or rc is None or rw is None or r.size == 0:
        return
    slack = 1e-6 * max(1.0, abs(rc), abs(rw))
    if not np.all(np.isfinite(r)):
        raise CatsimError("rewards must be finite")
    if r.min() < rw - slack or r.max() > rc + slack:
        raise CatsimError(
            f"rewards must lie in [reward_wrong={rw}, reward_correct={rc}], "
            f"got values in [{r.min():g}, {r.max():g}]"
        )


def is_active(rewards_N):
    """[] bool: True when the group's rewards are not all equal (it carries a learning signal).

    Lemma 3.1 calls a binary group active when it holds at least one correct and one wrong
    rollout; for graded rewards this is "max > min".
    """
    v.check_rank("rewards_N", rewards_N, 1)
    rewards_N = jnp.asarray(rewards_N)
    return jnp.max(rewards_N) > jnp.min(rewards_N)


def mean_centred(rewards_N):
    """r̃_j = R_j − R̄ (paper App. J; also Dr.GRPO's advantage). [N] -> [N]. Sums to zero.

    An inactive group (max R = min R) gets exact zeros: R − mean(R) alone rounds to ~1e-8 when the
    common reward is not exact in binary (0.1, 0.37, DAPO's overlong shaping), and dividing that
    residue by an equally tiny std would give ±1 to every rollout of a group with no signal.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    rewards_N = jnp.asarray(rewards_N)
    centred = rewards_N - jnp.mean(rewards_N)
    if rewards_N.shape[0] == 0:
        return centred
    return jnp.where(jnp.max(rewards_N) > jnp.min(rewards_N), centred, jnp.zeros_like(centred))


def grpo(rewards_N, *, eps=1e-6, ddof=0):
    """GRPO advantage A_j = (R_j − R̄)/(std(R) + ε) for one group. [N] -> [N].

    Args:
      rewards_N: [N] rewards of one group.
      eps: ε ≥ 0 added to the std. ε = 0 gives the exact std-normalised advantage of the theory
        (THEORY.md §2); an all-equal group then gets zeros (never NaN).
      ddof: 0 = population std (the paper's analysis, mean|A| = 2·sqrt(μ(1−μ)) for binary
        rewards); 1 = sample std (what `torch.std` and TRL use by default).

    Returns:
      [N] advantages; zeros for an inactive group.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    v.check_nonnegative("eps", eps)
    if ddof not in (0, 1):
        raise CatsimError(f"ddof must be 0 (population std) or 1 (sample std), got {ddof}")
    centred = mean_centred(rewards_N)
    n = centred.shape[0]
    if ddof == 1 and n < 2:
        raise CatsimError("the sample std (ddof=1) needs a group of at least 2 rollouts")
    std = jnp.sqrt(jnp.sum(centred**2) / (n - ddof))
    # An inactive group has centred == 0 exactly (`mean_centred`); guard the 0/0 that ε = 0 gives.
    return safe_divide(centred, std + eps)


def dr_grpo(rewards_N):
    """Dr.GRPO advantage (Liu et al. 2025, "Understanding R1-Zero-like training"): R_j − R̄.

    Identical to `mean_centred`; named separately so a method table reads like the papers.
    Dr.GRPO also replaces the per-sequence length normaliser, see `losses.token_sum_constant`.
    """
    return mean_centred(rewards_N)


def binary_group_advantages(
    num_correct, group_size, *, reward_correct=1.0, reward_wrong=0.0, normalise_std=False, eps=0.0
):
    """Advantage of a correct and of a wrong rollout in a binary-reward group, from counts only.

    For rewards in {Rw, Rc} the advantage depends on the group only through X = num_correct, so a
    simulator that samples counts (large N) needs just these two numbers. With μ̂ = X/N:
      mean-centred:   A_c = (Rc − Rw)(1 − μ̂),   A_w = −(Rc − Rw) μ̂;
      std-normalised: divide both by std + ε, std = (Rc − Rw)·sqrt(μ̂(1 − μ̂)) (population std).

    Args:
      num_correct: [] X, 0 ≤ X ≤ N (int or float, may be traced).
      group_size: N ≥ 1 (Python int or traced).
      normalise_std: False = mean-centred (App. J / Dr.GRPO), True = GRPO.
      eps: ε ≥ 0 for the GRPO denominator.

    Returns:
      (A_c, A_w): two [] arrays; both zero when X ∈ {0, N}.
    """
    v.check_reward_levels(reward_correct, reward_wrong)
    v.check_nonnegative("eps", eps)
    n = v.concrete_float(group_size)
    if n is not None and not (n >= 1 and n == int(n)):
        raise CatsimError(f"group_size must be a whole number >= 1, got {group_size}")
    x = v.concrete_float(num_correct)
    if x is not None and n is not None and not (0 <= x <= n):
        raise CatsimError(f"num_correct must lie in [0, group_size={int(n)}], got {x}")
    count = jnp.asarray(num_correct, dtype=jnp.result_type(float))
    mu = count / group_size
    spread = reward_correct - reward_wrong
    a_correct = spread * (1.0 - mu)
    a_wrong = -spread * mu
    if normalise_std:
        std = spread * jnp.sqrt(jnp.clip(mu * (1.0 - mu), 0.0, None))
        a_correct, a_wrong = safe_divide(a_correct, std + eps), safe_divide(a_wrong, std + eps)
    # An inactive group (X = 0 or X = N) carries no signal: both are exactly 0 (like `mean_centred`).
    active = (count > 0) & (count < group_size)
    return jnp.where(active, a_correct, 0.0), jnp.where(active, a_wrong, 0.0)


def batch_renormalise(advantages, mask=None, *, eps=1e-6, centre=False):
    """Re-normalise advantages over a whole batch of groups (REINFORCE++-style global scaling).

    A = (A − m)/(std_batch + ε) where std_batch and m are computed over the valid entries of the
    batch (m = 0 unless `centre`). Group-relative advantages already have zero mean per group,
    so the default only rescales; `centre=True` also removes the batch mean.

    Args:
      advantages: [...] advantages of any shape (e.g. [B, N] per rollout or [B, T] per token).
      mask: optional [...] of the same shape, 1 for valid entries; invalid entries come back 0.
      eps: ε ≥ 0 added to the batch std.
      centre: subtract the batch mean as well.

    Returns:
      [...] array of the input's shape. An all-zero batch stays all-zero.
    """
    v.check_nonnegative("eps", eps)
    advantages = jnp.asarray(advantages)
    if mask is None:
        mask = jnp.ones_like(advantages)
    v.check_same_shape(advantages=advantages, mask=mask)
    mask = jnp.asarray(mask, dtype=advantages.dtype)
    count = jnp.maximum(jnp.sum(mask), 1.0)
    mean = jnp.sum(advantages * mask) / count if centre else 0.0
    centred = (advantages - mean) * mask
    std = jnp.sqrt(jnp.sum(centred**2) / count)
    return safe_divide(centred, std + eps)
