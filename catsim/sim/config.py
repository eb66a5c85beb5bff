"""Typed, frozen configuration of the categorical-policy simulator (paper §5.1, App. J).

Three layers, each owned by one module:
  PolicyConfig  -> `catsim.sim.policy`   (the action space and the initial logits)
  UpdateConfig  -> `catsim.sim.engine`   (objective, advantages, focal weight, optimizer, controls)
  SimConfig     -> `catsim.sim.engine`   (policy + update + group size, steps, sampler, logging)

Named scenarios (`scenario(name)`) give the published set-ups; every field can be overridden with
`dataclasses.replace`. Construction validates and raises `CatsimError` with a one-line message.
Field names match the LLM trainer's (`optimizer`, `adv_eps`, `low_lr_gamma`, `gamma:
GammaSchedule`, `asym: AsymmetricConfig`).
"""

from __future__ import annotations

import dataclasses
import math

from catsim.errors import CatsimError
from catsim.objectives import focal, registry
from catsim.objectives.asymmetric import AsymmetricConfig
from catsim.objectives.focal import GammaSchedule
from catsim.objectives.grad_clip import dual_threshold_clip

INIT_KINDS = ("paper", "uniform", "gaussian", "zipf", "target_qpos")
SURROGATES = ("linear", "reinforce", "grpo", "dapo", "cispo")
ADVANTAGES = registry.NAMES  # the group-advantage rules (catsim.objectives.registry)
OPTIMIZERS = ("sgd", "adam", "adamw")
SAMPLERS = ("auto", "inverse_cdf", "blocked")


def _finite(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CatsimError(f"{name} must be a finite number, got {value!r}")


def _whole(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise CatsimError(f"{name} must be a whole number >= {low}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """Action space and initial logits of the softmax policy. Actions 0..C−1 are correct
    (action 0 is the anchor), actions C..V−1 are incorrect."""

    num_actions: int = 128_000  # V, the number of actions (paper: 128,000)
    num_correct: int = 10_000  # C, correct actions, 1 <= C < V (paper: 10,000)
    init: str = "paper"  # one of INIT_KINDS; "paper" is App. J's anchor/correct/incorrect logits
    anchor_logit: float = 5.0  # "paper": logit of the anchor correct action (action 0)
    correct_logit: float = 3.0  # "paper": logit of every other correct action
    incorrect_logit: float = 0.0  # "paper": logit of every incorrect action
    gaussian_std: float = 1.0  # "gaussian": logits ~ N(0, std^2), drawn with `init_seed`
    zipf_exponent: float = 1.0  # "zipf": p(rank r) ∝ r^(−s); ranks are interleaved over both sets
    target_qpos: float = 0.63  # "target_qpos": uniform within each set, correct mass = this value
    init_seed: int = 0  # seed of the random initialisations ("gaussian", "zipf" rank order)

    def __post_init__(self):
        _whole("num_actions", self.num_actions, 2)
        _whole("num_correct", self.num_correct, 1)
        if self.num_correct >= self.num_actions:
            raise CatsimError(
                f"num_correct ({self.num_correct}) must be smaller than num_actions ({self.num_actions})"
            )
        if self.init not in INIT_KINDS:
            raise CatsimError(f"unknown init {self.init!r}; choose one of {', '.join(INIT_KINDS)}")
        for name in ("anchor_logit", "correct_logit", "incorrect_logit", "zipf_exponent"):
            _finite(name, getattr(self, name))
        _finite("gaussian_std", self.gaussian_std)
        if self.gaussian_std < 0:
            raise CatsimError(f"gaussian_std must be >= 0, got {self.gaussian_std}")
        _finite("target_qpos", self.target_qpos)
        if not 0.0 < self.target_qpos < 1.0:
            raise CatsimError(f"target_qpos must lie in (0, 1), got {self.target_qpos}")
        _whole("init_seed", self.init_seed, 0)


@dataclasses.dataclass(frozen=True)
class UpdateConfig:
    """One policy-gradient step: the objective (from `catsim.objectives`), its optimizer, controls.

    Rewards: a correct draw gets `reward_correct`, a wrong one `reward_wrong` (App. J: ±1).
    """

    surrogate: str = "reinforce"  # "linear" (eq. 5), "reinforce" (log-prob), "grpo", "dapo", "cispo"
    advantage: str = "mean_centred"  # a rule of `objectives.registry`: "mean_centred" (App. J, r − mean),
    # "grpo" (÷ std + eps) on the reward levels, or a binary rule (on the 0/1 success indicators)
    adv_eps: float = 0.0  # ε in the GRPO std denominator (0 = exact); also MaxRL's and passk_best's ε
    passk_k: int = 4  # k of passk_training, pkpo and pkpo_mean (at most N)
    w_reinforce_lambda: float = 0.1  # λ of advantage w_reinforce (the paper's 0.1)
    unlikeliness_beta: float = 0.0  # β of the unlikeliness reward (0 = off; paper 0.25)
    positive_weight: float = 1.0  # catsim's variant: λ × the positive advantages of the rule (1 = off);
    # the published W-REINFORCE is advantage "w_reinforce" (no baseline)
    reward_correct: float = 1.0  # Rc
    reward_wrong: float = -1.0  # Rw < Rc
    gamma: GammaSchedule = GammaSchedule()  # focal weight (1 − μ̂)^γ; γ is overridden per run
    optimizer: str = "adam"  # "sgd", "adam" or "adamw" (optax)
    learning_rate: float = 1e-2  # η; the low-lr control (low_lr_gamma > 0) multiplies it by m_G
    weight_decay: float = 0.0  # AdamW decoupled weight decay (ignored by sgd/adam)
    b1: float = 0.9  # Adam β1
    b2: float = 0.999  # Adam β2
    adam_eps: float = 1e-8  # Adam ε
    ppo_epochs: int = 1  # optimizer steps on the same group (clipping only acts from epoch 2)
    clip_low: float | None = None  # ε_low; None = the surrogate's default (0.2 / 0.2 / 1.0)
    clip_high: float | None = None  # ε_high; None = the surrogate's default (0.2 / 0.28 / 5.0)
    entropy_coef: float = 0.0  # entropy bonus: loss −= coef · H(π)
    kl_coef: float = 0.0  # penalty coef · KL(π ‖ π_0), exact over all V actions
    low_lr_gamma: float = 0.0  # App. N control: G > 0 runs at lr · m_G (focal γ unchanged); 0 = off
    dynamic_sampling: bool = False  # DAPO: redraw all-equal groups (up to `max_resamples` times)
    max_resamples: int = 16  # cap on redraws per step under dynamic sampling
    # --- asymmetric GRPO (docs/asymmetric-grpo.md); all off = the update above ---
    asym_channels: bool = False  # A > 0 → w⁺(r)·A, A < 0 → w⁻(π_a)·A (asymmetric_advantages)
    asym_confidence: bool = False  # A < 0 also × b + (1−b)·sigmoid(−KL) of the policy's logits
    asym_recompose: bool = False  # loss over the draws kept by recompose_group (scores: log π)
    dual_clip: float | None = None  # max-norm of dual_threshold_clip before the optimizer; None off
    dual_clip_lower: float = 0.1  # below this gradient norm the update is amplified
    dual_clip_amplification: float = 1.5  # the amplification factor
    asym: AsymmetricConfig = AsymmetricConfig()  # hyper-parameters of the components above

    def __post_init__(self):
        if self.surrogate not in SURROGATES:
            raise CatsimError(
                f"unknown update rule {self.surrogate!r}; choose one of {', '.join(SURROGATES)}"
            )
        if self.advantage not in ADVANTAGES:
            raise CatsimError(
                f"unknown advantage {self.advantage!r}; choose one of {', '.join(ADVANTAGES)}"
            )
        if self.optimizer not in OPTIMIZERS:
            raise CatsimError(
                f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}"
            )
        for name in ("adv_eps", "reward_correct", "reward_wrong", "learning_rate",
                     "weight_decay", "b1", "b2", "adam_eps", "entropy_coef", "kl_coef",
                     "low_lr_gamma"):
            _finite(name, getattr(self, name))
        if not self.reward_correct > self.reward_wrong:
            raise CatsimError(
                f"reward_correct ({self.reward_correct}) must exceed reward_wrong ({self.reward_wrong})"
            )
        if self.learning_rate <= 0:
            raise CatsimError(f"learning_rate must be > 0, got {self.learning_rate}")
        for name in ("adv_eps", "weight_decay", "adam_eps", "entropy_coef", "kl_coef", "low_lr_gamma"):
            if getattr(self, name) < 0:
                raise CatsimError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("b1", "b2"):
            if not 0 <= getattr(self, name) < 1:
                raise CatsimError(f"{name} must lie in [0, 1), got {getattr(self, name)}")
        _whole("ppo_epochs", self.ppo_epochs, 1)
        _whole("passk_k", self.passk_k, 1)
        for name in ("unlikeliness_beta", "positive_weight", "w_reinforce_lambda"):
            _finite(name, getattr(self, name))
        if self.w_reinforce_lambda < 0:
            raise CatsimError(f"w_reinforce_lambda must be >= 0, got {self.w_reinforce_lambda}")
        if not 0.0 <= self.unlikeliness_beta <= 1.0:
            raise CatsimError(f"unlikeliness_beta must lie in [0, 1], got {self.unlikeliness_beta}")
        if self.positive_weight < 0:
            raise CatsimError(f"positive_weight must be >= 0, got {self.positive_weight}")
        if self.unlikeliness_beta > 0:
            if self.advantage not in ("mean_centred", "grpo"):
                raise CatsimError("the unlikeliness reward runs with advantage mean_centred or grpo, "
                                  f"not {self.advantage}")
            if (self.ppo_epochs != 1 or self.entropy_coef or self.kl_coef or self.asymmetric
                    or self.surrogate not in SURROGATES):
                raise CatsimError("the unlikeliness reward needs one PPO epoch and no entropy, KL or "
                                  "asymmetric terms (it ranks the draws of the lean step)")
        _whole("max_resamples", self.max_resamples, 0)
        for name in ("clip_low", "clip_high"):
            value = getattr(self, name)
            if value is not None:
                _finite(name, value)
                if value < 0:
                    raise CatsimError(f"{name} must be >= 0, got {value}")
        if not isinstance(self.gamma, GammaSchedule):
            raise CatsimError("gamma must be a catsim.objectives.focal.GammaSchedule")
        self.gamma.check_settings()  # a setting its kind ignores would never act
        if not isinstance(self.asym, AsymmetricConfig):
            raise CatsimError("asym must be a catsim.objectives.asymmetric.AsymmetricConfig")
        if self.dual_clip is not None:  # validates the three numbers (CatsimError)
            dual_threshold_clip(self.dual_clip, self.dual_clip_lower, self.dual_clip_amplification)

    @property
    def asymmetric(self) -> bool:
        """True when any asymmetric-GRPO component is switched on."""
        return (self.asym_channels or self.asym_confidence or self.asym_recompose
                or self.dual_clip is not None)

    @property
    def label(self) -> str:
        """Short method label used as the `method` coordinate of results."""
        label = f"{self.optimizer}-{self.surrogate}-lr{self.learning_rate:g}"
        if self.advantage not in ("mean_centred", "grpo"):
            label += f"-{self.advantage}" + (f"{self.passk_k}" if registry.get(self.advantage).needs_k else "")
            if self.advantage == "w_reinforce":
                label += f"{self.w_reinforce_lambda:g}"
        if self.unlikeliness_beta > 0:
            label += f"-unlikely{self.unlikeliness_beta:g}"
        if self.positive_weight != 1.0:
            label += f"-pos{self.positive_weight:g}"
        if self.low_lr_gamma > 0:
            label += f"-lowlr{self.low_lr_gamma:g}"
        label += "".join(f"-{part}" for part in _other_settings(self))
        if self.asymmetric:
            parts = [name for name, on in (("ch", self.asym_channels), ("conf", self.asym_confidence),
                                           ("rec", self.asym_recompose)) if on]
            if self.dual_clip is not None:
                parts.append(f"clip{self.dual_clip:g}")
            parts += _asym_settings(self)
            label += "+asym-" + "-".join(parts)
        return label


# The label's parts for the settings its first form left out (the rule grpo, ε, rewards, optimizer,
# clipping, entropy, KL, dynamic sampling, the γ schedule): each only when it differs from
# UpdateConfig's default and acts under the rest of the update, so that the default label stays
# what it was (the published cells and figures are named by it) and two updates that can give
# different results never share a label, cell file or figure.
EPS_RULES = registry.EPS_NAMES  # the rules that read adv_eps (registry.Options.eps)
_SCHEDULE_SHORT = {"gamma_start": "from", "warmup_steps": "over", "switch_step": "at", "success_low": "lo",
                   "success_high": "hi", "steps_per_epoch": "epoch", "warmup_epochs": "after",
                   "increment": "inc", "ramp_start": "after", "ramp_steps": "per"}


def _other_settings(u: UpdateConfig) -> list[str]:
    d = UpdateConfig()
    parts = ["grpo"] if u.advantage == "grpo" else []
    if u.advantage in EPS_RULES and u.adv_eps != d.adv_eps:
        parts.append(f"eps{u.adv_eps:g}")
    if not registry.get(u.advantage).binary and (u.reward_correct, u.reward_wrong) != (d.reward_correct, d.reward_wrong):
        parts.append(f"rew{u.reward_correct:g}_{u.reward_wrong:g}")
    if u.optimizer == "adamw" and u.weight_decay != d.weight_decay:
        parts.append(f"wd{u.weight_decay:g}")
    if u.optimizer != "sgd":
        parts += [f"{short}{getattr(u, name):g}" for name, short in (("b1", "b1"), ("b2", "b2"), ("adam_eps", "aeps"))
                  if getattr(u, name) != getattr(d, name)]
    if u.ppo_epochs != d.ppo_epochs:
        parts.append(f"epochs{u.ppo_epochs}")
        if u.surrogate in ("grpo", "dapo", "cispo"):  # the clip bounds act from the second epoch on
            parts += [f"{name.replace('_', '')}{getattr(u, name):g}" for name in ("clip_low", "clip_high")
                      if getattr(u, name) is not None]
    parts += [f"{short}{getattr(u, name):g}" for name, short in (("entropy_coef", "ent"), ("kl_coef", "kl"))
              if getattr(u, name) != getattr(d, name)]
    if u.dynamic_sampling:
        parts.append("dyn" + (f"{u.max_resamples}" if u.max_resamples != d.max_resamples else ""))
    if u.gamma.kind != "constant":  # the γ values themselves are the results' gamma coordinate
        parts.append("g" + u.gamma.kind.replace("_", "") + "".join(
            f"_{_SCHEDULE_SHORT[name]}{getattr(u.gamma, name):g}" for name in focal.SCHEDULE_FIELDS[u.gamma.kind]))
    return parts


def _asym_settings(u: UpdateConfig) -> list[str]:
    """The asymmetric components' settings away from their defaults (the label's +asym part)."""
    d, parts = UpdateConfig(), []
    if u.dual_clip is not None:
        parts += [f"{short}{getattr(u, name):g}" for name, short in
                  (("dual_clip_lower", "cliplow"), ("dual_clip_amplification", "clipamp"))
                  if getattr(u, name) != getattr(d, name)]
    for f in dataclasses.fields(AsymmetricConfig):
        value = getattr(u.asym, f.name)
        if value != getattr(d.asym, f.name):
            parts.append(f"{f.name.replace('_', '')}{value:g}" if isinstance(value, (int, float)) else str(value))
    return parts


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """One simulation: a policy, an update rule, a group size N and a number of steps."""

    policy: PolicyConfig = PolicyConfig()  # action space and initial logits
    update: UpdateConfig = UpdateConfig()  # objective and optimizer
    group_size: int = 256  # N, i.i.d. draws per step (>= 1)
    steps: int = 1000  # T, policy updates
    log_every: int = 1  # record metrics every k steps (steps must be a multiple of k)
    sampler: str = "auto"  # "auto" (by N), "inverse_cdf" (full CDF + search), "blocked" (per draw)
    method: str = ""  # label of the method in results; "" = `update.label`

    def __post_init__(self):
        if not isinstance(self.policy, PolicyConfig) or not isinstance(self.update, UpdateConfig):
            raise CatsimError("policy and update must be PolicyConfig and UpdateConfig")
        _whole("group_size (N)", self.group_size, 1)
        _whole("steps", self.steps, 1)
        _whole("log_every", self.log_every, 1)
        if self.steps % self.log_every:
            raise CatsimError(f"steps ({self.steps}) must be a multiple of log_every ({self.log_every})")
        if self.sampler not in SAMPLERS:
            raise CatsimError(f"unknown sampler {self.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        self.update.gamma.check_acts(self.steps)  # a schedule that never acts in this run is refused

    def check_k(self) -> None:
        """The pass@k rules' k against this config's N: k > N refused, k = N warned
        (`registry.warn_k`). The runs check it (`sim.sweep.simulate`, `plan_sweep`), not the
        config itself: a scenario is a template whose N each run replaces."""
        registry.warn_k(self.update.advantage, self.update.passk_k, self.group_size)

    @property
    def method_label(self) -> str:
        return self.method or self.update.label


# --- named scenarios ---------------------------------------------------------------------------

# The paper's App. J policy and grid (Fig. 2).
PAPER_GROUP_SIZES = tuple(2**k for k in range(1, 18))  # 2, 4, ..., 131072
PAPER_GAMMAS = (0.0, 1.0)
PAPER_SEEDS = 4
PAPER_STEPS = 1000
# BroRL Fig. 3 (Hu et al. 2025, §4.1).
BRORL_GROUP_SIZES = (4, 8, 16, 512, 51200)

SCENARIOS = {
    # Default reading of Fig. 2: Adam at 1e-2 on the log-prob objective with the paper's centred
    # rewards. It is the reading that reproduces the published picture (docs/simulator.md).
    "paper": SimConfig(
        update=UpdateConfig(surrogate="reinforce", optimizer="adam", learning_rate=1e-2),
        method="paper",
    ),
    # The literal text of App. J: plain gradient ascent on the linear surrogate at η = 1e-2.
    "paper-literal": SimConfig(
        update=UpdateConfig(surrogate="linear", optimizer="sgd", learning_rate=1e-2),
        method="paper-literal",
    ),
    # Adam on the linear surrogate at 1e-2 (the other reading THEORY.md §4 discusses).
    "paper-adam-linear": SimConfig(
        update=UpdateConfig(surrogate="linear", optimizer="adam", learning_rate=1e-2),
        method="paper-adam-linear",
    ),
    # BroRL Fig. 3: AdamW at 1e-3 minimising the linear surrogate.
    "brorl": SimConfig(
        update=UpdateConfig(
            surrogate="linear", optimizer="adamw", learning_rate=1e-3, weight_decay=0.01
        ),  # weight decay: PyTorch's AdamW default (BroRL does not state it)
        method="brorl",
    ),
}

SCENARIO_GRIDS = {
    "paper": PAPER_GROUP_SIZES,
    "paper-literal": PAPER_GROUP_SIZES,
    "paper-adam-linear": PAPER_GROUP_SIZES,
    "brorl": BRORL_GROUP_SIZES,
}


def scenario(name: str) -> SimConfig:
    """The named set-up (see SCENARIOS). Raises CatsimError for an unknown name."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise CatsimError(
            f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}"
        ) from None
