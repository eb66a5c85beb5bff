"""Settings of one RL run: a frozen config of frozen sections, each validated at construction.

    cfg = RLConfig.from_flat(method="grpo", gamma=0.5, group_size=8, steps=100)
    cfg.gamma            # GammaSchedule(kind="constant", gamma=0.5, ...), shared with the simulator
    cfg.rollout.group_size, cfg.optimizer.learning_rate, cfg.run.steps

Sections: `objective` (how rewards become a loss, on top of the `method` preset), `gamma` (the
F-GRPO focal schedule, `catsim.objectives.focal.GammaSchedule`), `asym` (asym-GRPO
hyper-parameters, `catsim.objectives.asymmetric.AsymmetricConfig`) with `components` (which asym-GRPO
parts are on), `optimizer`, `rollout` and `run`. Each option is described once, on its field
(`options.option(default, help)`); `FLAT`, built from those fields, maps the flat option names (the
CLI flags, `from_flat`, the pipeline's run specs) to (section, field, help).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from catsim.errors import CatsimError
from catsim.llm.rl.options import flat_table, option
from catsim.llm.rl.rare import RL_ADVANTAGES, RareConfig
from catsim.objectives import _validate as v
from catsim.objectives import asymmetric, focal, losses
from catsim.objectives.asymmetric import AsymmetricConfig
from catsim.objectives.focal import GammaSchedule
from catsim.objectives.grad_clip import dual_threshold_clip


@dataclass(frozen=True)
class Method:
    """How one GRPO-family method turns rewards into a loss (the paper's App. B)."""

    surrogate: str  # per-token rule: key of catsim.objectives.losses.SURROGATES
    clip_low: float  # ε_low (CISPO: 1.0 means no lower clip)
    clip_high: float  # ε_high
    advantage: str  # "grpo" (std-normalised) or "dr_grpo" (mean-centred)
    aggregation: str  # one of AGGREGATIONS: "token_mean", "sequence_mean" or "token_sum_constant"
    dynamic_sampling: bool  # keep only active groups, drawing more prompts (DAPO)
    asymmetric: bool = False  # default of the asym-GRPO components (docs/asymmetric-grpo.md)
    overlong_shaping: bool = False  # DAPO's soft overlong punishment added to the rewards


METHODS = {
    "grpo": Method("grpo", 0.2, 0.2, "grpo", "token_mean", False),
    "dapo": Method("dapo", 0.2, 0.28, "grpo", "token_mean", True, overlong_shaping=True),
    "cispo": Method("cispo", 1.0, 5.0, "grpo", "token_mean", False),
    "dr_grpo": Method("grpo", 0.2, 0.2, "dr_grpo", "token_sum_constant", False),
    # GRPO + every asymmetric component on by default (each switchable, docs/asymmetric-grpo.md)
    "asym-grpo": Method("grpo", 0.2, 0.2, "grpo", "token_mean", False, asymmetric=True),
}
TEMPERATURE_SCHEDULES = ("constant", "cosine", "stepwise")
LOGPROB_TEMPERATURES = ("sampling", "one")
KL_ESTIMATORS = ("k1", "k3")
# loss aggregation over a batch's response tokens (catsim.objectives.losses): the token mean (DAPO,
# the paper's App. B), the mean of per-sequence token means (original GRPO), Dr.GRPO's constant
AGGREGATIONS = ("token_mean", "sequence_mean", "token_sum_constant")
ADV_STDS = ("population", "sample")  # the GRPO std: ddof 0 (the paper's analysis) or 1 (verl, TRL)
ASYM_ADVANTAGES = ("baseline", "baseline_free")
TRAINER_DELTA = 4.0  # the trainer's default δ of mixed groups and recomposition, in token edits


def _count(name: str, value, minimum: int) -> None:
    """A whole number >= minimum (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"a whole number >= {minimum}"
        raise CatsimError(f"rl {name} must be {kind}, got {value!r}")


@dataclass(frozen=True)
class ObjectiveConfig:
    """Overrides of the method preset and the terms added to its loss."""

    clip_low: float | None = option(None, "ε_low of the clipped surrogate (default: the method's)")
    clip_high: float | None = option(None, "ε_high of the clipped surrogate (default: the method's)")
    dynamic_sampling: bool | None = option(
        None, "keep only groups with unequal rewards, drawing more prompts (default: on for dapo)")
    max_sampling_rounds: int = option(4, "dynamic sampling: most prompt batches per step")
    kl_coef: float = option(0.0, "β of the KL penalty to the base model (paper 0)")
    kl_estimator: str = option("k3", "KL estimator of the penalty")
    kl_bias_correction: bool = option(False, "KL penalty k3 × π/π_old (TRL use_bias_correction_kl)")
    clip_ratio_c: float | None = option(
        None, "PPO dual clip c > 1: loss ≤ −c·A for A < 0 (verl 3) (default: off)")
    entropy_coef: float = option(0.0, "entropy bonus coefficient")
    reward_correct: float = option(1.0, "Rc: reward of a verifier score of 1")
    reward_wrong: float = option(0.0, "Rw: reward of a verifier score of 0 (may be < 0)")
    batch_renorm: bool = option(False, "re-normalise advantages over the whole batch")
    adv_eps: float = option(1e-6, "ε in the GRPO std denominator (also MaxRL's and passk_best's)")
    adv_std: str = option(
        "sample", "GRPO std: population (ddof 0, the paper's analysis) or sample (ddof 1, verl and TRL)")
    aggregation: str | None = option(
        None, "loss aggregation: token_mean (DAPO, App. B), sequence_mean (original GRPO), "
        "token_sum_constant (Dr.GRPO) (default: the method's)")
    overlong_shaping: bool | None = option(
        None, "DAPO soft overlong punishment on the rewards (default: on for dapo)")
    overlong_buffer: float = option(
        0.2, "overlong punishment ramp as a share of --max-new-tokens (DAPO 4096/20480 = 0.2)")
    overlong_penalty: float = option(1.0, "overlong punishment at --max-new-tokens (DAPO 1)")
    overlong_filter: bool = option(
        False, "DAPO overlong filtering: completions that hit --max-new-tokens carry no loss")
    # training log-probs from logits / τ at the rollout temperature τ ("sampling", as verl does, so
    # the importance ratio describes the distribution sampled from) or from the raw logits ("one")
    logprob_temperature: str = option(
        "sampling", "training log-probs at the rollout temperature τ (logits / τ) or at τ = 1")

    def __post_init__(self) -> None:
        _count("max_sampling_rounds", self.max_sampling_rounds, 1)
        if self.logprob_temperature not in LOGPROB_TEMPERATURES:
            raise CatsimError(f"logprob_temperature must be one of {', '.join(LOGPROB_TEMPERATURES)}, got "
                              f"{self.logprob_temperature!r}")
        for name in ("kl_coef", "entropy_coef", "adv_eps", "overlong_penalty"):
            v.check_nonnegative(name, getattr(self, name))
        v.check_in_closed("overlong_buffer", self.overlong_buffer, 0.0, 1.0)
        if self.adv_std not in ADV_STDS:
            raise CatsimError(f"adv_std must be one of {', '.join(ADV_STDS)}, got {self.adv_std!r}")
        if self.aggregation not in (None, *AGGREGATIONS):
            raise CatsimError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        for name in ("clip_low", "clip_high"):
            v.check_nonnegative(name, 0.0 if getattr(self, name) is None else getattr(self, name))
        if self.kl_estimator not in KL_ESTIMATORS or (self.kl_bias_correction and self.kl_estimator != "k3"):
            raise CatsimError(f"kl_estimator must be 'k1' or 'k3' (k3 with kl_bias_correction, as TRL), "
                              f"got {self.kl_estimator!r}")
        losses.check_clip_ratio_c(self.clip_ratio_c)
        if not self.reward_correct > self.reward_wrong:
            raise CatsimError("reward_correct must exceed reward_wrong")


@dataclass(frozen=True)
class AsymComponents:
    """Which asym-GRPO components run (None = on for method asym-grpo, off otherwise)."""

    channels: bool | None = option(
        None, "asym-GRPO: w⁺(score)·A for A > 0, w⁻(π̄)·A for A < 0", flag="asym_channels")
    confidence: bool | None = option(
        None, "asym-GRPO: A < 0 also × the mean token confidence", flag="asym_confidence")
    recompose: bool | None = option(
        None, "asym-GRPO: loss only on the rollouts recomposition keeps", flag="asym_recompose")
    mixed: bool | None = option(
        None, "asym-GRPO: mixed groups amplify top positives, drop far negatives", flag="asym_mixed")
    dual_clip: bool | None = option(None, "asym-GRPO: dual-threshold gradient clip")
    positive_threshold: float = option(0.5, "recomposition: score at which a rollout is positive")
    advantage: str = option(
        "baseline", "asym-GRPO channels on the GRPO advantages (baseline) or the literal w⁺·r − w⁻·(1 − r) "
        "(baseline_free)", flag="asym_advantage")

    def __post_init__(self) -> None:
        v.check_in_closed("positive_threshold", self.positive_threshold, 0.0, 1.0)
        if self.advantage not in ASYM_ADVANTAGES:
            raise CatsimError(f"asym_advantage must be one of {', '.join(ASYM_ADVANTAGES)}, "
                              f"got {self.advantage!r}")


@dataclass(frozen=True)
class OptimizerConfig:
    """optax clip → AdamW(0.9, 0.999), lr warm-up in RL steps, and the update batching."""

    learning_rate: float = option(1e-4, "peak AdamW learning rate (paper LLM 1e-6)")
    warmup_steps: int = option(0, "linear lr warm-up in RL steps (paper 15)")
    weight_decay: float = option(0.01, "AdamW decoupled weight decay")
    grad_clip: float = option(1.0, "global gradient-norm clip")
    dual_clip_lower: float = option(0.1, "dual clip: lower gradient-norm threshold")
    dual_clip_amplification: float = option(1.5, "dual clip: amplification below the lower threshold")
    mini_batch_prompts: int = option(
        0, "prompts (groups) per optimizer update, verl's ppo_mini_batch_size, paper 64 (default: 0 = "
        "--mini-batch-size, else the whole step)")
    mini_batch_size: int = option(0, "rollouts per optimizer update, a multiple of N (0 = the whole step)")
    micro_batch_size: int = option(
        0, "rollouts per forward/backward pass, gradients accumulated (0 = the mini-batch)")
    ppo_epochs: int = option(1, "passes over the step's rollouts (paper 1)")

    def __post_init__(self) -> None:
        v.check_positive("learning_rate", self.learning_rate)
        v.check_positive("grad_clip", self.grad_clip)
        v.check_nonnegative("weight_decay", self.weight_decay)
        _count("warmup_steps", self.warmup_steps, 0)
        _count("mini_batch_prompts", self.mini_batch_prompts, 0)
        _count("mini_batch_size", self.mini_batch_size, 0)
        _count("micro_batch_size", self.micro_batch_size, 0)
        _count("ppo_epochs", self.ppo_epochs, 1)


@dataclass(frozen=True)
class RolloutConfig:
    """What each step samples."""

    prompts_per_step: int = option(
        8, "prompts (groups) sampled per step, verl's train_batch_size (paper 256)")
    group_size: int = option(8, "N rollouts per prompt")
    temperature: float = option(1.0, "sampling temperature (paper 1.0; the schedule's τ_max)")
    top_p: float = option(1.0, "nucleus sampling mass (1 = off)")
    max_new_tokens: int = option(32, "completion length cap")
    score_truncated: bool = option(
        False, "verify completions that hit --max-new-tokens (otherwise they score 0)")
    batch_size: int = option(0, "rollouts per generate call (0 = all at once)", flag="rollout_batch_size")
    temperature_schedule: str | None = option(
        None, "rollout temperature schedule (default: cosine for asym-grpo, else constant)")
    temperature_min: float = option(0.2, "temperature schedule floor τ_min")
    temperature_fraction: float = option(0.3, "share of the steps taken to reach τ_min")

    def __post_init__(self) -> None:
        for name in ("prompts_per_step", "group_size", "max_new_tokens"):
            _count(name, getattr(self, name), 1)
        _count("rollout_batch_size", self.batch_size, 0)
        v.check_nonnegative("temperature", self.temperature)
        if not 0 < self.top_p <= 1:
            raise CatsimError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.temperature_schedule not in (None, *TEMPERATURE_SCHEDULES):
            raise CatsimError(f"temperature_schedule must be one of {', '.join(TEMPERATURE_SCHEDULES)}, "
                              f"got {self.temperature_schedule!r}")

    @property
    def rollouts(self) -> int:
        return self.prompts_per_step * self.group_size


@dataclass(frozen=True)
class RunConfig:
    """Length, seeds, saving and the held-out safeguard."""

    steps: int = option(50, "RL steps")
    seed: int = option(0, "prompt order and sampling keys")
    data_seed: int = option(0, "the task's split seed (default: the base model's task file, else 0)")
    save_every: int = option(1, "training-state save period in steps")
    snapshot_every: int = option(0, "Hugging Face snapshot period in steps (0 = final model only)")
    heldout_every: int = option(0, "held-out accuracy every this many steps (0 = never)")
    heldout_prompts: int = option(32, "held-out prompts scored, one sample each at --temperature")

    def __post_init__(self) -> None:
        for name in ("steps", "save_every", "heldout_prompts"):
            _count(name, getattr(self, name), 1)
        for name in ("seed", "data_seed", "snapshot_every", "heldout_every"):
            _count(name, getattr(self, name), 0)


@dataclass(frozen=True)
class RLConfig:
    """Settings of one RL run (CPU-sized defaults; the paper's LLM values in comments)."""

    method: str = option("grpo", "GRPO-family preset (clip ranges, advantage, aggregation)")
    objective: ObjectiveConfig = ObjectiveConfig()  # overrides of the preset, KL, entropy, rewards
    gamma: GammaSchedule = GammaSchedule()  # focal exponent γ and its schedule (paper F-GRPO: 0.5)
    low_lr_gamma: float = option(0.0, "App. N control: > 0 runs GRPO at lr × m_γ for this γ")
    gamma_steps_per_epoch: int = option(
        0, "epoch_increment: steps per epoch (default: 0 = one pass over the train prompts, prompts //"
        " --prompts-per-step)")
    # asym-GRPO hyper-parameters; δ in token edits (the trainer's distance), not the article's KL
    # 2.0: near = at most 3 edits from a positive (docs/asymmetric-grpo.md §9 has the measurement)
    asym: AsymmetricConfig = AsymmetricConfig(delta=TRAINER_DELTA)
    components: AsymComponents = AsymComponents()  # which asym-GRPO components run
    rare: RareConfig = RareConfig()  # advantage-rule override, k, W-REINFORCE λ (catsim.llm.rl.rare)
    optimizer: OptimizerConfig = OptimizerConfig()
    rollout: RolloutConfig = RolloutConfig()
    run: RunConfig = RunConfig()

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise CatsimError(f"unknown RL method {self.method!r}; choose one of {', '.join(METHODS)}")
        v.check_nonnegative("low_lr_gamma", self.low_lr_gamma)
        _count("gamma_steps_per_epoch", self.gamma_steps_per_epoch, 0)
        if self.low_lr_gamma > 0 and self.gamma.gamma > 0:
            raise CatsimError("the low-lr control (low_lr_gamma) is a GRPO baseline: use gamma = 0")
        # a schedule setting its kind ignores, or a schedule that never acts in the run: refused, not claimed
        self.gamma.check_settings()
        if self.gamma_steps_per_epoch and self.gamma.kind != "epoch_increment":
            raise CatsimError(f"the {self.gamma.kind} γ schedule ignores --gamma-steps-per-epoch "
                              f"(gamma_steps_per_epoch) = {self.gamma_steps_per_epoch}: leave it out")
        dataclasses.replace(self.gamma, steps_per_epoch=self.gamma_steps_per_epoch or 1).check_acts(self.steps)
        opt, n = self.optimizer, self.group_size
        if opt.mini_batch_prompts and self.rollout.prompts_per_step % opt.mini_batch_prompts:
            raise CatsimError(f"mini_batch_prompts {opt.mini_batch_prompts} must divide the "
                              f"{self.rollout.prompts_per_step} prompts of a step")
        if opt.mini_batch_prompts and opt.mini_batch_size and opt.mini_batch_size != opt.mini_batch_prompts * n:
            raise CatsimError(f"mini_batch_size {opt.mini_batch_size} (rollouts) and mini_batch_prompts "
                              f"{opt.mini_batch_prompts} (× N = {n}) disagree; give one of them")
        if opt.mini_batch_size and self.rollout.rollouts % opt.mini_batch_size:
            raise CatsimError(f"mini_batch_size {opt.mini_batch_size} must divide the "
                              f"{self.rollout.rollouts} rollouts of a step")
        if opt.mini_batch_size % n:
            raise CatsimError(f"mini_batch_size {opt.mini_batch_size} must be a multiple of the group size "
                              f"{n}, so that a mini-batch holds whole groups (or give mini_batch_prompts)")
        if self.objective.adv_std == "sample" and n < 2 and self.method_spec().advantage == "grpo":
            raise CatsimError("adv_std 'sample' (ddof 1, the default) needs a group size of at least 2; "
                              "a group of 1 has no spread (use adv_std 'population' for its zero advantages)")
        self.rare.check(self.method_spec().advantage, n)
        if self.components.advantage == "baseline_free" and not self.use("channels"):
            raise CatsimError("asym_advantage 'baseline_free' is a form of the asym-GRPO channels: "
                              "switch on asym_channels (or use method asym-grpo)")
        if self.rare.unlikeliness_beta > 0 and self.components.advantage == "baseline_free":
            raise CatsimError("the unlikeliness reward (--unlikeliness-beta) shapes the rewards of the group "
                              "advantage, which asym_advantage 'baseline_free' replaces: use 'baseline'")
        if opt.micro_batch_size and self.mini_batch % opt.micro_batch_size:
            raise CatsimError(f"micro_batch_size {opt.micro_batch_size} must divide the mini-batch "
                              f"of {self.mini_batch} rollouts")
        if self.temperature_plan() != "constant":
            self.rollout_temperature(0)  # validates τ_min ≤ τ_max and the fraction
        if self.objective.clip_ratio_c is not None and self.method_spec().surrogate == "cispo":
            raise CatsimError("clip_ratio_c (the PPO dual clip) needs a clipped-ratio surrogate, not cispo")
        if self.use("dual_clip"):
            dual_threshold_clip(opt.grad_clip, opt.dual_clip_lower, opt.dual_clip_amplification)

    # ------------------------------------------------------------------ construction from flat names
    @classmethod
    def from_flat(cls, **options) -> RLConfig:
        """A config from flat option names (`FLAT`): `RLConfig.from_flat(method="dapo", gamma=0.5)`."""
        return cls().replace(**options)

    def replace(self, **options) -> RLConfig:
        """A copy with flat options (`FLAT` names) replaced."""
        by_section: dict[str, dict] = {}
        top = {}
        for name, value in options.items():
            if name not in FLAT:
                raise CatsimError(f"unknown RL option {name!r}")
            section, field = FLAT[name][0], FLAT[name][1]
            if section is None:
                top[field] = value
            else:
                by_section.setdefault(section, {})[field] = value
        for section, fields in by_section.items():
            top[section] = dataclasses.replace(getattr(self, section), **fields)
        return dataclasses.replace(self, **top)

    def flat(self) -> dict:
        """{flat option name: value} for every option (the inverse of `from_flat`)."""
        return {name: getattr(self if section is None else getattr(self, section), field)
                for name, (section, field, _) in FLAT.items()}

    # ------------------------------------------------------------------ derived settings
    def use(self, component: str) -> bool:
        """Whether an asym-GRPO component (channels, confidence, recompose, mixed, dual_clip) is on."""
        value = getattr(self.components, component)
        return METHODS[self.method].asymmetric if value is None else bool(value)

    @property
    def any_asym(self) -> bool:
        """Whether any advantage or mask component of asym-GRPO is on."""
        return any(self.use(c) for c in ("channels", "confidence", "recompose", "mixed"))

    def method_spec(self) -> Method:
        """The method preset with this run's overrides applied."""
        spec, o = METHODS[self.method], self.objective
        return dataclasses.replace(
            spec,
            clip_low=spec.clip_low if o.clip_low is None else o.clip_low,
            clip_high=spec.clip_high if o.clip_high is None else o.clip_high,
            dynamic_sampling=spec.dynamic_sampling if o.dynamic_sampling is None else o.dynamic_sampling,
            aggregation=spec.aggregation if o.aggregation is None else o.aggregation,
            overlong_shaping=spec.overlong_shaping if o.overlong_shaping is None else o.overlong_shaping,
            advantage=spec.advantage if self.rare.advantage is None else self.rare.advantage)

    def gamma_schedule(self, num_train_prompts: int) -> GammaSchedule:
        """The γ schedule of a run on `num_train_prompts` train prompts: `gamma` with its epoch
        length set to `gamma_steps_per_epoch`, or (0) to one pass over the prompts,
        max(1, prompts // prompts_per_step) steps (the incomplete last batch dropped, as verl does)."""
        epoch = self.gamma_steps_per_epoch or max(1, num_train_prompts // self.rollout.prompts_per_step)
        schedule = dataclasses.replace(self.gamma, steps_per_epoch=epoch)
        schedule.check_acts(self.steps)  # epochs of one pass over the prompts: known only here
        return schedule

    @property
    def overlong_buffer_tokens(self) -> int:
        """The soft overlong punishment's ramp in tokens: overlong_buffer × max_new_tokens, rounded."""
        return int(round(self.objective.overlong_buffer * self.rollout.max_new_tokens))

    def temperature_plan(self) -> str:
        if self.rollout.temperature_schedule is not None:
            return self.rollout.temperature_schedule
        return "cosine" if METHODS[self.method].asymmetric else "constant"

    def rollout_temperature(self, step: int) -> float:
        """Sampling temperature of RL step `step` (0-based): `temperature`, or the article's
        cosine / step-wise decay from it to `temperature_min` (catsim.objectives.asymmetric)."""
        plan, r = self.temperature_plan(), self.rollout
        if plan == "constant":
            return r.temperature
        fn = asymmetric.cosine_temperature if plan == "cosine" else asymmetric.stepwise_temperature
        return float(fn(step, self.run.steps, tau_max=r.temperature, tau_min=r.temperature_min,
                        fraction=r.temperature_fraction))

    def logprob_temperature(self, step: int) -> float:
        """τ of the training log-probs at RL step `step`: the rollout temperature (1 for greedy
        rollouts, τ = 0), or 1 with logprob_temperature "one"."""
        tau = self.rollout_temperature(step)
        return tau if self.objective.logprob_temperature == "sampling" and tau > 0 else 1.0

    @property
    def group_size(self) -> int:
        return self.rollout.group_size

    @property
    def steps(self) -> int:
        return self.run.steps

    @property
    def rollouts_per_step(self) -> int:
        return self.rollout.rollouts

    @property
    def mini_batch(self) -> int:
        """Rollouts per optimizer update (mini_batch_prompts × N, mini_batch_size, or the step)."""
        opt = self.optimizer
        return opt.mini_batch_prompts * self.group_size or opt.mini_batch_size or self.rollouts_per_step

    @property
    def micro_batch(self) -> int:
        return self.optimizer.micro_batch_size or self.mini_batch

    @property
    def updates_per_step(self) -> int:
        return self.rollouts_per_step // self.mini_batch * self.optimizer.ppo_epochs

    @property
    def peak_lr(self) -> float:
        """learning_rate, times m_γ for the App. N low-lr control."""
        if self.low_lr_gamma > 0:
            return self.optimizer.learning_rate * focal.low_lr_multiplier(self.low_lr_gamma)
        return self.optimizer.learning_rate

    def label(self) -> str:
        """Human label, e.g. "F-GRPO γ=0.5 N=8", "GRPO lr·m_0.5 N=8"."""
        name = {"grpo": "GRPO", "dapo": "DAPO", "cispo": "CISPO", "dr_grpo": "Dr.GRPO",
                "asym-grpo": "asym-GRPO"}[self.method]
        if self.gamma.max_gamma > 0:  # a schedule whose γ is 0 throughout is the plain method
            name = f"F-{name} γ={self.gamma.gamma:g}"
        if self.low_lr_gamma > 0:
            name += f" lr·m_{self.low_lr_gamma:g}"
        return f"{name}{self.rare.label(METHODS[self.method].advantage)} N={self.group_size}"


# the options of the shared dataclasses (focal.GammaSchedule, asymmetric.AsymmetricConfig, which the
# simulator uses too): flat name -> (section, field, help); every other option is described on its field
SHARED_OPTIONS: dict[str, tuple[str, str, str]] = {
    "gamma": ("gamma", "gamma", "focal exponent γ of g = (1 − μ̂)^γ (0 = plain method; paper F-GRPO 0.5)"),
    "gamma_schedule": ("gamma", "kind", "how γ varies over the run"),
    "gamma_start": ("gamma", "gamma_start",
                    "γ at step 0 (warmup, epoch_increment, step_ramp) or below --gamma-success-low (success_ramp)"),
    "gamma_warmup_steps": ("gamma", "warmup_steps", "warmup schedule: steps of the linear γ increase"),
    "gamma_switch_step": ("gamma", "switch_step", "switch schedule: first step with γ (GRPO before it)"),
    "gamma_success_low": ("gamma", "success_low", "success_ramp: batch success rate at/below which γ = start"),
    "gamma_success_high": ("gamma", "success_high", "success_ramp: batch success rate at/above which γ = γ"),
    "gamma_warmup_epochs": ("gamma", "warmup_epochs", "epoch_increment: epochs before γ starts to grow"),
    "gamma_increment": ("gamma", "increment", "epoch_increment: γ added per epoch (capped at --gamma)"),
    "gamma_ramp_start": ("gamma", "ramp_start", "step_ramp: last step at --gamma-start"),
    "gamma_ramp_steps": ("gamma", "ramp_steps", "step_ramp: steps per unit of γ (capped at --gamma)"),
    "mixed_delta": ("asym", "delta", "mixed groups: a negative is kept when fewer than δ token edits from a "
                                     "positive; recomposition: cluster radius of all-negative groups"),
    "negative_reading": ("asym", "negative_reading", "w⁻ reading: text (falls with π̄) or formula (grows)"),
    "kl_direction": ("asym", "kl_direction", "direction of the confidence weight's KL"),
    "negative_eps": ("asym", "negative_eps", "w⁻ smoothing ε (article §4.2, against reward collapse)"),
}

# flat option name -> (section or None for a top-level field, field, help text): the CLI flags,
# `from_flat`, the pipeline's run specs
FLAT: dict[str, tuple[str | None, str, str]] = {
    **flat_table({None: RLConfig}), **{k: v for k, v in SHARED_OPTIONS.items() if v[0] == "gamma"},
    **flat_table({"objective": ObjectiveConfig, "rare": RareConfig, "optimizer": OptimizerConfig,
                  "rollout": RolloutConfig, "run": RunConfig, "components": AsymComponents}),
    **{k: v for k, v in SHARED_OPTIONS.items() if v[0] == "asym"},
}

# the enumerated options and their choices (the CLI's `choices`)
CHOICES: dict[str, tuple[str, ...]] = {
    "method": tuple(METHODS),
    "gamma_schedule": focal.GAMMA_SCHEDULES,
    "adv_std": ADV_STDS, "advantage": RL_ADVANTAGES,
    "aggregation": AGGREGATIONS,
    "asym_advantage": ASYM_ADVANTAGES,
    "kl_estimator": KL_ESTIMATORS,
    "logprob_temperature": LOGPROB_TEMPERATURES,
    "temperature_schedule": TEMPERATURE_SCHEDULES,
    "negative_reading": asymmetric.NEGATIVE_READINGS,
    "kl_direction": asymmetric.KL_DIRECTIONS,
}
