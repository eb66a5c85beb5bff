"""The simulator's lean update: the policy gradient in closed form instead of by autodiff.

For one optimiser step per group, the surrogates' gradient at z (where the importance ratio is 1,
so no clip acts) is known exactly. With per-action advantages A_a, counts c_a (Σ c = N) and
π = softmax(z), the loss L = token_mean(surrogate, c) has

    ∂L/∂z_j = −(w_j − π_j·S) / N,   w_a = c_a·A_a (REINFORCE, GRPO, DAPO, CISPO at ratio 1)
                                     w_a = c_a·A_a·π_a (the linear surrogate),   S = Σ_a w_a.

For binary rewards A_a takes two values, so S needs only the group's draws (O(N)): the lean step
needs no log-softmax of the logits and no V-long reductions for the update, and the engine
carries π = softmax(z) from one step to the next. `jax.grad` of `engine.make_loss` computes the
same gradient (tests/test_sim_lean.py checks it to float32 rounding); results differ from the
autodiff path only by that rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from catsim.objectives import advantages, focal, losses, registry, rewards
from catsim.sim import sampler
from catsim.sim.config import UpdateConfig

# Run updates with a closed-form gradient lean (`uses_lean_step`)? False: every update takes
# the autodiff path (tests compare the two).
LEAN_STEP = True

# Surrogates whose gradient at ratio π/π_old = 1 is A·∇log π: the clipped ones' clips are
# inactive there, CISPO's weight is clip(1) = 1.
RATIO_ONE_SURROGATES = ("reinforce", "grpo", "dapo", "cispo")


def has_closed_form_gradient(update: UpdateConfig) -> bool:
    """True when one update of `update` is the closed form above: one optimiser step per group,
    no entropy or KL term, binary-reward advantages without asymmetric weights or recomposition."""
    return (update.ppo_epochs == 1 and not update.entropy_coef and not update.kl_coef
            and not update.asymmetric
            and (update.surrogate == "linear" or update.surrogate in RATIO_ONE_SURROGATES))


def uses_lean_step(update: UpdateConfig) -> bool:
    """True when the engine runs `update` with `lean_update` (`LEAN_STEP` and a closed form)."""
    return LEAN_STEP and has_closed_form_gradient(update)


def rule_options(update: UpdateConfig) -> registry.Options:
    """The registry options of `update` (k, ε, W-REINFORCE λ, the reward levels)."""
    return registry.Options(k=update.passk_k, eps=update.adv_eps, w_reinforce_lambda=update.w_reinforce_lambda,
                            reward_correct=update.reward_correct, reward_wrong=update.reward_wrong)


def class_advantages(update: UpdateConfig, num_correct, size):
    """(A_correct, A_wrong) of a binary-reward group of `size` draws with `num_correct` correct ones,
    under `update.advantage` (its counts form in `objectives.registry`), with catsim's positive
    weight λ applied (`losses.positive_sample_weight`).

    mean_centred / grpo use the reward levels Rc, Rw; the binary rules (MaxRL, pass@k, the signed
    rules) their papers' 0/1 success indicators.
    """
    rule = registry.get(update.advantage)
    a_correct, a_wrong = rule.class_advantages(num_correct, size, rule_options(update))
    if update.positive_weight != 1.0:
        a_correct = a_correct * losses.positive_sample_weight(a_correct, update.positive_weight)
        a_wrong = a_wrong * losses.positive_sample_weight(a_wrong, update.positive_weight)
    return a_correct, a_wrong


def unlikeliness_draw_advantages(update: UpdateConfig, correct_N, p_V, actions_N, weights_N, size):
    """[N] per-draw advantages on the unlikeliness-shaped rewards (`rewards.unlikeliness`, the one
    implementation: all counted draws ranked by ascending log π(a), draws of one action by position).

    The shaped success indicator s of a draw maps to R = Rw + (Rc − Rw)·s, and the group's
    mean-centred or GRPO advantage (population std) is taken over the counted draws.
    """
    valid = weights_N > 0
    correct = correct_N & valid
    shaped = rewards.unlikeliness(correct.astype(p_V.dtype), jnp.log(p_V[actions_N]),
                                  beta=update.unlikeliness_beta, weights_N=weights_N)
    r_N = update.reward_wrong + (update.reward_correct - update.reward_wrong) * shaped
    mean = jnp.sum(jnp.where(valid, r_N, 0.0)) / size
    centred = jnp.where(valid, r_N - mean, 0.0)
    # an all-wrong group has r = Rw on every draw: centred exactly 0
    centred = jnp.where(jnp.any(correct), centred, 0.0)
    if update.advantage == "grpo":
        std = jnp.sqrt(jnp.sum(centred**2) / size)
        centred = advantages.safe_divide(centred, std + update.adv_eps)
    if update.positive_weight != 1.0:
        centred = centred * losses.positive_sample_weight(centred, update.positive_weight)
    return centred


def lean_update(update: UpdateConfig, tx, correct_V, z_V, p_V, opt_state, actions_N, weights_N,
                gamma_t):
    """One policy update of a `has_closed_form_gradient` rule, from the group's draws.

    The gradient is p_V·S/N plus the sparse −w/N at the drawn actions: one scatter of the N draws
    into a pass over V, with no V-long counts or reductions.

    Args:
      update: the update rule; tx: its optax optimiser; correct_V: [V] bool correct mask.
      z_V: [V] logits; p_V: [V] softmax(z_V); opt_state: optimiser state.
      actions_N, weights_N: the group's draws and whether each counts (`sampler.sample_draws`).
      gamma_t: [] focal γ.

    Returns:
      (z_V', opt_state', (mu_hat, g, active)) as `engine.apply_update`.
    """
    correct_N = correct_V[actions_N]
    # Behind a barrier: a program with a static N would otherwise fold N to a constant and turn
    # x / N into x · (1/N), one ulp away from the traced-N program the sweep shares (bit-identical
    # results between the two are tested).
    size = jax.lax.optimization_barrier(jnp.sum(weights_N))
    num_correct = jnp.sum(jnp.where(correct_N, weights_N, 0.0))
    mu_hat = num_correct / size
    g = focal.focal_weight(mu_hat, gamma_t)
    if update.unlikeliness_beta > 0:
        w_N = weights_N * g * unlikeliness_draw_advantages(
            update, correct_N, p_V, actions_N, weights_N, size)
    else:
        a_correct, a_wrong = class_advantages(update, num_correct, size)
        w_N = weights_N * g * jnp.where(correct_N, a_correct, a_wrong)  # each draw's c·A share
    if update.surrogate == "linear":
        w_N = w_N * p_V[actions_N]
        total = jnp.sum(w_N)
    elif update.unlikeliness_beta > 0:
        total = jnp.sum(w_N)
    else:  # Σ_j w_j in closed form: X draws of advantage A_c, N − X of A_w
        total = g * (num_correct * a_correct + (size - num_correct) * a_wrong)
    grad_V = sampler.scatter_add(p_V * (total / size), actions_N, -w_N / size)
    updates, opt_state = tx.update(grad_V, opt_state, z_V)
    active = (num_correct > 0) & (num_correct < size)
    return optax.apply_updates(z_V, updates), opt_state, (mu_hat, g, active)
