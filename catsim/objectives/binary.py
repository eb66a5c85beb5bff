"""Rare-solution advantages on binary (0/1) success indicators, for ONE group of n rollouts:
MaxRL, the pass@k rules (Pass@k Training, PKPO, the best-sample rule) and the baseline-free
signed rules of Zhu et al. (W-REINFORCE, NSR, PSR).

Each rule has a per-sample form on `rewards_N` [N] in {0, 1} and a counts form
`<rule>_counts(num_correct, group_size, ...) -> (A_correct, A_wrong)`: for 0/1 rewards the
advantage of a sample depends on the group only through the count c of correct ones, so the
simulator (which samples counts for N up to 131072) needs just these two numbers. The tests check
that the two forms agree; `catsim.objectives.registry` lists every rule with both forms.

Scale convention: catsim's A_i is the weight of ∇log π(x_i) in the group's loss AVERAGED over its
n samples, (1/n)·Σ_i A_i ∇log π(x_i) (as GRPO's). A paper whose weights s_i enter as a SUM,
Σ_i s_i ∇log π(x_i) (PKPO), is multiplied by n here.

Every rule but the signed ones gives exactly zero to an all-equal group (c = 0 or c = n), in
float32 and float64. The signed rules have no group baseline: an all-wrong group gets −1 on every
sample (pushing wrong answers down is their point).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives.advantages import safe_divide

__all__ = [
    "log_comb_ratio",
    "maxrl", "maxrl_counts",
    "passk_training", "passk_training_counts",
    "pkpo", "pkpo_counts", "PKPO_BASELINES",
    "passk_best", "passk_best_counts",
    "w_reinforce", "w_reinforce_counts",
    "nsr", "nsr_counts",
    "psr", "psr_counts",
]

PKPO_BASELINES = ("loo", "mean")


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
    k = _check_k(k, low=0)
    dtype = jnp.result_type(a, n, float)
    a = jnp.asarray(a, dtype)
    n = jnp.asarray(n, dtype)
    i = jnp.arange(k, dtype=dtype)
    left = n - i  # items left before draw i
    valid = left - a >= 1  # at least one unmarked item left for draw i
    frac = jnp.where(valid, a / jnp.where(left > 0, left, 1.0), 0.0)
    total = jnp.sum(jnp.log1p(-frac))
    return jnp.where(jnp.all(valid), total, -jnp.inf)


def _check_k(k, low: int = 1) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < low:
        raise CatsimError(f"k must be a whole number >= {low}, got {k!r}")
    return int(k)


def _check_binary(rewards_N) -> None:
    v.check_rank("rewards_N", rewards_N, 1)
    r = v.concrete_array(rewards_N)
    if r is not None and r.size and not np.all((r == 0) | (r == 1)):
        raise CatsimError("this rule takes binary rewards in {0, 1} (1 = correct)")


def _counts(num_correct, group_size):
    dtype = jnp.result_type(num_correct, group_size, float)
    return jnp.asarray(num_correct, dtype), jnp.asarray(group_size, dtype), jnp.zeros((), dtype)


def _inactive_zero(c, n, a_c, a_w):
    """Zero for an all-equal group (c = 0 or c = n), which carries no signal."""
    active = (c > 0) & (c < n)
    return jnp.where(active, a_c, 0.0).astype(c.dtype), jnp.where(active, a_w, 0.0).astype(c.dtype)


def _per_sample(counts_fn, rewards_N, **options):
    _check_binary(rewards_N)
    rewards_N = jnp.asarray(rewards_N)
    dtype = jnp.result_type(rewards_N, float)
    correct = rewards_N > 0.5
    a_c, a_w = counts_fn(jnp.sum(correct.astype(dtype)), rewards_N.shape[0], **options)
    return jnp.where(correct, a_c, a_w).astype(dtype)


# --- MaxRL --------------------------------------------------------------------------------------

def maxrl_counts(num_correct, group_size, *, eps=1e-6):
    """MaxRL from counts: A_c = (1 − p̂)/(p̂ + ε), A_w = −p̂/(p̂ + ε), p̂ = c/n; 0 for c ∈ {0, n}."""
    v.check_nonnegative("eps", eps)
    c, n, _ = _counts(num_correct, group_size)
    p = c / n
    return _inactive_zero(c, n, safe_divide(1.0 - p, p + eps), safe_divide(-p, p + eps))


def maxrl(rewards_N, *, eps=1e-6):
    """MaxRL advantage (Maximum-likelihood RL, arXiv 2602.02710): A_i = (r_i − r̄)/(r̄ + ε).
    [N] binary {0, 1} rewards -> [N].

    Dividing by the success rate r̄ = p̂ instead of the std turns the policy gradient into that of
    log p(correct) (a maximum-likelihood objective): a correct sample gets (1 − p̂)/p̂, a wrong one
    −1 (at ε = 0), so rare successes (small p̂) get large credit. Zero for c = 0 and c = n.
    Agrees with prime-rl's `max_rl.py`, SkyRL and the authors' verl fork (n = 1 gives 0 as there).
    """
    return _per_sample(maxrl_counts, rewards_N, eps=eps)


# --- pass@k: Pass@k Training and PKPO ----------------------------------------------------------

def _passk_parts(c, n, k: int):
    """(1 − ρ, q): 1 − ρ = C(n−c, k)/C(n, k) (all k draws wrong), q = C(n−c−1, k−1)/C(n−1, k−1)
    (the k − 1 companions of a wrong sample all wrong)."""
    return jnp.exp(log_comb_ratio(c, n, k)), jnp.exp(log_comb_ratio(c, n - 1, k - 1))


def passk_training_counts(num_correct, group_size, k: int):
    """Pass@k Training from counts: A_c = (1 − ρ)/σ, A_w = (1 − ρ − q)/σ, σ = sqrt(ρ(1 − ρ)).
    Zero for c ∈ {0, n} and whenever n − c < k (every k-subset passes), so for every group at k ≥ n."""
    k = _check_k(k)
    c, n, _ = _counts(num_correct, group_size)
    miss, q = _passk_parts(c, n, k)
    sigma = jnp.sqrt(jnp.clip((1.0 - miss) * miss, 0.0, None))
    return _inactive_zero(c, n, safe_divide(miss, sigma), safe_divide(miss - q, sigma))


def passk_training(rewards_N, k):
    """Pass@k Training's analytical advantage (Chen et al., arXiv 2508.10751, its "analytical
    derivation" of the group advantage). [N] binary {0, 1} rewards, k ≥ 1 -> [N].

    ρ = 1 − C(n−c, k)/C(n, k) is the group's pass@k, σ = sqrt(ρ(1 − ρ)) its std over k-subsets;
    a correct sample (every k-subset holding it passes) gets (1 − ρ)/σ, a wrong one
    (1 − ρ − C(n−c−1, k−1)/C(n−1, k−1))/σ. k = 1 is GRPO with the population std. Zero for c = 0,
    c = n and n − c < k — so a run with k ≥ n trains nothing. Agrees with
    RUCAIBox/Passk_Training `code/passk_adv.py` on every binary group n ≤ 16 (ε aside).
    """
    return _per_sample(passk_training_counts, rewards_N, k=k)


def pkpo_counts(num_correct, group_size, k: int, *, baseline="loo"):
    """PKPO from counts (see `pkpo`): (A_correct, A_wrong).

      baseline="loo", k ≥ 2:  A_c = k·C(n−c, k−1)/C(n−1, k−1),  A_w = 0      (Eq. 33, × n)
      baseline="loo", k = 1:  A_c = (n−c)/(n−1),               A_w = −c/(n−1) (Eq. 26's LOO centring)
      baseline="mean":        A_c = k·(1 − ρ),                 A_w = k·(1 − ρ − q)
    """
    k = _check_k(k)
    if baseline not in PKPO_BASELINES:
        raise CatsimError(f"pkpo baseline must be one of {', '.join(PKPO_BASELINES)}, got {baseline!r}")
    c, n, zero = _counts(num_correct, group_size)
    if baseline == "mean":
        miss, q = _passk_parts(c, n, k)
        return _inactive_zero(c, n, k * miss, k * (miss - q))
    if k == 1:
        return _inactive_zero(c, n, safe_divide(n - c, n - 1.0), safe_divide(-c, n - 1.0))
    # the k − 1 companions of a correct sample, drawn from the other n − 1, all wrong
    alone = jnp.exp(log_comb_ratio(c - 1.0, n - 1.0, k - 1))
    return _inactive_zero(c, n, k * alone, zero)


def pkpo(rewards_N, k, *, baseline="loo"):
    """PKPO's pass@k advantage (Walder & Karkhanis, "Pass@K Policy Optimization", arXiv 2505.15201).
    [N] binary {0, 1} rewards, 1 ≤ k ≤ n -> [N].

    The paper's unbiased estimator of ∇pass@k is Σ_i s_i ∇log π(x_i) with per-sample weights s_i;
    catsim returns A_i = n·s_i (module docstring: catsim averages over the group).

    baseline="loo" (default) — the paper's s^(loo−1) of Eq. (33), the estimator its experiments
      train with: s_i = (1/C(n,k)) Σ_{|I|=k, i∈I} (max_{j∈I} r_j − max_{b∈I∖i} r_b). The baseline
      excludes i, so E[Σ_i s_i ∇log π(x_i)] = ∇pass@k exactly. For 0/1 rewards only a correct
      sample whose k − 1 companions are all wrong adds anything: A_correct = k·C(n−c, k−1)/C(n−1, k−1),
      A_wrong = 0 — no negative credit. At k = n it is non-zero only for c = 1. At k = 1 the
      listing's formula divides by k − 1 = 0; the paper's k_opt = 1 runs use the leave-one-out
      mean centring of its Eq. (26), r_i − mean_{j≠i} r_j, which is what k = 1 gives here.
      Matches the paper's Listing 1 (`sloo_minus_one`) on every binary group n ≤ 16.
    baseline="mean" — rllm's form (PR #743), catsim's default before: k·(σ_i − ρ), σ_i the share of
      the k-subsets holding i that pass, i.e. k·(1 − ρ) for a correct sample and k·(1 − ρ − q) for a wrong one, q = C(n−c−1, k−1)/C(n−1, k−1).
      Centring on the group's own ρ biases it: its expected gradient is (1 − k/n)·∇pass@k, zero at
      k = n; n − c < k gives zeros as well.
    Zero for c = 0 and c = n under both.
    """
    return _per_sample(pkpo_counts, rewards_N, k=k, baseline=baseline)


# --- the best-sample rule -----------------------------------------------------------------------

def passk_best_counts(num_correct, group_size, *, eps=1e-6):
    """The best-sample rule from counts: A_c = 1/(s + ε) when c = 1 else 0, A_w = 0, with the sample
    std s = sqrt(c(n−c)/(n(n−1))). A_c applies to exactly one draw (the single correct one)."""
    v.check_nonnegative("eps", eps)
    c, n, zero = _counts(num_correct, group_size)
    s = jnp.sqrt(jnp.clip(c * (n - c), 0.0, None) / jnp.where(n > 1, n * (n - 1), 1.0))
    return _inactive_zero(c, n, jnp.where(c == 1, safe_divide(jnp.ones((), c.dtype), s + eps), zero), zero)


def passk_best(rewards_N, *, eps=1e-6):
    """The pass@k best-sample rule (arXiv 2503.19595; verl's `grpo_passk` estimator). [N] -> [N].

    Only the group's best sample (the first maximum) gets (r_max − r_2nd)/(std + ε), with the
    sample std (ddof 1, `torch.std`) of the group; every other sample gets 0. With 0/1 rewards it
    is non-zero only when c = 1. Needs n ≥ 2 (verl raises for n < 2). Graded rewards allowed.
    Agrees with verl's `compute_grpo_passk_outcome_advantage` (binary, counts and graded).
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
    value = jnp.where(gap > 0, safe_divide(gap, std + eps), 0.0)
    best = jnp.argmax(rewards_N)
    return jnp.zeros_like(centred).at[best].set(value.astype(centred.dtype))


# --- the signed rules of "The Surprising Effectiveness of Negative Reinforcement" --------------
# Zhu et al., arXiv 2506.01347; code: TianHongZXY/RLVR-Decomposed, verl/trainer/ppo/core_algos.py
# `compute_psr_nsr_outcome_advantage` (advantage = 'positive' | 'negative' | 'weighted'): the
# advantage is the 0/1 reward itself (PSR), reward − 1 (NSR), or λ·reward for a correct sample and
# reward − 1 for a wrong one (W-REINFORCE). No group mean, no std, no inactive-group zero.

def w_reinforce_counts(num_correct, group_size, *, positive_weight=0.1):
    """W-REINFORCE from counts: A_c = λ, A_w = −1, for every c (no baseline)."""
    v.check_nonnegative("positive_weight", positive_weight)
    _, _, zero = _counts(num_correct, group_size)
    return zero + positive_weight, zero - 1.0


def nsr_counts(num_correct, group_size):
    """NSR from counts: A_c = 0, A_w = −1, for every c."""
    _, _, zero = _counts(num_correct, group_size)
    return zero, zero - 1.0


def psr_counts(num_correct, group_size):
    """PSR from counts: A_c = 1, A_w = 0, for every c."""
    _, _, zero = _counts(num_correct, group_size)
    return zero + 1.0, zero


def w_reinforce(rewards_N, *, positive_weight=0.1):
    """W-REINFORCE (arXiv 2506.01347, λ·L_PSR + L_NSR): A = λ for a correct sample, −1 for a wrong
    one, no baseline and no std; λ = 0.1 recommended. [N] binary {0, 1} -> [N].

    An all-wrong group gets −1 on every sample and an all-correct one λ: unlike the group-relative
    rules it learns from every group. (catsim's older `positive_weight` option, λ on the positive
    advantages of a centred rule, is a different rule: see `losses.positive_sample_weight`.)
    """
    return _per_sample(w_reinforce_counts, rewards_N, positive_weight=positive_weight)


def nsr(rewards_N):
    """Negative sample reinforcement (arXiv 2506.01347): A = −1 for a wrong sample, 0 for a
    correct one (W-REINFORCE at λ = 0). [N] binary {0, 1} -> [N]."""
    return _per_sample(nsr_counts, rewards_N)


def psr(rewards_N):
    """Positive sample reinforcement (arXiv 2506.01347): A = 1 for a correct sample, 0 for a wrong
    one (plain REINFORCE on the 0/1 reward, no baseline). [N] binary {0, 1} -> [N]."""
    return _per_sample(psr_counts, rewards_N)
