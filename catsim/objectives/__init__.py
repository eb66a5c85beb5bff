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
    safe_divide(num, den) -> num/den where den > 0, else 0 (the one std / rate guard)

`binary` — rare-solution rules on 0/1 success indicators, per sample [N] and from counts (A_c, A_w):
    maxrl(rewards_N, *, eps=1e-6)            (r − r̄)/(r̄ + ε)                      MaxRL 2602.02710
    passk_training(rewards_N, k)             analytical pass@k advantage            2508.10751
    pkpo(rewards_N, k, *, baseline="loo")    n·s^(loo−1) (Eq. 33) | "mean": k(s − ρ)  2505.15201
    passk_best(rewards_N, *, eps=1e-6)       best sample only, (r1 − r2)/std        2503.19595
    w_reinforce(rewards_N, *, positive_weight=0.1)   λ / −1, no baseline         2506.01347
    nsr(rewards_N); psr(rewards_N)           −1 on wrong only; +1 on correct only   2506.01347
    <rule>_counts(num_correct, group_size, ...) -> (A_c, A_w)
    log_comb_ratio(a, n, k) = log C(n−a, k)/C(n, k)   stable (log1p sum) for n up to 131072

`calibration` — inverse-success advantage calibration (2601.15609), binary, one group and counts:
    inverse_success(rewards_N, *, alpha=1.0, eps=1e-6, ddof=0)   GRPO's A, A > 0 × (N − c)^α
    inverse_success_counts(num_correct, group_size, *, alpha=1.0, eps=1e-6) -> (A_c, A_w)
    inverse_success_scale(num_correct, group_size, *, alpha=1.0) -> (N − c)^α

`agrae` — A-GRAE (2602.05548), GRPO's A re-weighted by the group's p and the batch's accuracy B:
    agrae(rewards_N, batch_mean, *, eps=1e-6, alpha=1.0) -> [N]      rewards in [0, 1]; 0 for N < 2
    agrae_counts(num_correct, group_size, batch_mean, *, eps=1e-6, alpha=1.0) -> (A_c, A_w)
    reweight(a0, p, batch_mean, *, eps=1e-6, alpha=1.0)   (1−B)·½a0/(1−√p+ε) + B·½a0/(√p+ε), A>0 × min(1, B/α)
    batch_mean(inputs_GxN, mask_G=None) -> []   B: mean over (kept) groups of each group's mean

`registry` — the one list of advantage rules (simulator, trainer, CLIs, plug-ins, docs table):
    RULES / NAMES; get(name) -> Rule; Rule.advantages(rewards_N, Options(k, eps, ddof,
    w_reinforce_lambda, reward_correct, reward_wrong)); Rule.class_advantages(c, n, Options);
    Rule.can_move(n, k); check_k(name, k, n) (k > n raises, k = n returns a warning);
    Rule.reads_batch_mean: advantages(r_N, o, batch_mean=B) with B = registry.batch_mean(inputs_GxN, mask_G)

`focal` — F-GRPO (§4) and the App. N control:
    focal_weight(success_rate, gamma) -> g = (1 − μ̂)^γ   (0^0 = 1: γ = 0 is GRPO)
    apply_focal(advantages_N, success_rate, gamma) -> [N]
    focal_group_advantages(rewards_N, gamma, *, kind="grpo", reward_correct=1.0,
                           reward_wrong=0.0, eps=1e-6, ddof=0) -> [N]   μ̂ and A from the same rewards
    constant_gamma(step, gamma); warmup_gamma(step, gamma, warmup_steps, gamma_start=0.0)
    success_ramp_gamma(success_rate, gamma, success_low, success_high, gamma_start=0.0)
    switch_gamma(step, gamma, switch_step)                  γ = 0 before switch_step (GRPO→F-GRPO)
    epoch_increment_gamma(step, gamma, gamma_start, steps_per_epoch, warmup_epochs, increment=0.1)
    step_ramp_gamma(step, gamma, gamma_start, ramp_start, ramp_steps)   the article's get_gamma
    GammaSchedule(kind, gamma, gamma_start, warmup_steps, switch_step, success_low, success_high,
                  steps_per_epoch, warmup_epochs, increment, ramp_start, ramp_steps)
        schedule(step, success_rate=None) -> γ;  schedule.max_gamma;  GAMMA_SCHEDULES
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
    positive_sample_weight(advantages, weight=0.1)   catsim's λ on A > 0 (not W-REINFORCE: binary.w_reinforce)
    SURROGATES: {"linear", "reinforce", "grpo", "dapo", "cispo"} -> f(logp, old_logp, advantages)

`asymmetric` — the asymmetric, confidence-weighted GRPO article (docs/asymmetric-grpo.md):
    AsymmetricConfig(baseline=0.3, kl_direction="uniform_to_policy", positive_tau=1.0,
                     negative_reading="text", negative_d=1.0, negative_eps=1e-2, top_k=1,
                     amplify=1.5, delta=2.0, rich_positives=3, top_negatives=3)
    kl_uniform_to_policy(logits); kl_policy_to_uniform(logits)          [..., V] -> [...]
    confidence_weight_from_kl(kl, baseline=0.3)
    confidence_weight(logits, *, baseline=0.3, kl_direction="uniform_to_policy")  [..., V] -> [...]
    positive_weight(rewards, tau=1.0)                    min(1, r/τ)
    negative_weight_formula(prob, d=1.0, eps=1e-2)       (π+ε)/(D−π+ε)   grows with π
    negative_weight_text(prob, d=1.0, eps=1e-2)          (D−π+ε)/(D+ε)   falls with π (default)
    negative_weight(prob, *, reading="text", d=1.0, eps=1e-2)
    asymmetric_advantages(advantages_N, rewards_N, probs_N, confidence_N=None, *, config=None)
    asymmetric_reinforce_coefficients(rewards_N, probs_N, confidence_N=None, *, config=None)
    kl_divergence(p, q, eps=1e-12); mean_token_distribution(logits_TxV, mask_T=None)
    pairwise_kl(dists_NxV) -> [N, N]; edit_distance(a_T, b_T, len_a=None, len_b=None)
    pairwise_edit_distance(seqs_NxT, lengths_N=None) -> [N, N]
    python_ast_edit_distance(source_a, source_b) -> int      (host-side)
    pairwise_abs_difference(values_N) -> [N, N]              e.g. |log π_a − log π_b| (simulator)
    mixed_group_weights(is_positive_N, distances_NxN, scores_N=None, *, config=None) -> [N]
    recompose_group(is_positive_N, scores_N=None, distances_NxN=None, *, config=None) -> [N] 0/1
    cosine_temperature(step, total_steps, *, tau_max=1.0, tau_min=0.2, fraction=0.3)
    stepwise_temperature(step, total_steps, *, tau_max=1.0, tau_min=0.2, fraction=0.3, stages=4)
    collapse_warning(heldout_accuracy, *, previous_min=0.05, tol=0.0) -> tuple[str, ...]
    stagnation_warning(step, total_steps, temperature, tau_min, *, early_fraction=0.5,
                       pass_at_k=None, window=5, min_gain=1e-3) -> tuple[str, ...]

`rewards` — length shaping (DAPO §3.4):
    overlong_penalty(lengths, max_length, buffer, penalty=1.0) -> [...]   0, linear ramp, −penalty
    overlong_keep(truncated) -> [...]   overlong filtering: 0 for truncated completions
    unlikeliness(rewards_N, logp_N, *, beta=0.25, weights_N=None)   r·(1 − β·rank/N), all N ranked by log π

`grad_clip` — optax:
    dual_threshold_clip(max_norm, lower_threshold=0.1, amplification=1.5)
        -> optax.GradientTransformation   (= optax.clip_by_global_norm above the lower threshold)

Typical use (one group; vmap over groups):
    A = focal_group_advantages(rewards_N, gamma)    # = apply_focal(grpo(r), success_rate(r), γ)
    loss = token_mean(ppo_clip_loss(logp_BxT, old_logp_BxT, A[:, None] * ones_T), mask_BxT)
Categorical simulator, counts c_V of N draws with per-action advantage A_V:
    loss = token_mean(reinforce_loss(jax.nn.log_softmax(z_V), A_V), c_V)   # = (1/N)Σ_j over draws
"""

from catsim.objectives import (
    advantages,
    agrae,
    asymmetric,
    binary,
    calibration,
    focal,
    grad_clip,
    losses,
    registry,
    rewards,
)

__all__ = ["advantages", "agrae", "asymmetric", "binary", "calibration", "focal", "grad_clip", "losses", "registry",
           "rewards"]
