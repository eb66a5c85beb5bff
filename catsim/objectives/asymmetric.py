"""Asymmetric, confidence-weighted GRPO (the second seed article; THEORY.md §7; issue 9).

A blog-level method without a paper (seeds/asymmetric-grpo-article.zh.txt). Each component is a
small pure function so that any of them can be switched on GRPO / F-GRPO on its own; the
ambiguities of the article are explicit arguments, and docs/asymmetric-grpo.md records the
readings chosen here and why. Per-group functions take ONE group of N rollouts (callers vmap).

Components (article section → function):
  2.1 confidence weight b + (1−b)·sigmoid(−KL):   kl_uniform_to_policy, kl_policy_to_uniform,
                                                   confidence_weight_from_kl, confidence_weight
  2.2 asymmetric channels w⁺, w⁻:                  positive_weight, negative_weight_formula,
                                                   negative_weight_text, negative_weight,
                                                   asymmetric_advantages,
                                                   asymmetric_reinforce_coefficients
  2.3 mixed groups (top-k positives, near/far negatives): mixed_group_weights
      distances (pluggable):                       kl_divergence, mean_token_distribution,
                                                   pairwise_kl, edit_distance,
                                                   pairwise_edit_distance, python_ast_edit_distance,
                                                   pairwise_abs_difference
  3.1 rollout temperature:                         cosine_temperature, stepwise_temperature
  3.2 batch recomposition by number of positives:  recompose_group
  3.3 dual-threshold gradient clipping:            catsim.objectives.grad_clip.dual_threshold_clip
  4.2 safeguards:                                  smoothing ε in negative_weight_*,
                                                   collapse_warning, stagnation_warning
"""

from __future__ import annotations

import ast
import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

__all__ = [
    "AsymmetricConfig",
    "kl_uniform_to_policy",
    "kl_policy_to_uniform",
    "confidence_weight_from_kl",
    "confidence_weight",
    "positive_weight",
    "negative_weight_formula",
    "negative_weight_text",
    "negative_weight",
    "asymmetric_advantages",
    "asymmetric_reinforce_coefficients",
    "kl_divergence",
    "mean_token_distribution",
    "pairwise_kl",
    "edit_distance",
    "pairwise_edit_distance",
    "python_ast_edit_distance",
    "pairwise_abs_difference",
    "mixed_group_weights",
    "recompose_group",
    "cosine_temperature",
    "stepwise_temperature",
    "collapse_warning",
    "stagnation_warning",
]

KL_DIRECTIONS = ("uniform_to_policy", "policy_to_uniform")
NEGATIVE_READINGS = ("text", "formula")


@dataclasses.dataclass(frozen=True)
class AsymmetricConfig:
    """Hyper-parameters of asymmetric GRPO, with the defaults chosen in docs/asymmetric-grpo.md."""

    baseline: float = 0.3  # b in b + (1−b)·sigmoid(−KL) (article §2.1 code)
    kl_direction: str = "uniform_to_policy"  # article's code: KL(uniform‖p); or "policy_to_uniform"
    positive_tau: float = 1.0  # τ in w⁺(r) = min(1, r/τ); a reward scale, NOT the temperature
    negative_reading: str = "text"  # "text": w⁻ falls with π (article's words); "formula": grows
    negative_d: float = 1.0  # D in w⁻; probabilities live in [0, 1] so D = 1 (odds for "formula")
    negative_eps: float = 1e-2  # ε smoothing in w⁻ (article §4.2 against reward collapse)
    top_k: int = 1  # mixed groups: how many positives are amplified (article gives no number)
    amplify: float = 1.5  # mixed groups: factor on the top-k positives (article gives no number)
    delta: float = 2.0  # mixed groups / clustering: distance threshold δ (article §5.1, geometry)
    rich_positives: int = 3  # recomposition: ≥ this many positives → keep only the best positive
    top_negatives: int = (
        3  # recomposition: 1…rich−1 positives → all positives + this many negatives
    )

    def __post_init__(self):
        v.check_in_closed("baseline", self.baseline, 0.0, 1.0)
        if self.kl_direction not in KL_DIRECTIONS:
            raise CatsimError(
                f"kl_direction must be one of {', '.join(KL_DIRECTIONS)}, got {self.kl_direction!r}"
            )
        if self.negative_reading not in NEGATIVE_READINGS:
            raise CatsimError(
                f"negative_reading must be one of {', '.join(NEGATIVE_READINGS)}, "
                f"got {self.negative_reading!r}"
            )
        v.check_positive("positive_tau", self.positive_tau)
        v.check_positive("negative_d", self.negative_d)
        v.check_nonnegative("negative_eps", self.negative_eps)
        v.check_nonnegative("amplify", self.amplify)
        v.check_nonnegative("delta", self.delta)
        for name in ("top_k", "rich_positives", "top_negatives"):
            value = getattr(self, name)
            if int(value) != value or value < 0:
                raise CatsimError(f"{name} must be a whole number >= 0, got {value}")
        if self.rich_positives < 1:
            raise CatsimError(f"rich_positives must be >= 1, got {self.rich_positives}")


# --- 2.1 confidence weight ---


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


# --- 2.2 asymmetric channels ---


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


# --- distances between rollouts (pluggable: the selection functions take a matrix) ---


def kl_divergence(p, q, eps=1e-12):
    """KL(p‖q) = Σ p (log p − log q) over the last axis, with q floored at ε: [..., V] -> [...]."""
    p = jnp.asarray(p)
    q = jnp.maximum(jnp.asarray(q), eps)
    safe_p = jnp.where(p > 0, p, 1.0)
    return jnp.sum(jnp.where(p > 0, p * (jnp.log(safe_p) - jnp.log(q)), 0.0), axis=-1)


def mean_token_distribution(logits_TxV, mask_T=None):
    """A sequence's token distribution: the mean of softmax(logits_t) over valid positions. [V]."""
    v.check_rank("logits_TxV", logits_TxV, 2)
    probs = jax.nn.softmax(logits_TxV, axis=-1)
    if mask_T is None:
        return jnp.mean(probs, axis=0)
    mask = jnp.asarray(mask_T, dtype=probs.dtype)
    return jnp.sum(probs * mask[:, None], axis=0) / jnp.maximum(jnp.sum(mask), 1.0)


def pairwise_kl(dists_NxV, eps=1e-12):
    """M[i, j] = KL(d_i ‖ d_j) for N distributions: [N, V] -> [N, N]."""
    v.check_rank("dists_NxV", dists_NxV, 2)
    d = jnp.asarray(dists_NxV)
    return jax.vmap(lambda p: jax.vmap(lambda q: kl_divergence(p, q, eps))(d))(d)


def edit_distance(a_T, b_T, len_a=None, len_b=None):
    """Levenshtein distance between two int sequences (padded to any length; jittable). [].

    Args:
      a_T, b_T: [Ta], [Tb] token ids.
      len_a, len_b: valid lengths (default: the full arrays).
    """
    v.check_rank("a_T", a_T, 1)
    v.check_rank("b_T", b_T, 1)
    a, b = jnp.asarray(a_T), jnp.asarray(b_T)
    len_a = a.shape[0] if len_a is None else len_a
    len_b = b.shape[0] if len_b is None else len_b
    cols = jnp.arange(b.shape[0] + 1)

    def row(prev, ai_i):
        ai, i = ai_i
        cost = (b != ai).astype(prev.dtype)
        # candidates without the in-row insertion: deletion (prev[j] + 1), substitution
        c = jnp.concatenate(
            [i[None].astype(prev.dtype), jnp.minimum(prev[1:] + 1, prev[:-1] + cost)]
        )
        # insertion chain: new[j] = min_k≤j (c[k] + j − k)
        new = jax.lax.cummin(c - cols, axis=0) + cols
        return new, new

    first = cols.astype(jnp.int32)
    _, rows = jax.lax.scan(row, first, (a, jnp.arange(1, a.shape[0] + 1, dtype=jnp.int32)))
    table = jnp.concatenate([first[None], rows], axis=0)
    return table[len_a, len_b]


def pairwise_edit_distance(seqs_NxT, lengths_N=None):
    """M[i, j] = edit_distance(seq_i, seq_j): [N, T] (+ lengths [N]) -> [N, N] int."""
    v.check_rank("seqs_NxT", seqs_NxT, 2)
    s = jnp.asarray(seqs_NxT)
    lens = jnp.full((s.shape[0],), s.shape[1]) if lengths_N is None else jnp.asarray(lengths_N)
    one = jax.vmap(lambda x, lx: jax.vmap(lambda y, ly: edit_distance(x, y, lx, ly))(s, lens))
    return one(s, lens)


def _ast_labels(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ["<syntax-error>"]
    labels: list[str] = []

    def visit(node):  # pre-order: node type, plus identifiers/constants that change meaning
        label = type(node).__name__
        if isinstance(node, ast.Name):
            label += f":{node.id}"
        elif isinstance(node, ast.Constant):
            label += f":{node.value!r}"
        elif isinstance(node, ast.Attribute):
            label += f":{node.attr}"
        labels.append(label)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return labels


def python_ast_edit_distance(source_a: str, source_b: str) -> int:
    """Edit distance between the pre-order AST label sequences of two Python programs (host-side).

    A cheap, deterministic proxy for the article's "syntax-tree edit distance" (§5.2): formatting
    and comments do not count, changed operators/names/constants do. Unparsable code becomes the
    single label "<syntax-error>", so broken programs cluster together.
    """
    la, lb = _ast_labels(source_a), _ast_labels(source_b)
    vocab = {label: k for k, label in enumerate(sorted(set(la) | set(lb)))}
    a = np.array([vocab[x] for x in la], dtype=np.int32)
    b = np.array([vocab[x] for x in lb], dtype=np.int32)
    return _levenshtein_np(a, b)


def _levenshtein_np(a: np.ndarray, b: np.ndarray) -> int:
    prev = np.arange(len(b) + 1)
    for i, ai in enumerate(a, start=1):
        cur = np.empty_like(prev)
        cur[0] = i
        sub = prev[:-1] + (b != ai)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, sub[j - 1])
        prev = cur
    return int(prev[-1])


def pairwise_abs_difference(values_N):
    """M[i, j] = |x_i − x_j|: [N] -> [N, N]. E.g. x = log π(a) for the categorical simulator,
    where every draw shares one distribution and a KL between draws would be 0."""
    v.check_rank("values_N", values_N, 1)
    x = jnp.asarray(values_N)
    return jnp.abs(x[:, None] - x[None, :])


# --- 2.3 mixed groups ---


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


# --- 3.2 batch recomposition ---


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


# --- 3.1 rollout temperature ---


def cosine_temperature(step, total_steps, *, tau_max=1.0, tau_min=0.2, fraction=0.3):
    """τ_t = τ_min + ½(τ_max − τ_min)(1 + cos(π·t/T_max)), T_max = fraction·total_steps; τ_min
    after T_max (article §3.1; fraction 0.3, or 0.5 when exploration stalls)."""
    _check_temperature_args(total_steps, tau_max, tau_min, fraction)
    t_max = fraction * total_steps
    t = jnp.clip(jnp.asarray(step, dtype=jnp.result_type(float)), 0.0, t_max)
    return tau_min + 0.5 * (tau_max - tau_min) * (1.0 + jnp.cos(jnp.pi * t / t_max))


def stepwise_temperature(step, total_steps, *, tau_max=1.0, tau_min=0.2, fraction=0.3, stages=4):
    """Staircase from τ_max to τ_min in `stages` equal drops, reaching τ_min at T_max =
    fraction·total_steps (the article's advice for code generation, §5.2):
    τ_t = τ_max − (τ_max − τ_min)·min(⌊stages·t/T_max⌋, stages)/stages."""
    _check_temperature_args(total_steps, tau_max, tau_min, fraction)
    if int(stages) != stages or stages < 1:
        raise CatsimError(f"stages must be a whole number >= 1, got {stages}")
    t_max = fraction * total_steps
    t = jnp.maximum(jnp.asarray(step, dtype=jnp.result_type(float)), 0.0)
    level = jnp.minimum(jnp.floor(stages * t / t_max), stages)
    return tau_max - (tau_max - tau_min) * level / stages


def _check_temperature_args(total_steps, tau_max, tau_min, fraction):
    v.check_positive("total_steps", total_steps)
    v.check_positive("tau_min", tau_min)
    v.check_positive("tau_max", tau_max)
    lo, hi = v.concrete_float(tau_min), v.concrete_float(tau_max)
    if lo is not None and hi is not None and lo > hi:
        raise CatsimError(f"tau_min must not exceed tau_max, got tau_min={lo}, tau_max={hi}")
    f = v.concrete_float(fraction)
    if f is not None and not 0.0 < f <= 1.0:
        raise CatsimError(f"fraction must lie in (0, 1], got {f}")


# --- 4.2 safeguards (host-side, return warning messages; empty tuple = all well) ---


def collapse_warning(
    heldout_accuracy: Sequence[float], *, previous_min: float = 0.05, tol: float = 0.0
):
    """Reward collapse (article §4.2): held-out accuracy SUDDENLY at zero.

    Warns when the latest accuracy is ≤ tol while the one before was ≥ previous_min. Returns a
    tuple of one-line messages (empty when nothing is wrong or the history is too short).
    """
    acc = [float(a) for a in heldout_accuracy]
    if len(acc) < 2:
        return ()
    if acc[-1] <= tol and acc[-2] >= previous_min:
        return (
            f"reward collapse: held-out accuracy fell from {acc[-2]:.4g} to {acc[-1]:.4g}; "
            "check the negative weights (raise the smoothing eps, or use the 'text' reading)",
        )
    return ()


def stagnation_warning(
    step: int,
    total_steps: int,
    temperature: float,
    tau_min: float,
    *,
    early_fraction: float = 0.5,
    pass_at_k: Sequence[float] | None = None,
    window: int = 5,
    min_gain: float = 1e-3,
):
    """Exploration stagnation (article §4.2): the rollout temperature sits at its floor too early.

    Warns when temperature ≤ τ_min (relative tolerance 1e-6: a float32 schedule value counts) before
    `early_fraction`·total_steps and — if a
    pass@k history is given — pass@k gained less than `min_gain` over the last `window` entries.
    The article's remedy: lengthen the cosine period to 50% of training.
    """
    at_floor = temperature <= tau_min * (1 + 1e-6) + 1e-12
    early = step < early_fraction * total_steps
    if not (at_floor and early):
        return ()
    if pass_at_k is not None:
        hist = [float(x) for x in pass_at_k]
        if len(hist) < window + 1 or max(hist[-window:]) - hist[-window - 1] >= min_gain:
            return ()
    frozen = "" if pass_at_k is None else f" and pass@k has not improved over the last {window} values"
    return (
        f"exploration stagnation: temperature at its floor {tau_min:g} at step {step} of "
        f"{total_steps} (before {early_fraction:.0%} of training){frozen}; consider a longer cosine "
        "period (fraction=0.5)",
    )
