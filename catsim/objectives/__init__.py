"""catsim.objectives — the ONE implementation of advantages, focal weights and policy-gradient
losses, imported by the categorical simulator (`catsim.sim`) and the LLM trainer (`catsim.llm`).

Style (rlax): small stateless jnp functions on one unbatched group / one example; callers `vmap`
over groups. Python-number hyper-parameters are validated eagerly (`CatsimError`); every function
jits. Shapes and paper equations are in each docstring.

What is where
-------------
`advantages` — one group of N rewards, `rewards_N` [N]:
    success_rate(rewards_N, *, reward_correct=1.0, reward_wrong=0.0) -> []   μ̂ = (R̄−Rw)/(Rc−Rw)
    is_active(rewards_N) -> [] bool                                       rewards not all equal
    mean_centred(rewards_N) -> [N]                                        R − R̄ (App. J)
    grpo(rewards_N, *, eps=1e-6, ddof=0) -> [N]                           (R − R̄)/(std + ε)
    dr_grpo(rewards_N) -> [N]                                             R − R̄ (Dr.GRPO)
    binary_group_advantages(num_correct, group_size, *, reward_correct=1.0, reward_wrong=0.0,
                            normalise_std=False, eps=0.0) -> (A_correct, A_wrong)   from counts
    batch_renormalise(advantages, mask=None, *, eps=1e-6, centre=False) -> same shape

`focal` — F-GRPO (§4) and the App. N control:
    focal_weight(success_rate, gamma) -> g = (1 − μ̂)^γ   (0^0 = 1: γ = 0 is GRPO)
    apply_focal(advantages_N, success_rate, gamma) -> [N]
    constant_gamma(step, gamma); warmup_gamma(step, gamma, warmup_steps, gamma_start=0.0)
    curriculum_gamma(success_rate, gamma, success_low, success_high, gamma_start=0.0)
    switch_gamma(step, gamma, switch_step)                  γ = 0 before switch_step (GRPO→F-GRPO)
    GammaSchedule(kind, gamma, gamma_start, warmup_steps, switch_step, success_low, success_high)
        schedule(step, success_rate=None) -> γ;  schedule.max_gamma
    low_lr_multiplier(gamma) -> float   m_γ = B(3/2, γ+3/2)/B(3/2, 3/2)  (m_0.5 ≈ 0.679)
    mean_abs_grpo_advantage(success_rate) -> 2·sqrt(μ(1−μ))

`losses` — per-token LOSSES (minimise), elementwise over any common shape:
    action_log_probs(logits, actions)        logits [V] & actions [...], or [..., V] & [...]
    linear_prob_surrogate_loss(logp, advantages)        −A·π(o)          (paper App. J, eq. 5)
    reinforce_loss(logp, advantages)                    −A·log π(o)
    ppo_clip_loss(logp, old_logp, advantages, *, clip_low=0.2, clip_high=0.2)   GRPO
    dapo_clip_loss(logp, old_logp, advantages, *, clip_low=0.2, clip_high=0.28) DAPO clip-higher
    cispo_loss(logp, old_logp, advantages, *, clip_low=1.0, clip_high=5.0)      CISPO
    ppo_clip_fractions(logp, old_logp, advantages, *, clip_low, clip_high) -> (low, high) 0/1
    cispo_clip_fraction(logp, old_logp, *, clip_low, clip_high) -> 0/1
    kl_k1(logp, ref_logp); kl_k3(logp, ref_logp)        sampled KL(π‖π_ref) estimators
    categorical_kl(logits, ref_logits) [..., V] -> [...]   exact KL(π‖π_ref)
    entropy(logits) [..., V] -> [...]
    token_mean(per_token, mask=None) -> []      mask may hold weights, e.g. sample counts
    sequence_mean(per_token_BxT, mask_BxT) -> []
    token_sum_constant(per_token_BxT, mask_BxT, max_length) -> []   Dr.GRPO
    SURROGATES: {"linear", "reinforce", "grpo", "dapo", "cispo"} -> f(logp, old_logp, advantages)

Typical use (one group; vmap over groups):
    A = apply_focal(grpo(rewards_N), success_rate(rewards_N), gamma)
    loss = token_mean(ppo_clip_loss(logp_BxT, old_logp_BxT, A[:, None] * ones_T), mask_BxT)
Categorical simulator, counts c_V of N draws with per-action advantage A_V:
    loss = token_mean(reinforce_loss(jax.nn.log_softmax(z_V), A_V), c_V)   # = (1/N)Σ_j over draws
"""

from catsim.objectives import advantages, focal, losses

__all__ = ["advantages", "focal", "losses"]
