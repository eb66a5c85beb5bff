"""Asymmetric, confidence-weighted GRPO (the second seed article; THEORY.md §7).

A blog-level method without a paper (seeds/asymmetric-grpo-article.zh.txt). Each component is a
small pure function so that any of them can be switched on GRPO / F-GRPO on its own; the
ambiguities of the article are explicit arguments, and docs/asymmetric-grpo.md records the
readings chosen here and why. Per-group functions take ONE group of N rollouts (callers vmap).

Components (article section → function, by module of this package):
  config       AsymmetricConfig (all hyper-parameters, checked at construction)
  confidence   2.1 confidence weight b + (1−b)·sigmoid(−KL): kl_uniform_to_policy,
               kl_policy_to_uniform, confidence_weight_from_kl, confidence_weight
  channels     2.2 asymmetric channels w⁺, w⁻: positive_weight, negative_weight_formula,
               negative_weight_text, negative_weight, asymmetric_advantages,
               asymmetric_reinforce_coefficients
  distances    distances between rollouts (pluggable): kl_divergence, mean_token_distribution,
               pairwise_kl, edit_distance, pairwise_edit_distance, python_ast_edit_distance,
               pairwise_abs_difference
  selection    2.3 mixed groups (top-k positives, near/far negatives): mixed_group_weights;
               3.2 batch recomposition by number of positives: recompose_group
  temperature  3.1 rollout temperature: cosine_temperature, stepwise_temperature
  safeguards   4.2 collapse_warning, stagnation_warning (and the smoothing ε in negative_weight_*)
  3.3 dual-threshold gradient clipping lives in catsim.objectives.grad_clip.dual_threshold_clip.
"""

from catsim.objectives.asymmetric.channels import (
    asymmetric_advantages,
    asymmetric_reinforce_coefficients,
    negative_weight,
    negative_weight_formula,
    negative_weight_text,
    positive_weight,
)
from catsim.objectives.asymmetric.confidence import (
    confidence_weight,
    confidence_weight_from_kl,
    kl_policy_to_uniform,
    kl_uniform_to_policy,
)
from catsim.objectives.asymmetric.config import KL_DIRECTIONS, NEGATIVE_READINGS, AsymmetricConfig
from catsim.objectives.asymmetric.distances import (
    edit_distance,
    kl_divergence,
    mean_token_distribution,
    pairwise_abs_difference,
    pairwise_edit_distance,
    pairwise_kl,
    python_ast_edit_distance,
)
from catsim.objectives.asymmetric.safeguards import collapse_warning, stagnation_warning
from catsim.objectives.asymmetric.selection import mixed_group_weights, recompose_group
from catsim.objectives.asymmetric.temperature import cosine_temperature, stepwise_temperature

__all__ = [
    "KL_DIRECTIONS",
    "NEGATIVE_READINGS",
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
