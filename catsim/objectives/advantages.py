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

import jax
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
    "ADVANTAGES",
]


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
    denom = std + eps
    # An inactive group has centred == 0 exactly (`mean_centred`); guard the 0/0 that ε = 0 gives.
    safe = jnp.where(denom > 0, denom, 1.0)
    return jnp.where(denom > 0, centred / safe, jnp.zeros_like(centred))


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
        denom = std + eps
        safe = jnp.where(denom > 0, denom, 1.0)
        a_correct = jnp.where(denom > 0, a_correct / safe, 0.0)
        a_wrong = jnp.where(denom > 0, a_wrong / safe, 0.0)
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
    denom = std + eps
    safe = jnp.where(denom > 0, denom, 1.0)
    return jnp.where(denom > 0, centred / safe, jnp.zeros_like(centred))


# Name -> f(rewards_N) -> [N] with the defaults above, for CLIs and method tables.
ADVANTAGES = {
    "mean_centred": mean_centred,
    "grpo": grpo,
    "dr_grpo": dr_grpo,
}


# --- rare-solution advantages for binary (0/1) rewards: MaxRL, pass@k (Pass@k Training, PKPO,
# the best-sample rule). Each has a per-sample form on `rewards_N` and a counts form
# (`binary_method_advantages`) that the simulator uses; the tests check the two agree. Every one
# gives exactly zero to an all-equal group (c = 0 or c = n) in float32 and float64.

__all__ += [
    "maxrl",
    "passk_training",
    "pkpo",
    "passk_best",
    "log_comb_ratio",
    "binary_method_advantages",
    "BINARY_METHODS",
]

# Names of the binary-reward advantage rules below (their counts form: `binary_method_advantages`).
BINARY_METHODS = ("maxrl", "passk_training", "pkpo", "passk_best")


def log_comb_ratio(a, n, k: int):
    """log[C(n − a, k) / C(n, k)] = Σ_{i<k} log1p(−a/(n − i)); −inf when n − a < k.

    The probability that k draws without replacement from n items, a of them marked, miss every
    marked one (1 − pass@k). A sum of k log1p terms instead of factorials or gammaln differences,
    so it neither overflows nor cancels: float32 keeps ~k·ulp relative accuracy and n = 131072
    is fine in either precision.

    Args:
      a: [] marked items, 0 ≤ a ≤ n (may be traced). n: [] items (may be traced).
      k: draws, a Python int ≥ 0 (static: it sizes the sum); k = 0 gives 0 (an empty product).
    """
    k = _check_k(k)
    dtype = jnp.result_type(a, n, float)
    a = jnp.asarray(a, dtype)
    n = jnp.asarray(n, dtype)
    i = jnp.arange(k, dtype=dtype)
    left = n - i  # items left before draw i
    valid = left - a >= 1  # at least one unmarked item left for draw i
    frac = jnp.where(valid, a / jnp.where(left > 0, left, 1.0), 0.0)
    total = jnp.sum(jnp.log1p(-frac))
    return jnp.where(jnp.all(valid), total, -jnp.inf)


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise CatsimError(f"k must be a whole number >= 0, got {k!r}")
    return int(k)


def _check_binary(rewards_N) -> None:
    v.check_rank("rewards_N", rewards_N, 1)
    r = v.concrete_array(rewards_N)
    if r is not None and r.size and not np.all((r == 0) | (r == 1)):
        raise CatsimError("these pass@k / MaxRL rules take binary rewards in {0, 1}")


def _safe_div(num, den):
    """num/den where den > 0, else 0 (never NaN)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), jnp.zeros_like(num))


def _passk_parts(num_correct, group_size, k: int):
    """(1 − ρ, q): 1 − ρ = C(n−c, k)/C(n, k) (all k draws wrong), q = C(n−c−1, k−1)/C(n−1, k−1)
    (the k − 1 companions of a wrong sample all wrong)."""
    miss = jnp.exp(log_comb_ratio(num_correct, group_size, k))
    miss_given_wrong = jnp.exp(log_comb_ratio(num_correct, group_size - 1, k - 1))
    return miss, miss_given_wrong


def binary_method_advantages(kind: str, num_correct, group_size, *, k: int = 1, eps=1e-6):
    """(A_correct, A_wrong) of a binary-reward group under `kind`, from the counts c of n.

    With p̂ = c/n, ρ = 1 − C(n−c, k)/C(n, k) the group's unbiased pass@k, q = C(n−c−1, k−1)/C(n−1, k−1):
      maxrl:           A_c = (1 − p̂)/(p̂ + ε),              A_w = −p̂/(p̂ + ε)
      pkpo:            A_c = k·(1 − ρ),                    A_w = k·(1 − ρ − q)
      passk_training:  A_c = (1 − ρ)/σ,                    A_w = (1 − ρ − q)/σ,  σ = sqrt(ρ(1 − ρ))
      passk_best:      A_c = 1/(s + ε) when c = 1 else 0,  A_w = 0,  s = sqrt(c(n−c)/(n(n−1)))
    (passk_best gives its credit to ONE sample, the best; with 0/1 rewards that is the single
    correct one when c = 1, so A_c applies to exactly one draw.) All are zero when c ∈ {0, n};
    passk_training and pkpo are also zero when n − c < k (every k-subset holds a correct sample).

    Args:
      kind: one of BINARY_METHODS. num_correct: [] c (may be traced). group_size: [] n (may be
      traced). k: pass@k's k, a Python int, 1 ≤ k (k ≤ n is the caller's; k > n gives zeros).
      eps: ε ≥ 0 of maxrl and passk_best.
    """
    if kind not in BINARY_METHODS:
        raise CatsimError(f"unknown binary advantage {kind!r}; choose one of {', '.join(BINARY_METHODS)}")
    v.check_nonnegative("eps", eps)
    if _check_k(k) < 1:
        raise CatsimError(f"k must be >= 1, got {k}")
    dtype = jnp.result_type(num_correct, group_size, float)
    c = jnp.asarray(num_correct, dtype)
    n = jnp.asarray(group_size, dtype)
    active = (c > 0) & (c < n)
    zero = jnp.zeros((), dtype)
    if kind == "maxrl":
        p = c / n
        a_c, a_w = _safe_div(1.0 - p, p + eps), _safe_div(-p, p + eps)
    elif kind == "passk_best":
        s = jnp.sqrt(jnp.clip(c * (n - c), 0.0, None) / jnp.where(n > 1, n * (n - 1), 1.0))
        a_c, a_w = jnp.where(c == 1, _safe_div(jnp.ones((), dtype), s + eps), zero), zero
    else:
        miss, q = _passk_parts(c, n, k)
        a_c, a_w = miss, miss - q
        if kind == "pkpo":
            a_c, a_w = k * a_c, k * a_w
        else:
            sigma = jnp.sqrt(jnp.clip((1.0 - miss) * miss, 0.0, None))
            a_c, a_w = _safe_div(a_c, sigma), _safe_div(a_w, sigma)
    return jnp.where(active, a_c, zero), jnp.where(active, a_w, zero)


def _per_sample(kind: str, rewards_N, *, k: int = 1, eps=1e-6):
    _check_binary(rewards_N)
    rewards_N = jnp.asarray(rewards_N)
    dtype = jnp.result_type(rewards_N, float)
    correct = rewards_N > 0.5
    c = jnp.sum(correct.astype(dtype))
    a_c, a_w = binary_method_advantages(kind, c, rewards_N.shape[0], k=k, eps=eps)
    return jnp.where(correct, a_c, a_w)


def maxrl(rewards_N, *, eps=1e-6):
    """MaxRL advantage (Maximum-likelihood RL, arXiv 2602.02710; the issue's table form):
    A_i = (r_i − r̄)/(r̄ + ε). [N] binary {0, 1} rewards -> [N].

    Dividing by the success rate r̄ = p̂ instead of the std turns the policy gradient into that of
    log p(correct) (a maximum-likelihood objective): a correct sample gets (1 − p̂)/p̂, a wrong one
    −1 (at ε = 0), so rare successes (small p̂) get large credit. Zero for c = 0 and c = n.
    """
    return _per_sample("maxrl", rewards_N, eps=eps)


def passk_training(rewards_N, k):
    """Pass@k Training's analytical advantage (Chen et al., arXiv 2508.10751, its
    "analytical derivation" of the group advantage; equation numbers not checked here).
    [N] binary {0, 1} rewards, k ≥ 1 -> [N].

    ρ = 1 − C(n−c, k)/C(n, k) is the group's pass@k, σ = sqrt(ρ(1 − ρ)) its std over k-subsets;
    a correct sample (every k-subset holding it passes) gets (1 − ρ)/σ, a wrong one
    (1 − ρ − C(n−c−1, k−1)/C(n−1, k−1))/σ. k = 1 is GRPO with the population std. Zero for c = 0,
    c = n and n − c < k.
    """
    return _per_sample("passk_training", rewards_N, k=k)


def pkpo(rewards_N, k):
    """PKPO's unbiased pass@k credit, mean-centred (Walder & Karkhanis, arXiv 2505.15201: its
    unbiased binary-reward pass@k estimator and the per-sample gradient weights it implies). [N] binary {0, 1} -> [N].

    The unbiased estimator ρ = (1/C(n,k)) Σ_{|S|=k} max_{i∈S} r_i has gradient
    (1/n) Σ_i k·s_i ∇log π(x_i), with s_i = (Σ_{S∋i} max r_S)/C(n−1, k−1) the share of k-subsets
    holding i that pass: 1 for a correct sample, 1 − C(n−c−1, k−1)/C(n−1, k−1) for a wrong one.
    Σ_i s_i/n = ρ, so the mean-centred weights are k·(s_i − ρ). k = 1 is the mean-centred reward
    r_i − r̄. Zero for c = 0, c = n and n − c < k.
    """
    return _per_sample("pkpo", rewards_N, k=k)


def passk_best(rewards_N, *, eps=1e-6):
    """The pass@k best-sample rule (arXiv 2503.19595; verl's `grpo_passk` estimator). [N] -> [N].

    Only the group's best sample (the first maximum) gets (r_max − r_2nd)/(std + ε), with the
    sample std (ddof 1, `torch.std`) of the group; every other sample gets 0. With 0/1 rewards it
    is non-zero only when c = 1. Needs n ≥ 2 (verl raises for n < 2). Graded rewards allowed.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    v.check_nonnegative("eps", eps)
    rewards_N = jnp.asarray(rewards_N)
    n = rewards_N.shape[0]
    if n < 2:
        raise CatsimError("the best-sample pass@k rule needs a group of at least 2 rollouts")
    top2 = jax.lax.top_k(rewards_N, 2)[0]
    gap = top2[0] - top2[1]
    centred = rewards_N - jnp.mean(rewards_N)
    std = jnp.sqrt(jnp.sum(centred**2) / (n - 1))
    value = jnp.where(gap > 0, _safe_div(gap, std + eps), 0.0)
    best = jnp.argmax(rewards_N)
    return jnp.zeros_like(centred).at[best].set(value.astype(centred.dtype))
