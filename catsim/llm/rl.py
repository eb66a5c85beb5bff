"""On-policy GRPO-family RL for the JAX transformer (F-GRPO §5.2–5.3, App. B, L).

One step (all of it a pure function of (base model, config, step), so a resumed run repeats an
uninterrupted one exactly):

1. draw `prompts_per_step` train prompts (seeded by (seed, step)), sample N = `group_size`
   completions of each with the KV-cache sampler (per-sample keys: (step key, prompt index,
   sample index)), score them with the task's verifier (a score in [0, 1], binary or graded);
   DAPO's dynamic sampling draws further prompt batches until enough groups are active;
2. group-relative advantages from `catsim.objectives` (GRPO / Dr.GRPO), times the focal weight
   g = (1 − μ̂)^γ (F-GRPO, γ from a `GammaSchedule`), optionally re-normalised over the batch;
3. PPO-style updates: the step's rollouts are split into mini-batches of `mini_batch_size`
   rollouts, `ppo_epochs` passes; per-token losses from `catsim.objectives.losses` (PPO clip,
   DAPO clip-higher, CISPO), plus β·KL to the frozen base model (k1 or k3) and −c·entropy;
   aggregation token-mean (GRPO/DAPO/CISPO) or the Dr.GRPO constant normaliser;
4. optax AdamW (0.9, 0.999), weight decay 0.01, global-norm clip 1.0, constant lr after a linear
   warm-up counted in RL steps; the App. N control runs GRPO at lr·m_γ (`low_lr_gamma`).

Methods (`METHODS`): grpo (clip 0.2/0.2), dapo (0.2/0.28, dynamic sampling), cispo (IS-weight
clip 1.0/5.0), dr_grpo (mean-centred advantage, token-sum / (B·max_new_tokens)). F-variants are
the same methods with γ > 0.

Files in the output directory:
    rl_config.json      the settings (and the base model path)
    rl_log.jsonl        one JSON line per step (see `STEP_METRICS`)
    rl_state.safetensors  params + optimizer state + step, rewritten atomically after every
                        `save_every` steps (default 1: a kill loses at most the step in flight)
    checkpoints/step_NNNNNN/   Hugging Face model snapshots every `snapshot_every` steps
    model/              the final policy as a Hugging Face model dir (+ tokenizer, task file)

Sharding: pass a `jax.sharding.Mesh` (catsim.llm.model.sharding.make_mesh): parameters and optimizer
state are FSDP-sharded, rollout and training batches split over ("data", "fsdp"). Multi-process
(`jax.distributed`, the mesh over all processes' devices): every process runs this loop on the same
global batches; sharded results come back to every process through `sharding.to_host` (an
all-gather), so all score the same rollouts; process 0 alone writes the log, the training state
and the model snapshots (the others wait at a barrier), and a resume reads the state on every process.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.metrics import active_fraction_prediction
from catsim.llm.model.transformer import Params, forward
from catsim.llm.model.sharding import barrier, is_primary, to_host
from catsim.llm.train_state import load_tree, save_tree, truncate_log
from catsim.objectives import advantages as adv_lib
from catsim.objectives import asymmetric, focal, losses
from catsim.objectives.grad_clip import dual_threshold_clip

STATE_FILE = "rl_state.safetensors"
LOG_FILE = "rl_log.jsonl"
CONFIG_FILE = "rl_config.json"
TASK_FILE = "catsim_task.json"

STEP_METRICS = {
    "step": "RL steps done (1-based)",
    "reward": "mean verifier score of the kept groups' rollouts",
    "success_rate": "mean group success rate μ̂ = (R̄ − Rw)/(Rc − Rw)",
    "active_fraction": "share of sampled groups whose rewards are not all equal",
    "active_pred_pooled": "Lemma 3.1 1 − μ̄^N − (1 − μ̄)^N at the batch-mean μ̄",
    "active_pred_groups": "mean over groups of 1 − μ̂^N − (1 − μ̂)^N (plug-in; biased low)",
    "gamma": "γ used this step",
    "mean_g": "mean focal weight (1 − μ̂)^γ over active kept groups (null if none)",
    "entropy": "token-mean policy entropy (nats) over response tokens",
    "clip_low_frac": "token share clipped at 1 − ε_low with A < 0 (PPO/DAPO) or IS-clipped (CISPO)",
    "clip_high_frac": "token share clipped at 1 + ε_high with A > 0 (PPO/DAPO); 0 for CISPO",
    "kl": "token-mean k3 estimate of KL(π‖π_ref) (null without a reference)",
    "response_length": "mean generated tokens per rollout (stop token included)",
    "grad_norm": "mean pre-clip global gradient norm over the step's updates",
    "loss": "mean mini-batch loss",
    "lr": "learning rate of this step",
    "sampling_rounds": "prompt batches drawn (> 1 only with dynamic sampling)",
    "groups_kept": "groups that carry loss this step",
    "tokens_per_second": "generated tokens per second of rollout time",
    "step_seconds": "wall time of the step",
    "temperature": "rollout temperature of this step (asym-GRPO schedule; constant otherwise)",
    "kept_rollouts": "rollouts carrying loss after batch recomposition (all kept ones otherwise)",
    "heldout_accuracy": "share of held-out prompts solved, one sample each at τ = temperature, after this "
                        "step (every heldout_every steps; null otherwise)",
    "warnings": "safeguard warnings raised at this step (reward collapse, exploration stagnation)",
}


@dataclass(frozen=True)
class Method:
    """How one GRPO-family method turns rewards into a loss (the paper's App. B)."""

    surrogate: str  # key of catsim.objectives.losses.SURROGATES
    clip_low: float  # ε_low (CISPO: 1.0 means no lower clip)
    clip_high: float  # ε_high
    advantage: str  # "grpo" (std-normalised) or "dr_grpo" (mean-centred)
    aggregation: str  # "token_mean" or "token_sum_constant" (Dr.GRPO)
    dynamic_sampling: bool  # keep only active groups, drawing more prompts (DAPO)
    asymmetric: bool = False  # default of the asym-GRPO components (issue 9)


METHODS = {
    "grpo": Method("grpo", 0.2, 0.2, "grpo", "token_mean", False),
    "dapo": Method("dapo", 0.2, 0.28, "grpo", "token_mean", True),
    "cispo": Method("cispo", 1.0, 5.0, "grpo", "token_mean", False),
    "dr_grpo": Method("grpo", 0.2, 0.2, "dr_grpo", "token_sum_constant", False),
    # GRPO + every asymmetric component on by default (each switchable, docs/asymmetric-grpo.md)
    "asym-grpo": Method("grpo", 0.2, 0.2, "grpo", "token_mean", False, asymmetric=True),
}
TEMPERATURE_SCHEDULES = ("constant", "cosine", "stepwise")


@dataclass(frozen=True)
class RLConfig:
    """Settings of one RL run (CPU-sized defaults; the paper's LLM values in comments)."""

    method: str = "grpo"  # one of METHODS
    gamma: float = 0.0  # focal exponent γ (0 = plain method; paper F-GRPO: 0.5)
    gamma_schedule: str = "constant"  # "constant", "warmup", "curriculum" or "switch" (catsim.objectives.focal)
    gamma_start: float = 0.0  # γ at step 0 (warmup) / below success_low (curriculum)
    gamma_warmup_steps: int = 0  # warmup: steps of the linear γ increase
    gamma_switch_step: int = 0  # switch: first step with γ (GRPO before it)
    gamma_success_low: float = 0.3  # curriculum: batch success rate at/below which γ = gamma_start
    gamma_success_high: float = 0.7  # curriculum: batch success rate at/above which γ = gamma
    low_lr_gamma: float = 0.0  # App. N control: > 0 multiplies the lr by m_γ at this γ
    steps: int = 50  # RL steps
    prompts_per_step: int = 8  # prompts per step (paper: global batch 256)
    group_size: int = 8  # N rollouts per prompt
    mini_batch_size: int = 0  # rollouts per optimizer update; 0 = all of the step (paper: 64 of 256)
    micro_batch_size: int = 0  # rollouts per forward/backward pass (gradient accumulation); 0 = mini-batch
    ppo_epochs: int = 1  # passes over the step's rollouts (paper: 1)
    learning_rate: float = 1e-4  # peak lr (paper LLM: 1e-6; Maze: 1e-4)
    warmup_steps: int = 0  # linear lr warm-up in RL steps (paper: 15)
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    grad_clip: float = 1.0  # global gradient-norm clip
    clip_low: float | None = None  # override the method's ε_low
    clip_high: float | None = None  # override the method's ε_high
    dynamic_sampling: bool | None = None  # override the method's default (on for DAPO)
    max_sampling_rounds: int = 4  # dynamic sampling: most prompt batches drawn per step
    kl_coef: float = 0.0  # β of the KL penalty to the frozen base model (paper: 0; control 1e-3, 1e-2)
    kl_estimator: str = "k3"  # "k1" or "k3"
    entropy_coef: float = 0.0  # entropy bonus coefficient (control: 1e-4, 1e-3)
    reward_correct: float = 1.0  # Rc: reward of a verifier score of 1
    reward_wrong: float = 0.0  # Rw ≤ 0 allowed: reward of a score of 0 (graded scores map linearly)
    batch_renorm: bool = False  # re-normalise advantages over the whole batch
    adv_eps: float = 1e-6  # ε in the GRPO std denominator
    temperature: float = 1.0  # sampling temperature (paper: 1.0)
    top_p: float = 1.0  # nucleus sampling (paper: 1.0)
    max_new_tokens: int = 32  # completion length cap
    score_truncated: bool = False  # verify completions that hit max_new_tokens (default: they score 0)
    rollout_batch_size: int = 0  # rollouts sampled per generate call; 0 = all at once
    seed: int = 0  # prompt order and sampling keys
    data_seed: int = 0  # the task's split seed (must match the warm-up's)
    save_every: int = 1  # training-state save period in steps
    snapshot_every: int = 0  # Hugging Face snapshot period in steps (0 = final model only)
    # asymmetric GRPO (issue 9, docs/asymmetric-grpo.md); None = on for asym-grpo, off otherwise
    asym_channels: bool | None = None  # A>0 → w⁺(score)·A; A<0 → w⁻(π̄)·A, π̄ = exp(mean token log-prob)
    asym_confidence: bool | None = None  # A<0 also × the mean token confidence b + (1−b)·sigmoid(−KL)
    asym_recompose: bool | None = None  # per group, loss only on the rollouts recompose_group keeps
    asym_mixed: bool | None = None  # mixed groups: ×amplify top-k positives, drop negatives ≥ δ edits away
    mixed_delta: float = 2.0  # mixed groups: δ, in token edits to the nearest positive (article: 2.0)
    dual_clip: bool | None = None  # dual-threshold clip: grad_clip max-norm, ×amplification below lower
    dual_clip_lower: float = 0.1  # dual clip: lower gradient-norm threshold
    dual_clip_amplification: float = 1.5  # dual clip: amplification below the lower threshold
    temperature_schedule: str | None = None  # constant, cosine or stepwise; None = cosine for asym-grpo
    temperature_min: float = 0.2  # schedule floor τ_min (τ_max = temperature)
    temperature_fraction: float = 0.3  # share of the steps the schedule takes to reach τ_min
    negative_reading: str = "text"  # w⁻ reading: text (falls with π̄) or formula (grows with π̄)
    kl_direction: str = "uniform_to_policy"  # confidence-weight KL: uniform_to_policy or policy_to_uniform
    positive_threshold: float = 0.5  # recomposition: a rollout with score >= this is a positive
    negative_eps: float = 0.01  # w⁻ smoothing ε (article §4.2, the safeguard against reward collapse)
    heldout_every: int = 0  # safeguards: held-out accuracy every this many steps (collapse warning); 0 = never
    heldout_prompts: int = 32  # safeguards: held-out prompts scored, one sample each at τ = temperature

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise CatsimError(f"unknown RL method {self.method!r}; choose one of {', '.join(METHODS)}")
        for name in ("steps", "prompts_per_step", "group_size", "ppo_epochs", "max_new_tokens",
                     "save_every", "max_sampling_rounds", "heldout_prompts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CatsimError(f"rl {name} must be a positive integer, got {value!r}")
        for name in ("mini_batch_size", "micro_batch_size", "warmup_steps", "snapshot_every", "rollout_batch_size",
                     "seed", "data_seed", "gamma_warmup_steps", "gamma_switch_step", "heldout_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CatsimError(f"rl {name} must be a whole number >= 0, got {value!r}")
        for name in ("gamma", "low_lr_gamma", "weight_decay", "kl_coef", "entropy_coef", "adv_eps",
                     "temperature"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise CatsimError(f"rl {name} must be a finite number >= 0, got {value!r}")
        if not (np.isfinite(self.learning_rate) and self.learning_rate > 0) or not self.grad_clip > 0:
            raise CatsimError("learning_rate and grad_clip must be positive")
        if self.kl_estimator not in ("k1", "k3"):
            raise CatsimError(f"kl_estimator must be 'k1' or 'k3', got {self.kl_estimator!r}")
        if not self.reward_correct > self.reward_wrong:
            raise CatsimError("reward_correct must exceed reward_wrong")
        if self.mini_batch_size and self.rollouts_per_step % self.mini_batch_size:
            raise CatsimError(f"mini_batch_size {self.mini_batch_size} must divide the "
                              f"{self.rollouts_per_step} rollouts of a step")
        if self.micro_batch_size and self.mini_batch % self.micro_batch_size:
            raise CatsimError(f"micro_batch_size {self.micro_batch_size} must divide the mini-batch "
                              f"of {self.mini_batch} rollouts")
        if self.low_lr_gamma > 0 and self.gamma > 0:
            raise CatsimError("the low-lr control (low_lr_gamma) is a GRPO baseline: use gamma = 0")
        self.gamma_schedule_fn()  # validates the schedule fields
        self.asymmetric_config()  # validates the asymmetric-GRPO fields
        if self.temperature_plan() not in TEMPERATURE_SCHEDULES:
            raise CatsimError(f"temperature_schedule must be one of {', '.join(TEMPERATURE_SCHEDULES)}, "
                              f"got {self.temperature_schedule!r}")
        if self.temperature_plan() != "constant":
            self.rollout_temperature(0)  # validates τ_min ≤ τ_max and the fraction
        if self.use("dual_clip"):
            dual_threshold_clip(self.grad_clip, self.dual_clip_lower, self.dual_clip_amplification)
        if not 0.0 <= self.positive_threshold <= 1.0:
            raise CatsimError(f"positive_threshold must lie in [0, 1], got {self.positive_threshold}")

    def use(self, component: str) -> bool:
        """Whether an asymmetric-GRPO switch (asym_channels, …, dual_clip) is on for this run."""
        value = getattr(self, component)
        return METHODS[self.method].asymmetric if value is None else bool(value)

    def asymmetric_config(self) -> asymmetric.AsymmetricConfig:
        return asymmetric.AsymmetricConfig(kl_direction=self.kl_direction, negative_reading=self.negative_reading,
                                           negative_eps=self.negative_eps, delta=self.mixed_delta)

    def temperature_plan(self) -> str:
        if self.temperature_schedule is not None:
            return self.temperature_schedule
        return "cosine" if METHODS[self.method].asymmetric else "constant"

    def rollout_temperature(self, step: int) -> float:
        """Sampling temperature of RL step `step` (0-based): `temperature`, or the article's
        cosine / step-wise decay from it to `temperature_min` (catsim.objectives.asymmetric)."""
        plan = self.temperature_plan()
        if plan == "constant":
            return self.temperature
        fn = asymmetric.cosine_temperature if plan == "cosine" else asymmetric.stepwise_temperature
        return float(fn(step, self.steps, tau_max=self.temperature, tau_min=self.temperature_min,
                        fraction=self.temperature_fraction))

    @property
    def rollouts_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def mini_batch(self) -> int:
        return self.mini_batch_size or self.rollouts_per_step

    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.mini_batch

    @property
    def updates_per_step(self) -> int:
        return self.rollouts_per_step // self.mini_batch * self.ppo_epochs

    def method_spec(self) -> Method:
        spec = METHODS[self.method]
        return dataclasses.replace(
            spec,
            clip_low=spec.clip_low if self.clip_low is None else self.clip_low,
            clip_high=spec.clip_high if self.clip_high is None else self.clip_high,
            dynamic_sampling=spec.dynamic_sampling if self.dynamic_sampling is None else self.dynamic_sampling,
        )

    def gamma_schedule_fn(self) -> focal.GammaSchedule:
        return focal.GammaSchedule(
            kind=self.gamma_schedule, gamma=self.gamma, gamma_start=self.gamma_start,
            warmup_steps=self.gamma_warmup_steps, switch_step=self.gamma_switch_step,
            success_low=self.gamma_success_low, success_high=self.gamma_success_high)

    @property
    def peak_lr(self) -> float:
        """learning_rate, times m_γ for the App. N low-lr control."""
        if self.low_lr_gamma > 0:
            return self.learning_rate * focal.low_lr_multiplier(self.low_lr_gamma)
        return self.learning_rate

    def label(self) -> str:
        """Human label, e.g. "F-GRPO γ=0.5 N=8", "GRPO lr·m_0.5 N=8"."""
        name = {"grpo": "GRPO", "dapo": "DAPO", "cispo": "CISPO", "dr_grpo": "Dr.GRPO",
                "asym-grpo": "asym-GRPO"}[self.method]
        if self.gamma > 0 or self.gamma_schedule != "constant":
            name = f"F-{name} γ={self.gamma:g}"
        if self.low_lr_gamma > 0:
            name += f" lr·m_{self.low_lr_gamma:g}"
        return f"{name} N={self.group_size}"


# ----------------------------------------------------------------------------- advantages
def compute_advantages(scores_PxN, cfg: RLConfig, gamma: float, group_mask_P=None):
    """Per-rollout advantages of P groups, from the shared objectives code.

    Args:
      scores_PxN: verifier scores in [0, 1]; rewards are R = Rw + s·(Rc − Rw).
      cfg: the run's settings (method → GRPO or Dr.GRPO advantage, Rc, Rw, ε, batch renorm).
      gamma: γ of this step (focal weight g = (1 − μ̂)^γ per group).
      group_mask_P: 1 for groups that carry loss (dynamic sampling drops the others); default all.

    Returns:
      (adv_PxN, success_rate_P, g_P) as float32 numpy arrays; adv is 0 for masked groups.
    """
    scores = jnp.asarray(scores_PxN, jnp.float32)
    if scores.ndim != 2:
        raise CatsimError(f"scores must be P x N, got shape {scores.shape}")
    mask = jnp.ones(scores.shape[0], jnp.float32) if group_mask_P is None else jnp.asarray(group_mask_P, jnp.float32)
    rc, rw = cfg.reward_correct, cfg.reward_wrong
    rewards = rw + scores * (rc - rw)
    mu = jax.vmap(functools.partial(adv_lib.success_rate, reward_correct=rc, reward_wrong=rw))(rewards)
    adv = jax.vmap(functools.partial(
        focal.focal_group_advantages, gamma=float(gamma), kind=cfg.method_spec().advantage,
        reward_correct=rc, reward_wrong=rw, eps=cfg.adv_eps))(rewards)
    adv = adv * mask[:, None]
    if cfg.batch_renorm:
        adv = adv_lib.batch_renormalise(adv, jnp.broadcast_to(mask[:, None], adv.shape))
    g = focal.focal_weight(mu, float(gamma))
    return np.asarray(adv, np.float32), np.asarray(mu, np.float32), np.asarray(g, np.float32)


# ----------------------------------------------------------------------------- losses
def token_logps(params: Params, model_cfg: ModelConfig, tokens_BxT, real_BxT, activation_sharding=None):
    """(log π(token_t+1 | ≤ t), entropy at t), both B x (T−1): position t predicts token t+1."""
    logits_BxTxV = forward(params, model_cfg, tokens_BxT, mask_BxT=real_BxT,
                           activation_sharding=activation_sharding)[:, :-1].astype(jnp.float32)
    logp = losses.action_log_probs(logits_BxTxV, tokens_BxT[:, 1:])
    return logp, losses.entropy(logits_BxTxV)


def policy_loss(logp, old_logp, adv, loss_mask, spec: Method, cfg: RLConfig, entropy=None, ref_logp=None):
    """The method's aggregated loss and its metrics from per-token arrays B x T'.

    `loss_mask` is 1 on response tokens of kept groups; `adv` is each token's sequence advantage.
    """
    surrogate = losses.SURROGATES[spec.surrogate]
    per_token = surrogate(logp, old_logp, adv, clip_low=spec.clip_low, clip_high=spec.clip_high)
    metrics = {}
    if ref_logp is not None:
        kl_fn = losses.kl_k3 if cfg.kl_estimator == "k3" else losses.kl_k1
        if cfg.kl_coef > 0:
            per_token = per_token + cfg.kl_coef * kl_fn(logp, ref_logp)
        metrics["kl"] = losses.token_mean(losses.kl_k3(logp, ref_logp), loss_mask)
    if entropy is not None:
        if cfg.entropy_coef > 0:
            per_token = per_token - cfg.entropy_coef * entropy
        metrics["entropy"] = losses.token_mean(entropy, loss_mask)
    if spec.aggregation == "token_mean":
        loss = losses.token_mean(per_token, loss_mask)
    else:
        loss = losses.token_sum_constant(per_token, loss_mask, cfg.max_new_tokens)
    if spec.surrogate == "cispo":
        low = losses.cispo_clip_fraction(logp, old_logp, clip_low=spec.clip_low, clip_high=spec.clip_high)
        high = jnp.zeros_like(low)
    else:
        low, high = losses.ppo_clip_fractions(logp, old_logp, adv, clip_low=spec.clip_low,
                                              clip_high=spec.clip_high)
    metrics["clip_low_frac"] = losses.token_mean(low, loss_mask)
    metrics["clip_high_frac"] = losses.token_mean(high, loss_mask)
    metrics["loss"] = loss
    return loss, metrics


def make_optimizer(cfg: RLConfig) -> optax.GradientTransformation:
    """clip_by_global_norm(grad_clip) then AdamW(0.9, 0.999, wd); lr warm-up counted in RL steps."""
    per_step = cfg.updates_per_step
    peak, warm = cfg.peak_lr, cfg.warmup_steps

    def schedule(count):
        rl_step = count // per_step
        return peak * jnp.minimum(1.0, (rl_step + 1) / max(warm, 1)) if warm else peak

    clip = (dual_threshold_clip(cfg.grad_clip, cfg.dual_clip_lower, cfg.dual_clip_amplification)
            if cfg.use("dual_clip") else optax.clip_by_global_norm(cfg.grad_clip))
    return optax.chain(clip,
                       optax.adamw(schedule, b1=0.9, b2=0.999, weight_decay=cfg.weight_decay))


def lr_at(cfg: RLConfig, step: int) -> float:
    """Learning rate of RL step `step` (0-based), as `make_optimizer` applies it."""
    if not cfg.warmup_steps:
        return cfg.peak_lr
    return cfg.peak_lr * min(1.0, (step + 1) / cfg.warmup_steps)


class Functions(NamedTuple):
    """The jitted pieces of an RL step (see `make_functions`)."""

    logp: Any  # (params, tokens_BxT, real_BxT) -> (logp, entropy), B x (T−1)
    update: Any  # (params, opt_state, batch) -> (params, opt_state, metrics)
    grads: Any  # (params, batch) -> (grads, metrics): the mini-batch gradient, micro-batched or not
    optimizer: Any  # the optax transformation `update` applies
    confidence: Any = None  # (params, tokens_BxT, real_BxT) -> B x (T−1) confidence weights


def make_functions(model_cfg: ModelConfig, cfg: RLConfig, activation_sharding=None) -> Functions:
    """Jitted step functions, cached per (model, loss-relevant settings, sharding) so
    runs in one process (resume, sweeps, tests) compile once.

    logp_fn(params, tokens_BxT, real_BxT) -> (logp, entropy)  B x (T−1)
    update_fn(params, opt_state, batch) -> (params, opt_state, metrics); batch holds tokens, real,
    loss_mask, adv, old_logp and (optionally) ref_logp.
    """
    # fields that only steer the host loop (γ enters through the advantages) share one compilation;
    # so do group sizes with the same rollouts per step (the compiled code sees rows, not groups)
    neutral = dataclasses.replace(cfg, steps=1, seed=0, data_seed=0, save_every=1, snapshot_every=0,
                                  prompts_per_step=cfg.rollouts_per_step, group_size=1,
                                  rollout_batch_size=0, max_sampling_rounds=1, gamma=0.0,
                                  gamma_schedule="constant", gamma_start=0.0, gamma_warmup_steps=0,
                                  gamma_switch_step=0, dynamic_sampling=cfg.method_spec().dynamic_sampling,
                                  heldout_every=0, heldout_prompts=1)
    return _make_functions(model_cfg, neutral, activation_sharding)


@functools.lru_cache(maxsize=16)
def _make_functions(model_cfg: ModelConfig, cfg: RLConfig, activation_sharding=None):
    optimizer = make_optimizer(cfg)
    spec = cfg.method_spec()

    @jax.jit
    def logp_fn(params, tokens, real):
        return token_logps(params, model_cfg, tokens, real, activation_sharding)

    def loss_fn(params, batch):
        logp, ent = token_logps(params, model_cfg, batch["tokens"], batch["real"], activation_sharding)
        return policy_loss(logp, batch["old_logp"], batch["adv"], batch["loss_mask"], spec, cfg,
                           entropy=ent, ref_logp=batch.get("ref_logp"))

    n_micro = cfg.mini_batch // cfg.micro_batch if cfg.micro_batch_size else 1

    def grads_and_metrics(params, batch):
        if n_micro == 1:
            (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch)
            return grads, metrics
        # gradient accumulation: each micro-batch's loss is re-weighted so the sum is exactly the
        # mini-batch loss (token counts for token-mean, rows for the Dr.GRPO constant normaliser)
        micro = jax.tree.map(lambda a: a.reshape(n_micro, a.shape[0] // n_micro, *a.shape[1:]), batch)
        counts = jnp.sum(micro["loss_mask"], axis=(1, 2))
        token_w = counts / jnp.maximum(jnp.sum(counts), 1e-30)
        loss_w = token_w if spec.aggregation == "token_mean" else jnp.full((n_micro,), 1.0 / n_micro)

        def weighted(params, mb, lw, tw):
            loss, metrics = loss_fn(params, mb)
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

    @jax.jit
    def update_fn(params, opt_state, batch):
        grads, metrics = grads_and_metrics(params, batch)
        metrics["grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, metrics

    @jax.jit
    def confidence_fn(params, tokens, real):  # asym-GRPO §2.1, from the full next-token logits
        logits = forward(params, model_cfg, tokens, mask_BxT=real,
                         activation_sharding=activation_sharding)[:, :-1].astype(jnp.float32)
        acfg = cfg.asymmetric_config()
        return asymmetric.confidence_weight(logits, baseline=acfg.baseline, kl_direction=acfg.kl_direction)

    return Functions(logp_fn, update_fn, jax.jit(grads_and_metrics), optimizer, confidence_fn)


# ----------------------------------------------------------------------------- asymmetric GRPO
def asymmetric_advantages(adv_PxN, scores_PxN, old_logp_BxT, resp_BxT, cfg: RLConfig, conf_BxT=None):
    """Channel-weighted advantages of P groups (issue 9; `objectives.asymmetric.asymmetric_advantages`).

    π̄ of a rollout = exp(mean over its response tokens of log π_old) (the geometric-mean token
    probability, docs/asymmetric-grpo.md §2 "Which π"); its confidence weight is the mean over
    its response tokens of `conf_BxT` (if given). w⁺ reads the verifier score in [0, 1]. Rows of
    the B x T arrays are prompt-major (B = P·N). Returns [P, N] float32.
    """
    p, n = np.shape(adv_PxN)
    resp = jnp.asarray(resp_BxT, jnp.float32)
    tokens = jnp.maximum(jnp.sum(resp, axis=1), 1.0)
    pi = jnp.exp(jnp.sum(jnp.asarray(old_logp_BxT) * resp, axis=1) / tokens).reshape(p, n)
    one = functools.partial(asymmetric.asymmetric_advantages, config=cfg.asymmetric_config())
    adv, scores = jnp.asarray(adv_PxN, jnp.float32), jnp.asarray(scores_PxN, jnp.float32)
    if conf_BxT is None:
        out = jax.vmap(lambda a, r, q: one(a, r, q))(adv, scores, pi)
    else:
        conf = (jnp.sum(jnp.asarray(conf_BxT) * resp, axis=1) / tokens).reshape(p, n)
        out = jax.vmap(one)(adv, scores, pi, conf)
    return np.asarray(out, np.float32)


def recompose_keep(scores_PxN, cfg: RLConfig) -> np.ndarray:
    """[P, N] 0/1: the rollouts `objectives.asymmetric.recompose_group` keeps in each group
    (positive = score ≥ positive_threshold; ranked by score, ties to the lower index; no distances,
    so an all-negative group keeps every rollout)."""
    scores = jnp.asarray(scores_PxN, jnp.float32)
    keep = jax.vmap(lambda s: asymmetric.recompose_group(s >= cfg.positive_threshold, s,
                                                         config=cfg.asymmetric_config()))(scores)
    return np.asarray(keep, np.float32)


def mixed_weights(groups: Groups, cfg: RLConfig) -> np.ndarray:
    """[P, N] multipliers of `objectives.asymmetric.mixed_group_weights` per group: positives
    (score ≥ positive_threshold) ranked by score, distance = token edit distance between responses
    (`pairwise_edit_distance`, the article's code-task distance; the KL reading needs logits)."""
    p, n = groups.scores.shape
    tokens = jnp.asarray(groups.tokens, jnp.int32).reshape(p, n, -1)
    lengths = jnp.asarray(groups.mask.sum(axis=1), jnp.int32).reshape(p, n)
    scores = jnp.asarray(groups.scores, jnp.float32)
    acfg = cfg.asymmetric_config()

    def one(tok, ln, sc):
        dist = asymmetric.pairwise_edit_distance(tok, ln)
        return asymmetric.mixed_group_weights(sc >= cfg.positive_threshold, dist, sc, config=acfg)

    return np.asarray(jax.vmap(one)(tokens, lengths, scores), np.float32)


# ----------------------------------------------------------------------------- rollouts
@dataclass
class Groups:
    """Rollouts of P prompts × N samples (numpy, rows ordered prompt-major)."""

    prompt_indices: np.ndarray  # [P] train-split indices
    prompt_tokens: np.ndarray  # [P·N, W] left-padded prompt ids
    prompt_mask: np.ndarray  # [P·N, W] bool
    tokens: np.ndarray  # [P·N, M] generated ids
    mask: np.ndarray  # [P·N, M] bool, response tokens
    scores: np.ndarray  # [P, N] verifier scores
    texts: list  # P·N decoded completions

    def take(self, groups: np.ndarray, n: int) -> Groups:
        rows = (groups[:, None] * n + np.arange(n)[None]).reshape(-1)
        return Groups(self.prompt_indices[groups], self.prompt_tokens[rows], self.prompt_mask[rows],
                      self.tokens[rows], self.mask[rows], self.scores[groups],
                      [self.texts[r] for r in rows])

    @staticmethod
    def concat(parts: list[Groups]) -> Groups:
        width = max(p.prompt_tokens.shape[1] for p in parts)

        def pad(a, fill):
            return np.concatenate([np.full((a.shape[0], width - a.shape[1]), fill, a.dtype), a], axis=1)

        return Groups(np.concatenate([p.prompt_indices for p in parts]),
                      np.concatenate([pad(p.prompt_tokens, 0) for p in parts]),
                      np.concatenate([pad(p.prompt_mask, False) for p in parts]),
                      np.concatenate([p.tokens for p in parts]), np.concatenate([p.mask for p in parts]),
                      np.concatenate([p.scores for p in parts]), sum((p.texts for p in parts), []))


def encode_prompt(tokenizer, text: str, chat_template: bool = False) -> list[int]:
    """Prompt ids: the tokenizer's own special-token rule (the character tokenizer adds <bos>);
    with `chat_template`, the text is wrapped as one user turn with the generation prompt."""
    if chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text, add_special_tokens=True))


def sample_groups(params, model_cfg, tokenizer, task, prompts, n: int, sampling, key, *,
                  mesh=None, chat_template: bool = False, batch_size: int = 0,
                  pad_multiple: int = 8, score_truncated: bool = False) -> Groups:
    """n completions of each prompt, decoded and scored (truncated ones score 0 unless
    `score_truncated`).

    The randomness of row (prompt p, sample s) is (key, p.index, s): independent of batch layout.
    """
    from catsim.llm.rollout import generate, left_pad
    from catsim.llm.model.sharding import activation_sharding, shard_batch

    encoded = [encode_prompt(tokenizer, p.text, chat_template) for p in prompts]
    width = -(-max(len(e) for e in encoded) // pad_multiple) * pad_multiple
    rows = [(i, s) for i in range(len(prompts)) for s in range(n)]
    prompt_tokens, prompt_mask = left_pad([encoded[i] for i, _ in rows], length=width)
    prompt_ids = np.asarray([prompts[i].index for i, _ in rows], np.int32)
    sample_ids = np.asarray([s for _, s in rows], np.int32)
    size = batch_size or len(rows)
    act = None if mesh is None else activation_sharding(mesh)
    toks, masks, lens, fins = [], [], [], []
    for start in range(0, len(rows), size):
        sl = slice(start, start + size)
        args = (prompt_tokens[sl], prompt_mask[sl], jnp.asarray(prompt_ids[sl]), jnp.asarray(sample_ids[sl]))
        if mesh is not None:
            args = shard_batch(args, mesh)
        out = generate(params, model_cfg, sampling, args[0], args[1], key, args[2], args[3],
                       activation_sharding=act)
        out = to_host(out)  # all processes get every row (an all-gather when multi-process)
        toks.append(out.tokens_BxN)
        masks.append(out.mask_BxN)
        lens.append(out.lengths_B)
        fins.append(out.finished_B)
    tokens, mask = np.concatenate(toks), np.concatenate(masks)
    lengths, finished = np.concatenate(lens), np.concatenate(fins)
    scores = np.zeros(len(rows), np.float32)
    texts = []
    for r, (i, _) in enumerate(rows):
        ids = tokens[r, : lengths[r]]
        if finished[r]:
            ids = ids[:-1]
        text = tokenizer.decode([int(t) for t in ids], skip_special_tokens=True)
        texts.append(text)
        if finished[r] or score_truncated:
            score = float(task.reward(prompts[i], text))
            if not 0.0 <= score <= 1.0:
                raise CatsimError(f"task {task.name!r} returned a reward {score} outside [0, 1]")
            scores[r] = score
    return Groups(np.asarray([p.index for p in prompts], np.int64), np.asarray(prompt_tokens),
                  np.asarray(prompt_mask), tokens, mask.astype(bool), scores.reshape(len(prompts), n), texts)


def step_prompt_indices(cfg: RLConfig, step: int, round_: int, n_train: int) -> np.ndarray:
    """Train-prompt indices of (step, sampling round): a pure function of (seed, step, round)."""
    rng = np.random.default_rng([cfg.seed, 0x51, step, round_])
    if n_train >= cfg.prompts_per_step and n_train <= 10 * 1_000_000:
        if n_train <= 100_000:
            return rng.choice(n_train, cfg.prompts_per_step, replace=False)
        picks: set[int] = set()
        while len(picks) < cfg.prompts_per_step:
            picks.add(int(rng.integers(n_train)))
        return np.asarray(sorted(picks))
    return rng.integers(0, n_train, size=cfg.prompts_per_step)


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


# ----------------------------------------------------------------------------- state on disk
def _fingerprint(cfg: RLConfig, base_dir: str, task_spec: dict) -> str:
    settings = {k: v for k, v in dataclasses.asdict(cfg).items()
                if k not in ("steps", "save_every", "snapshot_every", "heldout_every", "heldout_prompts")}
    blob = json.dumps({"rl": settings, "base": str(Path(base_dir).resolve()), "task": task_spec},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def save_state(path: Path, tree: Any, step: int, fingerprint: str) -> None:
    """Atomic write (temp file + rename): a kill mid-write leaves the previous state intact."""
    save_tree(path, tree, step, fingerprint)


def load_state(path: Path, template: Any, fingerprint: str) -> tuple[Any, int]:
    """Read `save_state`'s file into the structure (and shardings) of `template`."""
    return load_tree(path, template, fingerprint, what="RL run")


# ----------------------------------------------------------------------------- model dir helpers
def load_task_spec(model_dir: str | Path) -> dict:
    """The task file a warm-up (catsim llm sft) writes next to its model: {task, config, data_seed}."""
    path = Path(model_dir) / TASK_FILE
    if not path.is_file():
        raise CatsimError(f"{model_dir}: no {TASK_FILE}; pass the task explicitly (--task ...)")
    return json.loads(path.read_text())


def task_from_spec(spec: dict):
    from catsim.llm.tasks import make_task

    return make_task(spec["task"], **spec.get("config", {}))


def _task_config(task) -> dict:
    config = getattr(task, "config", None)
    if config is not None and dataclasses.is_dataclass(config):
        return json.loads(json.dumps(dataclasses.asdict(config), default=str))
    return {}


def stop_and_pad(model_cfg: ModelConfig, tokenizer) -> tuple[tuple[int, ...], int]:
    stops = tuple(model_cfg.eos_token_ids) or (
        (tokenizer.eos_token_id,) if tokenizer.eos_token_id is not None else ())
    if not stops:
        raise CatsimError("the model has no end-of-sequence token (config.json eos_token_id)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    return stops, int(pad)


# ----------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class RLResult:
    out_dir: str  # output directory
    steps_done: int  # RL steps in the saved state
    finished: bool  # reached cfg.steps and wrote model/
    seconds: float  # wall time of this call


def _json_float(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def run_rl(base_dir: str | Path, out_dir: str | Path, cfg: RLConfig, *, task_spec: dict | None = None,
           task=None, mesh=None, stop_after: int | None = None, overwrite: bool = False, progress: bool = True,
           chat_template: bool = False, label: str = "rl", dtype: str | None = None,
           remat: bool = False) -> RLResult:
    """Train (or resume) an RL run from the Hugging Face model dir `base_dir` into `out_dir`.

    task_spec: {"task": name, "config": {...}}; default: the base dir's catsim_task.json.
    task: a task object (any `catsim.llm.tasks.base.Task`) used instead of the spec's task.
    mesh: optional Mesh for data/FSDP sharding. stop_after: stop once this many steps are done
    (state saved, no final model). The base model is the frozen KL reference.
    dtype: parameter dtype ("float32" or "bfloat16"; None keeps the checkpoint's). remat: recompute
    block activations in the backward pass (memory for long responses on GPU).
    """
    from tqdm.auto import tqdm

    from catsim.llm import safeguards
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.rollout import SamplingConfig
    from catsim.llm.model.sharding import activation_sharding, place_on_mesh, shard_batch, shard_params
    from catsim.llm.model.tokenizer import Tokenizer

    t_start = time.perf_counter()
    out = Path(out_dir)
    if task is None:
        spec = task_spec or load_task_spec(base_dir)
        task = task_from_spec(spec)
    else:
        spec = task_spec or {"task": task.name, "config": _task_config(task)}
    model_cfg, params = load_model(base_dir, dtype=dtype)
    if remat:
        model_cfg = model_cfg.replace(remat=True)
    tokenizer = Tokenizer.from_dir(base_dir)
    if mesh is not None:
        devices = mesh.devices.size
        if cfg.rollouts_per_step % devices or cfg.micro_batch % devices:
            raise CatsimError(f"rollouts per step ({cfg.rollouts_per_step}) and micro-batch "
                              f"({cfg.micro_batch}) must be divisible by the {devices} devices")
        if cfg.heldout_every and cfg.heldout_prompts % devices:
            raise CatsimError(f"heldout_prompts ({cfg.heldout_prompts}) must be divisible by the {devices} devices")
        params = shard_params(params, model_cfg, mesh)
    ref_params = params
    track_ref = True
    act = None if mesh is None else activation_sharding(mesh)
    fns = make_functions(model_cfg, cfg, act)
    logp_fn, update_fn = fns.logp, fns.update
    opt_state = fns.optimizer.init(params)
    if mesh is not None:
        opt_state = place_on_mesh(opt_state, mesh)
    fp = _fingerprint(cfg, str(base_dir), spec)
    out.mkdir(parents=True, exist_ok=True)
    state_path, log_path = out / STATE_FILE, out / LOG_FILE
    primary = is_primary()  # multi-process: only process 0 writes files
    if overwrite and primary:
        for name in (STATE_FILE, LOG_FILE):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        shutil.rmtree(out / "model", ignore_errors=True)
    barrier(f"catsim-rl-start-{fp}")
    start = 0
    if state_path.exists():
        (params, opt_state), start = load_state(state_path, (params, opt_state), fp)
    if primary:
        truncate_log(log_path, start)
        (out / CONFIG_FILE).write_text(json.dumps(
            {"rl": dataclasses.asdict(cfg), "base_model": str(base_dir), "task": spec, "label": cfg.label(),
             "fingerprint": fp}, indent=2, default=str) + "\n")
    barrier(f"catsim-rl-log-{fp}")  # every process reads the truncated log
    history = read_log(out) if log_path.is_file() else []  # the safeguards' view of the run so far

    stops, pad = stop_and_pad(model_cfg, tokenizer)
    sampling = SamplingConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                              top_p=cfg.top_p, stop_tokens=stops, pad_token=pad)
    spec_m = cfg.method_spec()
    schedule = cfg.gamma_schedule_fn()
    n_train = task.num_prompts("train")
    base_key = jax.random.key(cfg.seed)
    end = cfg.steps if stop_after is None else min(cfg.steps, max(stop_after, start))
    bar = tqdm(total=cfg.steps, initial=start, desc=label, file=sys.stderr, disable=not (progress and primary),
               dynamic_ncols=True)

    def put(batch):
        return shard_batch(batch, mesh) if mesh is not None else jax.tree.map(jnp.asarray, batch)

    try:
        with log_path.open("a") if primary else open(os.devnull, "w") as log:
            for step in range(start, end):
                t0 = time.perf_counter()
                step_key = jax.random.fold_in(base_key, step)
                temperature = cfg.rollout_temperature(step)
                if temperature != sampling.temperature:  # a new static config: generate recompiles
                    sampling = dataclasses.replace(sampling, temperature=temperature)
                parts, kept, active_all, mu_all = [], 0, [], []
                rounds = 0
                t_roll = time.perf_counter()
                gen_tokens = 0
                for round_ in range(cfg.max_sampling_rounds if spec_m.dynamic_sampling else 1):
                    rounds += 1
                    idx = step_prompt_indices(cfg, step, round_, n_train)
                    prompts = [task.prompt("train", cfg.data_seed, int(i)) for i in idx]
                    g = sample_groups(params, model_cfg, tokenizer, task, prompts, cfg.group_size, sampling,
                                      jax.random.fold_in(step_key, round_), mesh=mesh,
                                      chat_template=chat_template, batch_size=cfg.rollout_batch_size,
                                      score_truncated=cfg.score_truncated)
                    gen_tokens += int(g.mask.sum())
                    active = g.scores.max(axis=1) > g.scores.min(axis=1)
                    active_all.append(active)
                    mu_all.append(np.clip(g.scores.mean(axis=1), 0, 1))
                    parts.append(g)
                    kept += int(active.sum())
                    if not spec_m.dynamic_sampling or kept >= cfg.prompts_per_step:
                        break
                rollout_seconds = time.perf_counter() - t_roll
                pool = Groups.concat(parts)
                active_pool = np.concatenate(active_all)
                if spec_m.dynamic_sampling:
                    chosen, group_mask = select_active_groups(active_pool, cfg.prompts_per_step)
                    groups = pool.take(chosen, cfg.group_size)
                else:
                    groups = pool
                    group_mask = np.ones(cfg.prompts_per_step, np.float32)
                mu_batch = float(np.mean(np.clip(groups.scores.mean(axis=1), 0, 1)))
                gamma = float(schedule(step, success_rate=mu_batch))
                adv, mu, gw = compute_advantages(groups.scores, cfg, gamma, group_mask)
                batch = build_batch(groups, adv, group_mask)

                # behaviour-policy and reference log-probs, one mini-batch at a time
                mb = cfg.mini_batch
                rows = batch["tokens"].shape[0]
                old, ref = [], []
                for s0 in range(0, rows, mb):
                    chunk = put({k: batch[k][s0:s0 + mb] for k in ("tokens", "real")})
                    old.append(to_host(logp_fn(params, chunk["tokens"], chunk["real"])[0]))
                    if track_ref:
                        ref.append(to_host(logp_fn(ref_params, chunk["tokens"], chunk["real"])[0]))
                batch["old_logp"] = np.concatenate(old)
                if track_ref:
                    batch["ref_logp"] = np.concatenate(ref)
                if any(cfg.use(c) for c in ("asym_channels", "asym_confidence", "asym_recompose", "asym_mixed")):
                    batch = asymmetric_batch(batch, groups, adv, group_mask, cfg, fns, params, put)

                sums: dict[str, float] = {}
                updates = 0
                for _ in range(cfg.ppo_epochs):
                    for s0 in range(0, rows, mb):
                        mini = put({k: v[s0:s0 + mb] for k, v in batch.items()})
                        params, opt_state, m = update_fn(params, opt_state, mini)
                        for k, v in to_host(m).items():
                            sums[k] = sums.get(k, 0.0) + float(v)
                        updates += 1
                means = {k: v / updates for k, v in sums.items()}
                active_frac = float(np.mean(active_pool))
                mu_pool = np.concatenate(mu_all)
                act_mask = (group_mask > 0) & (groups.scores.max(1) > groups.scores.min(1))
                record = {
                    "step": step + 1,
                    "reward": float(groups.scores.mean()),
                    "success_rate": float(np.mean(mu)),
                    "active_fraction": active_frac,
                    "active_pred_pooled": float(active_fraction_prediction(float(np.mean(mu_pool)),
                                                                           cfg.group_size)),
                    "active_pred_groups": float(np.mean(active_fraction_prediction(mu_pool, cfg.group_size))),
                    "gamma": gamma,
                    "mean_g": float(gw[act_mask].mean()) if np.any(act_mask) else None,
                    "entropy": _json_float(means.get("entropy", np.nan)),
                    "clip_low_frac": _json_float(means["clip_low_frac"]),
                    "clip_high_frac": _json_float(means["clip_high_frac"]),
                    "kl": _json_float(means["kl"]) if "kl" in means else None,
                    "response_length": float(groups.mask.sum(axis=1).mean()),
                    "grad_norm": _json_float(means["grad_norm"]),
                    "loss": _json_float(means["loss"]),
                    "lr": lr_at(cfg, step),
                    "sampling_rounds": rounds,
                    "groups_kept": int(group_mask.sum()),
                    "tokens_per_second": gen_tokens / max(rollout_seconds, 1e-9),
                    "step_seconds": time.perf_counter() - t0,
                    "temperature": temperature,
                    "kept_rollouts": int(np.sum(np.any(batch["loss_mask"] > 0, axis=1))),
                    "heldout_accuracy": None,
                    "warnings": [],
                }
                if cfg.heldout_every and (step + 1) % cfg.heldout_every == 0:
                    record["heldout_accuracy"] = safeguards.heldout_accuracy(
                        params, model_cfg, tokenizer, task, cfg, sampling, safeguards.heldout_key(base_key, step),
                        mesh=mesh, chat_template=chat_template)
                history.append(record)
                record["warnings"] = list(safeguards.step_warnings(history, cfg))
                for message in record["warnings"] if primary else []:
                    tqdm.write(f"warning: {label}: step {step + 1}: {message}", file=sys.stderr)
                log.write(json.dumps(record) + "\n")
                log.flush()
                if (step + 1) % cfg.save_every == 0 or step + 1 == end:
                    save_state(state_path, (params, opt_state), step + 1, fp)
                if cfg.snapshot_every and (step + 1) % cfg.snapshot_every == 0:
                    save_model_primary(out / "checkpoints" / f"step_{step + 1:06d}", model_cfg, params, tokenizer)
                bar.update(1)
                bar.set_postfix(reward=f"{record['reward']:.3f}", active=f"{active_frac:.2f}",
                                pred=f"{record['active_pred_pooled']:.2f}", H=f"{record['entropy'] or 0:.2f}",
                                len=f"{record['response_length']:.1f}")
    finally:
        bar.close()
    done = end
    if done < cfg.steps:
        barrier(f"catsim-rl-stop-{fp}-{done}")
        return RLResult(str(out), done, False, time.perf_counter() - t_start)
    model_dir = out / "model"
    save_model_primary(model_dir, model_cfg, params, tokenizer)
    if primary:
        (model_dir / TASK_FILE).write_text(json.dumps(spec, indent=2, default=str) + "\n")
    barrier(f"catsim-rl-end-{fp}")
    return RLResult(str(out), done, True, time.perf_counter() - t_start)


def save_model_primary(directory: Path, model_cfg: ModelConfig, params, tokenizer) -> None:
    """`checkpoint.save_model` of (possibly multi-process sharded) params: every process takes part
    in the gather, process 0 writes."""
    from catsim.llm.model.checkpoint import save_model

    host = to_host(params)
    if is_primary():
        save_model(directory, model_cfg, host, tokenizer)


def asymmetric_batch(batch, groups: Groups, adv_PxN, group_mask, cfg: RLConfig, fns: Functions, params,
                     put=lambda b: jax.tree.map(jnp.asarray, b)):
    """The training batch with the asym-GRPO components switched on in `cfg`: advantages
    (computed on the FULL groups first) re-weighted by channel / confidence, then the
    recomposition mask on `loss_mask`."""
    w = groups.prompt_tokens.shape[1]
    resp = np.zeros_like(batch["loss_mask"])
    resp[:, w - 1:] = groups.mask  # response tokens, aligned with the targets
    adv = np.asarray(adv_PxN, np.float32)
    if cfg.use("asym_mixed"):
        adv = adv * mixed_weights(groups, cfg)
        batch = {**batch, "adv": build_batch(groups, adv, group_mask)["adv"]}
    if cfg.use("asym_channels") or cfg.use("asym_confidence"):
        conf = None
        if cfg.use("asym_confidence"):
            parts = []
            for s0 in range(0, resp.shape[0], cfg.mini_batch):
                chunk = put({k: batch[k][s0:s0 + cfg.mini_batch] for k in ("tokens", "real")})
                parts.append(to_host(fns.confidence(params, chunk["tokens"], chunk["real"])))
            conf = np.concatenate(parts)
        if cfg.use("asym_channels"):
            adv = asymmetric_advantages(adv, groups.scores, batch["old_logp"], resp, cfg, conf)
        else:  # the confidence weight alone, on the negative channel
            c = (np.sum(conf * resp, axis=1) / np.maximum(resp.sum(axis=1), 1.0)).reshape(adv.shape)
            adv = np.where(adv < 0, c * adv, adv).astype(np.float32)
        batch = {**batch, "adv": build_batch(groups, adv, group_mask)["adv"]}
    if cfg.use("asym_recompose"):
        keep = recompose_keep(groups.scores, cfg).reshape(-1)
        batch = {**batch, "loss_mask": batch["loss_mask"] * keep[:, None]}
    return batch


def read_log(out_dir: str | Path) -> list[dict]:
    """The per-step records of a run's rl_log.jsonl."""
    path = Path(out_dir) / LOG_FILE
    if not path.is_file():
        raise CatsimError(f"{out_dir}: no {LOG_FILE}")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
