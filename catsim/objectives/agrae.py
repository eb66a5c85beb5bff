"""A-GRAE, asymmetric group-relative advantage estimation (Yu et al., "Unveiling Implicit Advantage
Symmetry: Why GRPO Struggles with Exploration and Difficulty Adaptation", arXiv 2602.05548), as its
authors' code computes it: GRPO's advantage of a group, re-weighted by the group's success rate p
and the BATCH's accuracy B (the mean over the batch's groups of each group's p):

    A⁰ = (r − p)/(s + ε)                                  GRPO, s the sample std (ddof 1)
    A  = (1 − B)·½A⁰/(1 − √p + ε)  +  B·½A⁰/(√p + ε)      easy focus ⟶ hard focus as B grows
    A ← A·min(1, B/α)  where A > 0                         correct samples damped while B < α

Early in training (B small) the "easy" term, large where p is near 1, dominates and correct
samples are damped hard; as the batch accuracy rises the weight moves to the "hard" term, large
where p is small (the paper's curriculum: easy prompts first, hard ones later), and the damping of
correct samples fades. A rule with a batch-level input: `registry.Rule.reads_batch_mean`.

Where each detail comes from
----------------------------
The paper: its abstract and §1 were readable here, its method section was not. They state the two
aims (suppress the advantages of correct trajectories asymmetrically, to explore; move the
difficulty focus from easy to hard samples as training goes on) and that A-GRAE "dynamically
modulates" both. Every formula above is from the authors' code, repository Yu7-code/A-GRAE
(a verl fork, commit 5f129ef):
  - `verl/trainer/ppo/core_algos.py`, `compute_grpo_outcome_advantage`: the group mean p and
    `torch.std` (unbiased, ddof 1); A⁰ with ε = 1e-6; B = `overall_mean`, the mean of the group
    means; the two ½-weighted focus terms and their (1 − B), B mix; the clamp of positive A by
    min(1, B/α) with α = 1 (the code's comment: "0.5 for geo3k and med, 1 for math").
  - the gate. That code applies the re-weighting only `if grpo_weight == 2.0`, and
    `verl/trainer/ppo/ray_trainer.py` (line 1216) sets, every step,
    grpo_weight = w₀ + (global_steps/total_steps)·(1 − w₀), with w₀ = `algorithm.grpo_weight`
    (2.0 in run_qwen2.5-math-7b-grpo-agrae.sh and run_deepseekr1-7b-dapo-agrae.sh; 1 in
    run_deepseekr1-7b-agrae.sh and run_qwen2.5-math-7b-drgrpo-agrae.sh). `global_steps` is set
    to 0 and then, before the first batch ("we start from step 1", ray_trainer.py line 1056),
    to 1; so grpo_weight = 2 − t/T ≠ 2.0 at every training step t ≥ 1, the gate never fires, and
    the released scripts train plain GRPO. The schedule's value is read by nothing but that
    gate (nothing interpolates between the two advantages).
What catsim does: it applies the re-weighting at EVERY step, with no schedule: the method as the
paper's readable text describes it (A-GRAE "dynamically modulates" the advantages through training;
nothing read there says it acts at one step only, and the B-driven mix is itself the curriculum).
Copying the gate would make an A-GRAE run a GRPO run under another name.

B, by caller: `catsim llm rl` takes it over the step's groups that carry loss, the plug-ins' host
function over the scorable groups of the batch it is handed, and the simulator, one prompt per step,
from that one group, so B = p there: a rare success is then damped by min(1, p) (N = 8, c = 1, ε = 0:
A_correct = 0.26 where GRPO gives 2.65), where a batch of many prompts damps it by the batch's
accuracy instead. A screen that compares the simulator with a trainer should keep this in mind.

Deliberate differences from the authors' code, at group sizes their runs never use (n = 8 there):
a group of ONE sample gets 0 here (as under every catsim rule that compares a sample with its
group); verl's code gives it mean 0 and std 1, so A⁰ = r, its hard term ½r/ε = 5·10⁵·r and its A
of order B²/(2ε). The plug-ins' batch mean leaves such a group out (it changes no other group);
the authors' `overall_mean` counts it as 0.

Shapes: `rewards_N` [N] one group (binary indicators, or graded rewards in [0, 1] as the authors'
code allows); `batch_mean` [] in [0, 1]. ε = 0 is exact: every division is guarded
(`advantages.safe_divide`), and an all-equal group (p ∈ {0, 1}, A⁰ = 0) gets 0.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives.advantages import safe_divide

__all__ = ["ALPHA", "reweight", "agrae", "agrae_counts", "batch_mean"]

ALPHA = 1.0  # α of the positive clamp min(1, B/α): the authors' value for math (the registry's)


def _check_unit(name: str, value) -> None:
    x = v.concrete_array(value)
    if x is not None and x.size and not np.all((x >= 0) & (x <= 1)):
        raise CatsimError(f"A-GRAE's {name} must lie in [0, 1] (√ of a success rate), got {x.min():g} to {x.max():g}")


def reweight(a0, p, batch_mean, *, eps=1e-6, alpha=ALPHA):
    """The A-GRAE re-weighting of GRPO advantages `a0` (any shape) of a group with success rate p:
    (1 − B)·½a0/(1 − √p + ε) + B·½a0/(√p + ε), then × min(1, B/α) where positive."""
    v.check_nonnegative("eps", eps)
    if not (isinstance(alpha, int | float) and alpha > 0):
        raise CatsimError(f"A-GRAE's alpha must be a number > 0, got {alpha!r}")
    _check_unit("batch mean", batch_mean)
    root = jnp.sqrt(p)
    hard = safe_divide(0.5 * a0, root + eps)  # the authors' scores_difffouces
    easy = safe_divide(0.5 * a0, 1.0 - root + eps)  # scores_easyfouces
    mixed = (1.0 - batch_mean) * easy + batch_mean * hard
    return jnp.where(mixed > 0, mixed * jnp.minimum(1.0, batch_mean / alpha), mixed)


def agrae(rewards_N, batch_mean, *, eps=1e-6, alpha=ALPHA):
    """A-GRAE advantages of one group. [N] rewards in [0, 1], [] B -> [N] (0 for N < 2)."""
    v.check_rank("rewards_N", rewards_N, 1)
    _check_unit("rewards", rewards_N)
    r = jnp.asarray(rewards_N)
    r = r.astype(jnp.result_type(r, float))
    n = r.shape[0]
    if n < 2:  # no sample std (see the module docstring for the authors' singleton)
        return jnp.zeros_like(r)
    p = jnp.mean(r)
    centred = r - p
    std = jnp.sqrt(jnp.sum(centred**2) / (n - 1))
    return reweight(safe_divide(centred, std + eps), p, batch_mean, eps=eps, alpha=alpha).astype(r.dtype)


def agrae_counts(num_correct, group_size, batch_mean, *, eps=1e-6, alpha=ALPHA):
    """A-GRAE from counts: (A_correct, A_wrong) of a binary group with c correct of n, p = c/n and the
    sample std s = sqrt(c(n − c)/(n(n − 1))); both 0 for c ∈ {0, n} and for n < 2."""
    dtype = jnp.result_type(num_correct, group_size, float)
    c, n = jnp.asarray(num_correct, dtype), jnp.asarray(group_size, dtype)
    p = safe_divide(c, n)
    std = jnp.sqrt(safe_divide(c * (n - c), n * (n - 1.0)))
    a0 = safe_divide(jnp.stack([1.0 - p, -p]), std + eps)
    a_c, a_w = reweight(a0, p, batch_mean, eps=eps, alpha=alpha)
    active = (c > 0) & (c < n) & (n >= 2)
    return jnp.where(active, a_c, 0.0).astype(dtype), jnp.where(active, a_w, 0.0).astype(dtype)


def batch_mean(inputs_GxN, mask_G=None):
    """B, the batch's accuracy as the authors' `overall_mean`: the mean over groups of each group's
    mean input. [G, N] (0/1 indicators for a binary rule), optional [G] weights (0 = a group that is
    not in the batch, e.g. dropped by dynamic sampling) -> []; 0 when no group is in."""
    v.check_rank("inputs_GxN", inputs_GxN, 2)
    x = jnp.asarray(inputs_GxN)
    x = x.astype(jnp.result_type(x, float))
    w = jnp.ones(x.shape[0], x.dtype) if mask_G is None else jnp.asarray(mask_G, x.dtype)
    return safe_divide(jnp.sum(w * jnp.mean(x, axis=1)), jnp.sum(w))
