"""Inverse-success advantage calibration (Fan et al., "When Sharpening Becomes Collapse: Sampling
Bias and Semantic Coupling in RL with Verifiable Rewards", arXiv 2601.15609): GRPO's advantage
with every POSITIVE advantage multiplied by (G − |S⁺|)^α, G the group size and |S⁺| the group's
number of correct samples. A rare success (|S⁺| = 1) gets G − 1 times GRPO's credit, a common one
(|S⁺| = G − 1) GRPO's credit unchanged; wrong samples keep GRPO's negative advantage.

    A_i = (r_i − r̄)/(std + ε) · ((G − |S⁺|)^α if that is > 0 else 1),   α = 1

One group of binary success indicators `rewards_N` [N] in {0, 1} -> [N]; the counts form
`inverse_success_counts(c, G) -> (A_correct, A_wrong)` serves the simulator (as in `binary`).

Where each detail comes from. The paper's method section could not be read from this workplace:
only its abstract is stored ("we propose inverse-success advantage calibration to prioritize
difficult queries"), and no public code of the paper was found. The details below come from the
task that asked for this rule (its statement "positive advantages × (G − |S⁺|)^α, α = 1") and
from a public reader's notes on the paper's v1 §3–§4 (a paper-notes file of a public GitHub
repository: "IAC multiplies only the positive advantages by (G − |S⁺|)^α (α = 1)", runs at G = 8
against GRPO, RLOO, REINFORCE++, Dr.GRPO and DAPO). So:
  - the factor (G − |S⁺|)^α and α = 1: the task's statement and the notes; the paper's own
    equation number is not known here.
  - only positive advantages are scaled: the task's statement and the notes.
  - the base advantage: not stated in what could be read. catsim takes GRPO's group-normalised
    (r − r̄)/(std + ε) (`advantages.grpo`, its ε and ddof), the estimator of the paper's GRPO
    baseline, so this rule differs from `grpo` by the calibration alone.
  - no renormalisation after the scaling: none is stated in what could be read; catsim adds none.
  - α: fixed at 1 in the registry (the value the paper runs); the functions here take any α ≥ 0.

Edge groups: an all-correct group has (G − |S⁺|) = 0 and GRPO advantage 0, an all-wrong group
has no positive advantage and GRPO advantage 0, and a group of one sample is inactive: all three
get 0 on every sample. Binary only: |S⁺| needs a notion of "correct" (the trainer passes
score > 1/2).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives import advantages as adv

__all__ = ["inverse_success_scale", "inverse_success", "inverse_success_counts", "ALPHA"]

ALPHA = 1.0  # the paper's α (the registry's rule runs at it)


def inverse_success_scale(num_correct, group_size, *, alpha=ALPHA):
    """(G − |S⁺|)^α, the factor on a group's positive advantages. [] , [] -> []."""
    v.check_nonnegative("alpha", alpha)
    dtype = jnp.result_type(num_correct, group_size, float)
    return jnp.power(jnp.asarray(group_size, dtype) - jnp.asarray(num_correct, dtype), alpha)


def inverse_success_counts(num_correct, group_size, *, alpha=ALPHA, eps=1e-6):
    """From counts: A_c = (G − c)^α·(1 − p̂)/(σ + ε), A_w = −p̂/(σ + ε), p̂ = c/G, σ = sqrt(p̂(1 − p̂))
    (population std, as every counts form); both 0 for c ∈ {0, G}."""
    a_c, a_w = adv.binary_group_advantages(num_correct, group_size, normalise_std=True, eps=eps)
    return a_c * inverse_success_scale(num_correct, group_size, alpha=alpha).astype(a_c.dtype), a_w


def inverse_success(rewards_N, *, alpha=ALPHA, eps=1e-6, ddof=0):
    """Inverse-success calibrated GRPO advantage of one group (module docstring). [N] binary -> [N].

    Args:
      rewards_N: [N] success indicators in {0, 1} (1 = correct).
      alpha: α ≥ 0 of (G − |S⁺|)^α (the paper's 1; α = 0 is GRPO).
      eps, ddof: GRPO's ε and std (`advantages.grpo`); a group of one gets 0 under either std.
    """
    v.check_rank("rewards_N", rewards_N, 1)
    r = v.concrete_array(rewards_N)
    if r is not None and r.size and not np.all((r == 0) | (r == 1)):
        raise CatsimError("inverse-success calibration takes binary rewards in {0, 1} (1 = correct)")
    if rewards_N.shape[0] < 2:  # one sample: nothing to compare with (and no sample std), 0
        return jnp.zeros(rewards_N.shape, jnp.result_type(rewards_N, float))
    base = adv.grpo(rewards_N, eps=eps, ddof=ddof)
    rewards_N = jnp.asarray(rewards_N, base.dtype)
    scale = inverse_success_scale(jnp.sum(rewards_N > 0.5), rewards_N.shape[0], alpha=alpha).astype(base.dtype)
    return jnp.where(base > 0, base * scale, base)
