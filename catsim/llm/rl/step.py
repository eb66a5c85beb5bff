"""One RL step's pieces: prompts, advantages, the training batch, the policy loss and the jitted
log-prob / update functions (F-GRPO §5.2–5.3, App. B, L).

Shapes: P groups (prompts) of N rollouts, B = P·N rows (prompt-major), T tokens per row (prompt
width W + completion length M); per-token arrays are B x (T−1), aligned with the targets
tokens[:, 1:], so response token j sits at target index W−1+j.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import hidden_states
from catsim.llm.rl.config import Method, ObjectiveConfig, RLConfig, RunConfig
from catsim.llm.rl.rare import RareConfig
from catsim.llm.rollout import Groups
from catsim.llm.scoring import grouped_token_logps, over_logit_chunks, token_logps
from catsim.objectives import advantages as adv_lib
from catsim.objectives import asymmetric, focal, losses, registry
from catsim.objectives import rewards as rewards_lib
from catsim.objectives.focal import GammaSchedule
from catsim.objectives.grad_clip import dual_threshold_clip


# ----------------------------------------------------------------------------- prompts and groups
def step_prompt_indices(cfg: RLConfig, step: int, round_: int, n_train: int) -> np.ndarray:
    """Train-prompt indices of (step, sampling round): a pure function of (seed, step, round)."""
    count = cfg.rollout.prompts_per_step
    rng = np.random.default_rng([cfg.run.seed, 0x51, step, round_])
    if n_train >= count and n_train <= 10 * 1_000_000:
        if n_train <= 100_000:
            return rng.choice(n_train, count, replace=False)
        picks: set[int] = set()
        while len(picks) < count:
            picks.add(int(rng.integers(n_train)))
        return np.asarray(sorted(picks))
    return rng.integers(0, n_train, size=count)


def select_active_groups(active_pool: np.ndarray, num_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """DAPO dynamic sampling with fixed shapes: the first `num_groups` active groups of the pool (in
    sampling order); if too few are active, inactive ones fill the batch with loss weight 0.

    Returns (chosen pool indices [num_groups], group_mask [num_groups] float32 1/0).
    """
    active_pool = np.asarray(active_pool, bool)
    if active_pool.size < num_groups:
        raise CatsimError(f"pool of {active_pool.size} groups cannot fill {num_groups}")
    order = np.concatenate([np.flatnonzero(active_pool), np.flatnonzero(~active_pool)])
    chosen = order[:num_groups]
    return chosen, active_pool[chosen].astype(np.float32)


# ----------------------------------------------------------------------------- advantages
def success_rates(scores_PxN, objective: ObjectiveConfig) -> np.ndarray:
    """μ̂ = (R̄ − Rw)/(Rc − Rw) of each group ([P] float32), `objectives.advantages.success_rate`."""
    levels = (objective.reward_correct, objective.reward_wrong)
    return np.asarray(_success_rates(levels, jnp.asarray(scores_PxN, jnp.float32)), np.float32)


@functools.partial(jax.jit, static_argnums=0)  # one small program per run instead of many eager ops
def _success_rates(levels: tuple[float, float], scores_PxN):
    rc, rw = levels
    rate = functools.partial(adv_lib.success_rate, reward_correct=rc, reward_wrong=rw)
    return jax.vmap(rate)(rw + scores_PxN * (rc - rw))


@dataclasses.dataclass(frozen=True)
class AdvantageSettings:
    """The part of a run's settings its advantages depend on (hashable: the static argument of the
    advantage program, so that options which do not change it do not recompile it)."""

    rule: str  # the registry rule (the method's, or the --advantage override)
    options: registry.Options  # its k, ε, GRPO ddof, W-REINFORCE λ
    reward_levels: tuple[float, float]  # (Rc, Rw)
    positive_weight: float  # catsim's λ on positive advantages (1 = off)
    batch_renorm: bool
    overlong: tuple[int, int, float] | None  # DAPO's punishment (max_new_tokens, ramp, penalty); None = off
    unlikeliness_beta: float = 0.0  # β of the unlikeliness reward on the scores (0 = off)

    @classmethod
    def of(cls, cfg: RLConfig) -> AdvantageSettings:
        spec, o = cfg.method_spec(), cfg.objective
        overlong = ((cfg.rollout.max_new_tokens, cfg.overlong_buffer_tokens, o.overlong_penalty)
                    if spec.overlong_shaping else None)
        return cls(spec.advantage, cfg.rare.options(eps=o.adv_eps, ddof=1 if o.adv_std == "sample" else 0),
                   (o.reward_correct, o.reward_wrong), cfg.rare.positive_weight, o.batch_renorm, overlong,
                   unlikeliness_beta=cfg.rare.unlikeliness_beta)


def compute_advantages(scores_PxN, cfg: RLConfig, gamma: float, group_mask_P=None, success_rate_P=None,
                       lengths_PxN=None, logp_PxN=None):
    """Per-rollout advantages of P groups, from the shared objectives code.

    Args:
      scores_PxN: verifier scores in [0, 1]; rewards are R = Rw + s·(Rc − Rw).
      cfg: the run's settings (its `AdvantageSettings`: the registry rule, Rc, Rw, ε, the GRPO std,
        batch renorm, DAPO's overlong punishment).
      gamma: γ of this step (focal weight g = (1 − μ̂)^γ per group).
      group_mask_P: 1 for groups that carry loss (dynamic sampling drops the others); default all.
      success_rate_P: μ̂ of each group if already known (`success_rates`); computed otherwise.
      lengths_PxN: completion lengths in tokens; with the overlong punishment on (method dapo), the
        rewards get `objectives.rewards.overlong_penalty(length, max_new_tokens, buffer, penalty)`
        added (μ̂, and so the focal weight, stays the verifier's success rate).
      logp_PxN: each completion's mean response-token log-prob under the behaviour policy
        (`behaviour.completion_logps`); with the unlikeliness reward on (unlikeliness_beta > 0) the
        scores of each group become `objectives.rewards.unlikeliness(s, logp, β)` before the rewards,
        the rule's advantage and the focal weight, as in the simulator (μ̂ stays the verifier's).

    Returns:
      (adv_PxN, success_rate_P, g_P) as float32 numpy arrays; adv is 0 for masked groups.
    """
    scores = jnp.asarray(scores_PxN, jnp.float32)
    if scores.ndim != 2:
        raise CatsimError(f"scores must be P x N, got shape {scores.shape}")
    if not (np.isfinite(gamma) and gamma >= 0):  # the traced focal weight cannot check it
        raise CatsimError(f"gamma must be a finite number >= 0, got {gamma}")
    settings = AdvantageSettings.of(cfg)
    if settings.overlong is not None and lengths_PxN is None:
        raise CatsimError("the overlong punishment needs the completion lengths")
    if settings.unlikeliness_beta > 0 and logp_PxN is None:
        raise CatsimError("the unlikeliness reward needs each completion's behaviour log-probs")
    mask = (jnp.ones(scores.shape[0], jnp.float32) if group_mask_P is None
            else jnp.asarray(group_mask_P, jnp.float32))
    mu = (_success_rates(settings.reward_levels, scores) if success_rate_P is None
          else jnp.asarray(success_rate_P, jnp.float32))
    lengths = (None if lengths_PxN is None or settings.overlong is None
               else jnp.asarray(lengths_PxN, jnp.float32))
    logp = None if settings.unlikeliness_beta == 0 else jnp.asarray(logp_PxN, jnp.float32).reshape(scores.shape)
    adv, g = _advantages(settings, scores, mask, mu, jnp.float32(gamma), lengths, logp)
    return np.asarray(adv, np.float32), np.asarray(mu, np.float32), np.asarray(g, np.float32)


@functools.partial(jax.jit, static_argnums=0)  # one small program per run instead of many eager ops
def _advantages(settings: AdvantageSettings, scores, mask, mu, gamma, lengths_PxN, logp_PxN=None):
    rc, rw = settings.reward_levels
    shaped = scores  # the unlikeliness reward: correct scores × (1 − β·rank/N), ranked within each group
    if settings.unlikeliness_beta > 0:
        shaped = jax.vmap(functools.partial(rewards_lib.unlikeliness, beta=settings.unlikeliness_beta))(
            scores, logp_PxN)
    rewards = rw + shaped * (rc - rw)
    if settings.overlong is not None:
        max_new_tokens, ramp, penalty = settings.overlong
        rewards = rewards + rewards_lib.overlong_penalty(
            jnp.asarray(lengths_PxN, jnp.float32), max_new_tokens, ramp, penalty).astype(jnp.float32)
    rule = registry.get(settings.rule)
    # the binary rules read the 0/1 verifier outcome (score > 1/2 is correct)
    inputs = (scores > 0.5).astype(jnp.float32) if rule.binary else rewards
    # B of a batch-level rule (A-GRAE): over the groups that carry loss this step
    batch_mean = registry.batch_mean(inputs, mask) if rule.reads_batch_mean else None
    base = jax.vmap(lambda r: rule.advantages(r, settings.options, batch_mean))(inputs)
    if settings.positive_weight != 1.0:
        base = base * losses.positive_sample_weight(base, settings.positive_weight)
    g = focal.focal_weight(mu, gamma)
    adv = g[:, None] * base * mask[:, None]
    if settings.batch_renorm:
        adv = adv_lib.batch_renormalise(adv, jnp.broadcast_to(mask[:, None], adv.shape))
    return adv, g


# ----------------------------------------------------------------------------- the batch
def completion_widths(max_new_tokens: int, smallest: int = 8) -> tuple[int, ...]:
    """The completion widths a training batch is padded to: powers of two from `smallest` below
    `max_new_tokens`, then `max_new_tokens` itself (one compiled update per width)."""
    widths, w = [], smallest
    while w < max_new_tokens:
        widths.append(w)
        w *= 2
    return (*widths, max_new_tokens)


def completion_width(groups: Groups, max_new_tokens: int) -> int:
    """The smallest of `completion_widths` that holds the batch's longest completion."""
    longest = int(groups.mask.sum(axis=1).max()) if groups.mask.size else 0
    return next(w for w in completion_widths(max_new_tokens) if w >= longest)


def trim_completions(groups: Groups, width: int) -> Groups:
    """The groups with completion arrays cut to `width` columns. Only padding is cut (`width` ≥
    every completion's length); the model being causal and the padding masked, every real
    position's log-prob, and so the loss and its gradient, are unchanged."""
    if width < int(groups.mask.sum(axis=1).max(initial=0)):
        raise CatsimError(f"completion width {width} would cut real tokens")
    return dataclasses.replace(groups, tokens=groups.tokens[:, :width], mask=groups.mask[:, :width])


def build_batch(groups: Groups, adv_PxN: np.ndarray, group_mask_P: np.ndarray) -> dict[str, np.ndarray]:
    """Training arrays (rows prompt-major): tokens/real B x T, and B x (T−1) loss_mask and adv aligned
    with the predicted tokens (prompt width W: response token j sits at target index W−1+j)."""
    n = adv_PxN.shape[1]
    tokens = np.concatenate([groups.prompt_tokens, groups.tokens], axis=1).astype(np.int32)
    real = np.concatenate([groups.prompt_mask, groups.mask], axis=1)
    w = groups.prompt_tokens.shape[1]
    resp = np.zeros((tokens.shape[0], tokens.shape[1] - 1), np.float32)
    resp[:, w - 1:] = groups.mask
    row_weight = np.repeat(group_mask_P.astype(np.float32), n)
    loss_mask = resp * row_weight[:, None]
    adv = adv_PxN.reshape(-1)[:, None] * resp
    return {"tokens": tokens, "real": real, "loss_mask": loss_mask, "adv": adv.astype(np.float32)}


def shared_prompt_batch(batch: dict[str, np.ndarray], prompt_width: int, group_size: int) -> dict[str, np.ndarray]:
    """The batch with each group's prompt once: prompt_tokens/prompt_real P x W (row p is the
    prompt of rows p·n … p·n + n − 1), tokens/real B x M the completions, and every per-token
    array B x M, completion-aligned (the B x (T−1) arrays from column W − 1 on). The update scores
    it with `scoring.grouped_token_logps`: one prompt pass per group instead of one per rollout,
    the same loss and gradient up to float rounding."""
    w, n = prompt_width, group_size
    prompts, prompt_real = batch["tokens"][::n, :w], batch["real"][::n, :w]
    if batch["tokens"].shape[0] % n or not (
            np.array_equal(np.repeat(prompts, n, axis=0), batch["tokens"][:, :w])
            and np.array_equal(np.repeat(prompt_real, n, axis=0), batch["real"][:, :w])):
        raise CatsimError(f"the batch's rows do not come in groups of {n} sharing a prompt")
    out = {k: v[:, w - 1:] for k, v in batch.items() if k not in ("tokens", "real")}
    out.update(prompt_tokens=prompts, prompt_real=prompt_real, tokens=batch["tokens"][:, w:],
               real=batch["real"][:, w:])
    return {k: np.ascontiguousarray(v) for k, v in out.items()}  # plain copies to the device


def batch_rows(batch: dict, start: int, size: int) -> dict:
    """Rows [start, start + size) of a batch (either layout; in the shared-prompt one, `start` and
    `size` are multiples of the group size and the prompt arrays are cut to the matching groups)."""
    if "prompt_tokens" not in batch:
        return {k: v[start:start + size] for k, v in batch.items()}
    n = batch["tokens"].shape[0] // batch["prompt_tokens"].shape[0]
    return {k: v[start // n:(start + size) // n] if k.startswith("prompt_") else v[start:start + size]
            for k, v in batch.items()}


def truncated_rows(groups: Groups) -> np.ndarray:
    """[P·N] bool: completions that hit max_new_tokens without a stop token."""
    return ~np.asarray(groups.finished, bool)


def filter_overlong(batch: dict, groups: Groups, cfg: RLConfig) -> dict:
    """DAPO's overlong filtering (`objectives.rewards.overlong_keep`) when `overlong_filter` is on:
    truncated completions get loss mask 0. Their rewards still enter their group's advantages."""
    if not cfg.objective.overlong_filter:
        return batch
    keep = np.asarray(rewards_lib.overlong_keep(truncated_rows(groups)), np.float32)
    return {**batch, "loss_mask": batch["loss_mask"] * keep[:, None]}


# ----------------------------------------------------------------------------- the loss
def policy_loss(logp, old_logp, adv, loss_mask, spec: Method, cfg: RLConfig, entropy=None, ref_logp=None):
    """The method's aggregated loss and its metrics from per-token arrays B x T'.

    `loss_mask` is 1 on response tokens of kept groups; `adv` is each token's sequence advantage.
    clip_low_frac / clip_high_frac: the token share clipped on each side (PPO: ρ < 1 − ε_low with
    A < 0 / ρ > 1 + ε_high with A > 0; CISPO: its importance weight, ρ below / above the range).
    """
    o = cfg.objective
    surrogate = losses.SURROGATES[spec.surrogate]
    dual = {} if o.clip_ratio_c is None else {"clip_ratio_c": o.clip_ratio_c}  # verl's dual clip
    per_token = surrogate(logp, old_logp, adv, clip_low=spec.clip_low, clip_high=spec.clip_high, **dual)
    metrics = {}
    if ref_logp is not None:
        if o.kl_bias_correction:  # TRL's use_bias_correction_kl: k3 × π/π_old
            kl_term = losses.kl_k3_bias_corrected(logp, old_logp, ref_logp)
        else:
            kl_term = (losses.kl_k3 if o.kl_estimator == "k3" else losses.kl_k1)(logp, ref_logp)
        if o.kl_coef > 0:
            per_token = per_token + o.kl_coef * kl_term
        metrics["kl"] = losses.token_mean(losses.kl_k3(logp, ref_logp), loss_mask)
    if entropy is not None:
        if o.entropy_coef > 0:
            per_token = per_token - o.entropy_coef * entropy
        metrics["entropy"] = losses.token_mean(entropy, loss_mask)
    if spec.aggregation == "token_mean":
        loss = losses.token_mean(per_token, loss_mask)
    elif spec.aggregation == "sequence_mean":
        loss = losses.sequence_mean(per_token, loss_mask)
    else:
        loss = losses.token_sum_constant(per_token, loss_mask, cfg.rollout.max_new_tokens)
    if spec.surrogate == "cispo":  # the importance weight clipped below 1 − ε_low / above 1 + ε_high
        ratio = jnp.exp(logp - old_logp)
        low = (ratio < 1.0 - spec.clip_low).astype(per_token.dtype)
        high = (ratio > 1.0 + spec.clip_high).astype(per_token.dtype)
    else:
        low, high = losses.ppo_clip_fractions(logp, old_logp, adv, clip_low=spec.clip_low,
                                              clip_high=spec.clip_high)
    metrics["clip_low_frac"] = losses.token_mean(low, loss_mask)
    metrics["clip_high_frac"] = losses.token_mean(high, loss_mask)
    metrics["loss"] = loss
    return loss, metrics


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """`optax.clip_by_global_norm`'s rule g·min(1, max_norm/‖g‖) written as one multiplication by a
    scalar per leaf (equal to optax's (g/‖g‖)·max_norm up to float rounding). XLA fuses such a
    multiplication into each of its consumers (Adam's two moments), where it keeps optax's division
    as a separate gradient-sized temporary: the whole gradient again at the optimizer step."""

    def update_fn(updates, state, params=None):
        del params
        g_norm = optax.tree.norm(updates)
        scale = jnp.where(g_norm < max_norm, 1.0, max_norm / g_norm)
        return jax.tree.map(lambda t: t * scale.astype(t.dtype), updates), state

    return optax.GradientTransformation(optax.init_empty_state, update_fn)


def make_optimizer(cfg: RLConfig) -> optax.GradientTransformation:
    """clip_by_global_norm(grad_clip) then AdamW(0.9, 0.999, wd); lr warm-up counted in RL steps."""
    per_step, opt = cfg.updates_per_step, cfg.optimizer
    peak, warm = cfg.peak_lr, opt.warmup_steps

    def schedule(count):
        rl_step = count // per_step
        return peak * jnp.minimum(1.0, (rl_step + 1) / max(warm, 1)) if warm else peak

    clip = (dual_threshold_clip(opt.grad_clip, opt.dual_clip_lower, opt.dual_clip_amplification)
            if cfg.use("dual_clip") else clip_by_global_norm(opt.grad_clip))
    return optax.chain(clip, optax.adamw(schedule, b1=0.9, b2=0.999, weight_decay=opt.weight_decay))


def lr_at(cfg: RLConfig, step: int) -> float:
    """Learning rate of RL step `step` (0-based), as `make_optimizer` applies it."""
    warm = cfg.optimizer.warmup_steps
    return cfg.peak_lr if not warm else cfg.peak_lr * min(1.0, (step + 1) / warm)


# ----------------------------------------------------------------------------- jitted functions
class Functions(NamedTuple):
    """The jitted pieces of an RL step (see `make_functions`). τ is the log-prob temperature
    (`RLConfig.logprob_temperature`), a float32 scalar argument (changing it does not recompile)."""

    logp: Any  # (params, tokens_BxT, real_BxT, τ) -> (logp B x (T−1), None)
    update: Any  # (params, opt_state, batch, τ) -> (params, opt_state, metrics); DONATES params, opt_state
    grads: Any  # (params, batch, τ) -> (grads, metrics): the mini-batch gradient, micro-batched or not
    optimizer: Any  # the optax transformation `update` applies
    confidence: Any = None  # (params, tokens_BxT, real_BxT) -> B x (T−1) confidence weights


def make_functions(model_cfg: ModelConfig, cfg: RLConfig, activation_sharding=None) -> Functions:
    """Jitted step functions, cached per (model, loss-relevant settings, sharding) so
    runs in one process (resume, sweeps, tests) compile once.

    logp_fn(params, tokens_BxT, real_BxT, τ=1) -> (logp B x (T−1), None)
    update_fn(params, opt_state, batch, τ=1) -> (params, opt_state, metrics); batch holds tokens,
    real, loss_mask, adv and, optionally, old_logp (without it the behaviour policy is the current
    one: exact when the parameters have not moved since sampling, and one forward pass fewer) and
    ref_logp; or the same in the layout of `shared_prompt_batch` (each group's prompt once, scored
    by `scoring.grouped_token_logps`). The parameters and optimiser state passed to update_fn are
    donated (their buffers are reused for the result): callers keep only what it returns.

    Log-probs and entropies are scored by `catsim.llm.scoring`: whole B x T x V logits only within
    `chunked_logps.WHOLE_LOGITS_ELEMENTS`, slices beyond it; at entropy coefficient 0 the entropy is
    logged only (`entropy_grad=False`: no term of it in the backward pass).
    """
    # settings that only steer the host loop (γ enters through the advantages) share one compilation;
    # so do group sizes with the same rollouts per step (the compiled code sees rows, not groups)
    neutral = dataclasses.replace(
        cfg, gamma=GammaSchedule(), run=RunConfig(),
        rollout=dataclasses.replace(cfg.rollout, prompts_per_step=cfg.rollouts_per_step, group_size=1,
                                    batch_size=0),
        optimizer=dataclasses.replace(cfg.optimizer, mini_batch_prompts=0, mini_batch_size=cfg.mini_batch),
        objective=dataclasses.replace(cfg.objective, max_sampling_rounds=1, adv_std="population",
                                      logprob_temperature="sampling",
                                      dynamic_sampling=cfg.method_spec().dynamic_sampling),
        rare=RareConfig())  # advantages come in with the batch; k against N = 1 would be refused
    return _make_functions(model_cfg, neutral, activation_sharding)


@functools.lru_cache(maxsize=16)
def _make_functions(model_cfg: ModelConfig, cfg: RLConfig, activation_sharding=None):
    optimizer = make_optimizer(cfg)
    spec = cfg.method_spec()

    @jax.jit
    def logp_fn(params, tokens, real, temperature=1.0):
        return token_logps(params, model_cfg, tokens, real, activation_sharding, temperature=temperature,
                           entropy=False)

    trained_entropy = cfg.objective.entropy_coef > 0  # else logged only: no B·T·V term in the backward pass

    def loss_fn(params, batch, temperature):
        if "prompt_tokens" in batch:  # `shared_prompt_batch`: each group's prompt runs once
            logp, ent = grouped_token_logps(params, model_cfg, batch["prompt_tokens"], batch["prompt_real"],
                                            batch["tokens"], batch["real"], activation_sharding,
                                            temperature=temperature, entropy_grad=trained_entropy)
        else:
            logp, ent = token_logps(params, model_cfg, batch["tokens"], batch["real"], activation_sharding,
                                    temperature=temperature, entropy_grad=trained_entropy)
        # no old_logp: the batch was sampled from these very parameters (one update per step)
        old = batch["old_logp"] if "old_logp" in batch else jax.lax.stop_gradient(logp)
        return policy_loss(logp, old, batch["adv"], batch["loss_mask"], spec, cfg,
                           entropy=ent, ref_logp=batch.get("ref_logp"))

    n_micro = cfg.mini_batch // cfg.micro_batch if cfg.optimizer.micro_batch_size else 1

    def grads_and_metrics(params, batch, temperature=1.0):
        if n_micro == 1:
            (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, temperature)
            return grads, metrics
        # gradient accumulation: each micro-batch's loss is re-weighted so the sum is exactly the
        # mini-batch loss (token counts for token-mean, sequences with tokens for the sequence
        # mean, rows for the Dr.GRPO constant normaliser)
        micro = jax.tree.map(lambda a: a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:]), batch)
        counts = jnp.sum(micro["loss_mask"], axis=(1, 2))
        token_w = counts / jnp.maximum(jnp.sum(counts), 1e-30)
        if spec.aggregation == "token_mean":
            loss_w = token_w
        elif spec.aggregation == "sequence_mean":
            seqs = jnp.sum(jnp.any(micro["loss_mask"] > 0, axis=2), axis=1).astype(jnp.float32)
            loss_w = seqs / jnp.maximum(jnp.sum(seqs), 1.0)
        else:
            loss_w = jnp.full((n_micro,), 1.0 / n_micro)

        def weighted(params, mb, lw, tw):
            loss, metrics = loss_fn(params, mb, temperature)
            return loss * lw, jax.tree.map(lambda m: m * tw, metrics)

        def body(acc, xs):
            mb, lw, tw = xs
            (_, metrics), grads = jax.value_and_grad(weighted, has_aux=True)(params, mb, lw, tw)
            metrics["loss"] = metrics["loss"] * lw / jnp.where(tw > 0, tw, 1.0)
            return jax.tree.map(jnp.add, acc, (grads, metrics)), None

        first = jax.tree.map(lambda a: a[0], micro)
        shapes = jax.eval_shape(lambda: weighted(params, first, 1.0, 1.0)[1])
        zeros = (jax.tree.map(jnp.zeros_like, params), jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes))
        (grads, metrics), _ = jax.lax.scan(body, zeros, (micro, loss_w, token_w))
        return grads, metrics

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def update_fn(params, opt_state, batch, temperature=1.0):
        grads, metrics = grads_and_metrics(params, batch, temperature)
        metrics["grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    @jax.jit
    def confidence_fn(params, tokens, real):  # asym-GRPO §2.1, from the next-token logits, by chunks
        h = hidden_states(params, model_cfg, tokens, mask_BxT=real, activation_sharding=activation_sharding)
        return over_logit_chunks(params, model_cfg, h[:, :-1], functools.partial(
            asymmetric.confidence_weight, baseline=cfg.asym.baseline, kl_direction=cfg.asym.kl_direction))

    return Functions(logp_fn, update_fn, jax.jit(grads_and_metrics), optimizer, confidence_fn)
