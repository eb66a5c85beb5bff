"""F-GRPO focal weight g = (1 − μ̂)^γ, γ schedules, and the low-learning-rate control (App. N).

F-GRPO (arXiv 2602.06717, §4) multiplies every advantage of a group by g = (1 − μ̂)^γ, where μ̂ is
the group's success rate (`advantages.success_rate`). Groups the policy already solves (μ̂ → 1)
are down-weighted, so rare correct solutions of hard prompts keep more of the gradient.
γ = 0 is plain GRPO (0^0 = 1 by convention, so a fully solved group keeps g = 1 at γ = 0).

The App. N control matches the *average* focal reduction with a smaller learning rate:
mean|A^GRPO| = 2·sqrt(μ(1−μ)) for binary rewards (population std), and averaging the focal
factor against it over μ ~ U(0, 1) gives m_γ = B(3/2, γ+3/2)/B(3/2, 3/2).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v
from catsim.objectives import advantages as adv
from catsim.objectives import losses, registry

__all__ = [
    "focal_weight",
    "apply_focal",
    "focal_group_advantages",
    "constant_gamma",
    "warmup_gamma",
    "success_ramp_gamma",
    "switch_gamma",
    "epoch_increment_gamma",
    "step_ramp_gamma",
    "GAMMA_SCHEDULES",
    "SCHEDULE_FIELDS",
    "GammaSchedule",
    "low_lr_multiplier",
    "mean_abs_grpo_advantage",
    "FOCAL_PREFIX",
    "NAMED_GAMMA",
    "focal_names",
    "resolve_method",
]


def focal_weight(success_rate, gamma):
    """g = (1 − μ̂)^γ (F-GRPO §4). Shapes broadcast; usually [] per group.

    Args:
      success_rate: μ̂ in [0, 1] (values outside are clipped, guarding graded-reward rounding).
      gamma: γ ≥ 0.

    Returns:
      g in [0, 1]; g = 1 for γ = 0 at every μ̂ (including μ̂ = 1), g = 0 at μ̂ = 1 for γ > 0.
    """
    v.check_nonnegative("gamma", gamma)
    base = jnp.clip(1.0 - jnp.asarray(success_rate), 0.0, 1.0)
    # jnp.power(0, 0) == 1, which is the convention that makes γ = 0 exactly GRPO.
    return jnp.power(base, gamma)


def apply_focal(advantages_N, success_rate, gamma):
    """A^F_j = (1 − μ̂)^γ · A_j for one group: [N], [], [] -> [N] (F-GRPO, F-DAPO, F-CISPO)."""
    v.check_rank("advantages_N", advantages_N, 1)
    return focal_weight(success_rate, gamma) * jnp.asarray(advantages_N)


def focal_group_advantages(
    rewards_N, gamma, *, kind="grpo", reward_correct=1.0, reward_wrong=0.0, eps=1e-6, ddof=0
):
    """F-GRPO advantages of one group: (1 − μ̂)^γ · A_j, with μ̂ and A from the same rewards.

    Args:
      rewards_N: [N] rewards in [Rw, Rc].
      gamma: γ ≥ 0 (γ = 0 returns the plain advantages).
      kind: a rule of `catsim.objectives.registry` ("grpo": std-normalised with ε = eps, "dr_grpo",
        "mean_centred", or a binary rule on 0/1 rewards, e.g. "maxrl" for F-MaxRL).
      ddof: the GRPO std: 0 = population std (the paper's analysis), 1 = sample std (verl, TRL).
      reward_correct, reward_wrong: Rc > Rw for μ̂ = (R̄ − Rw)/(Rc − Rw).

    Returns:
      [N] advantages (F-GRPO / F-Dr.GRPO; feed them to the DAPO/CISPO losses for F-DAPO/F-CISPO).
    """
    base = registry.get(kind).advantages(rewards_N, registry.Options(eps=eps, ddof=ddof))
    mu = adv.success_rate(rewards_N, reward_correct=reward_correct, reward_wrong=reward_wrong)
    return apply_focal(base, mu, gamma)


# --- γ schedules: pure functions of the step (and, for the success ramp, of a success rate) ---


def constant_gamma(step, gamma):
    """γ_t = γ for every step (the paper's setting)."""
    del step
    return jnp.asarray(gamma, dtype=jnp.result_type(float))


def warmup_gamma(step, gamma, warmup_steps, gamma_start=0.0):
    """Linear increase of γ from `gamma_start` at step 0 to `gamma` at `warmup_steps`, then flat."""
    step = jnp.asarray(step, dtype=jnp.result_type(float))
    # warmup_steps = 0 means "no warm-up": γ from step 0.
    frac = jnp.where(warmup_steps > 0, jnp.clip(step / jnp.maximum(warmup_steps, 1), 0.0, 1.0), 1.0)
    return gamma_start + (gamma - gamma_start) * frac


def success_ramp_gamma(success_rate, gamma, success_low, success_high, gamma_start=0.0):
    """γ as a ramp in the batch success rate: `gamma_start` below `success_low`, `gamma` above
    `success_high`, linear in between.

    Rationale: while the policy solves little, the focal weight mostly rescales the learning rate;
    once most prompts are solved, down-weighting the easy ones is what protects rare solutions.
    The caller decides which success rate to feed (the batch mean of μ̂, or a running average).
    """
    lo, hi = v.concrete_float(success_low), v.concrete_float(success_high)
    if lo is not None and hi is not None and not lo < hi:
        raise CatsimError(f"success_ramp needs success_low < success_high, got {lo} >= {hi}")
    s = jnp.asarray(success_rate, dtype=jnp.result_type(float))
    frac = jnp.clip((s - success_low) / (success_high - success_low), 0.0, 1.0)
    return gamma_start + (gamma - gamma_start) * frac


def switch_gamma(step, gamma, switch_step):
    """GRPO-then-F-GRPO: γ = 0 for step < `switch_step`, then `gamma`."""
    step = jnp.asarray(step)
    return jnp.where(step < switch_step, 0.0, gamma).astype(jnp.result_type(float))


def epoch_increment_gamma(step, gamma, gamma_start, steps_per_epoch, warmup_epochs, increment=0.1):
    """The F-GRPO article's "dynamic γ" rule (§4.2): every epoch after `warmup_epochs`,
    γ ← min(gamma, γ + increment), starting from `gamma_start` (article: cap 1.0, +0.1).

    The article's loop runs `if current_epoch > warmup_epochs: γ = min(1.0, γ + 0.1)` once per
    epoch; with 0-based epochs e = step // steps_per_epoch the increments done by epoch e number
    max(0, e − warmup_epochs), so γ_e = min(gamma, gamma_start + increment · max(0, e − warmup_epochs)).
    """
    epoch = jnp.asarray(step) // steps_per_epoch
    count = jnp.maximum(epoch - warmup_epochs, 0).astype(jnp.result_type(float))
    return jnp.minimum(jnp.asarray(gamma, jnp.result_type(float)), gamma_start + increment * count)


def step_ramp_gamma(step, gamma, gamma_start, ramp_start, ramp_steps):
    """The F-GRPO article's `get_gamma` curriculum (§5.2): γ = `gamma_start` up to step
    `ramp_start`, then gamma_start + (step − ramp_start)/ramp_steps, capped at `gamma`
    (article: 0.5 until step 1000, then 0.5 + (step − 1000)/2000, capped at 1.5)."""
    step = jnp.asarray(step, dtype=jnp.result_type(float))
    ramp = gamma_start + jnp.maximum(step - ramp_start, 0.0) / ramp_steps
    return jnp.minimum(jnp.asarray(gamma, jnp.result_type(float)), ramp)


GAMMA_SCHEDULES = ("constant", "warmup", "success_ramp", "switch", "epoch_increment", "step_ramp")
# the settings each kind reads besides gamma: a setting given away from its default to a kind that
# does not read it would never act (`GammaSchedule.ignored_settings`)
SCHEDULE_FIELDS = {
    "constant": (), "warmup": ("gamma_start", "warmup_steps"),
    "success_ramp": ("gamma_start", "success_low", "success_high"), "switch": ("switch_step",),
    "epoch_increment": ("gamma_start", "steps_per_epoch", "warmup_epochs", "increment"),
    "step_ramp": ("gamma_start", "ramp_start", "ramp_steps"),
}
_SCHEDULE_SETTINGS = tuple(dict.fromkeys(f for fields in SCHEDULE_FIELDS.values() for f in fields))


def _flag(name: str) -> str:
    """A schedule field with its CLI spelling (the simulator's and the trainer's):
    `--gamma-switch-step (switch_step)`."""
    return f"--gamma-{name.removeprefix('gamma_').replace('_', '-')} ({name})"


@dataclasses.dataclass(frozen=True)
class GammaSchedule:
    """Which γ to use at a step. Call as `schedule(step, success_rate=None) -> γ` (jittable).

    Kinds (`GAMMA_SCHEDULES`):
      constant         γ = gamma at every step (the paper's setting)
      warmup           linear from gamma_start at step 0 to gamma at warmup_steps (no delay)
      success_ramp     linear in the batch success rate: gamma_start at/below success_low,
                       gamma at/above success_high ("curriculum" is accepted as its old name)
      switch           γ = 0 (GRPO) before switch_step, then gamma
      epoch_increment  the article's §4.2 rule: + increment per epoch after warmup_epochs,
                       from gamma_start, capped at gamma (article: +0.1, cap 1.0)
      step_ramp        the article's §5.2 `get_gamma`: gamma_start until ramp_start, then
                       + 1/ramp_steps per step, capped at gamma (article: 0.5, 1000, 2000, 1.5)
    """

    kind: str = "constant"  # one of GAMMA_SCHEDULES
    gamma: float = 0.0  # target γ: the constant, the end of a warm-up/ramp, the value after a switch, the cap
    gamma_start: float = 0.0  # γ at step 0 (warmup, epoch_increment, step_ramp) / below success_low (success_ramp)
    warmup_steps: int = 0  # "warmup": steps of the linear increase from gamma_start to gamma
    switch_step: int = 0  # "switch": first step that uses gamma (γ = 0, plain GRPO, before it)
    success_low: float = 0.3  # "success_ramp": success rate at or below which γ = gamma_start
    success_high: float = 0.7  # "success_ramp": success rate at or above which γ = gamma
    steps_per_epoch: int = 1  # "epoch_increment": steps in one epoch (an epoch = one pass over the prompts)
    warmup_epochs: int = 0  # "epoch_increment": epochs before γ starts to grow
    increment: float = 0.1  # "epoch_increment": γ added per epoch after the warm-up
    ramp_start: int = 0  # "step_ramp": last step at gamma_start
    ramp_steps: int = 1  # "step_ramp": steps per unit of γ on the ramp

    def __post_init__(self):
        if self.kind == "curriculum":  # the old name of the success-rate ramp
            object.__setattr__(self, "kind", "success_ramp")
        if self.kind not in GAMMA_SCHEDULES:
            raise CatsimError(
                f"unknown gamma schedule {self.kind!r}; choose one of {', '.join(GAMMA_SCHEDULES)}"
            )
        v.check_nonnegative("gamma", self.gamma)
        v.check_nonnegative("gamma_start", self.gamma_start)
        v.check_nonnegative("increment", self.increment)
        for name, low in (("warmup_steps", 0), ("switch_step", 0), ("steps_per_epoch", 1),
                          ("warmup_epochs", 0), ("ramp_start", 0), ("ramp_steps", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < low:
                raise CatsimError(f"{name} must be a whole number >= {low}, got {value}")
        v.check_in_closed("success_low", self.success_low, 0.0, 1.0)
        v.check_in_closed("success_high", self.success_high, 0.0, 1.0)
        if self.kind == "success_ramp" and not self.success_low < self.success_high:
            raise CatsimError(
                f"success_ramp needs success_low < success_high, got {self.success_low} >= {self.success_high}"
            )

    def ignored_settings(self) -> list[str]:
        """The settings given away from their defaults that this kind never reads, each as
        "name = value" (empty when there is none): a run would claim them without their acting."""
        default = GammaSchedule()
        return [f"{_flag(name)} = {getattr(self, name)!r}" for name in _SCHEDULE_SETTINGS if name not in SCHEDULE_FIELDS[self.kind] and getattr(self, name) != getattr(default, name)]

    def check_settings(self) -> None:
        """CatsimError (one line) when a setting is given to a kind that ignores it."""
        ignored = self.ignored_settings()
        if ignored:
            raise CatsimError(f"the {self.kind} γ schedule ignores {', '.join(ignored)}: leave "
                              f"{'it' if len(ignored) == 1 else 'them'} out, or choose the schedule that reads "
                              f"{'it' if len(ignored) == 1 else 'them'}")

    def idle_reason(self, steps: int) -> str | None:
        """Why this schedule's step dependence never acts in a run of `steps` steps (0 … steps − 1),
        so that γ keeps its step-0 value throughout and an output naming the schedule's γ would claim
        a setting that did not act; None when it acts (or depends on the success rate only). A ramp
        that starts but does not reach its cap acts (the article's get_gamma on a short run)."""
        last, run = steps - 1, f"the run's last step is {steps - 1} ({steps} step{'s' if steps != 1 else ''})"
        fix = "; shorten the schedule or lengthen the run"
        if self.kind == "switch" and self.switch_step > last:
            return f"the switch to γ at {_flag('switch_step')} = {self.switch_step} never comes: {run}{fix}"
        if self.kind == "step_ramp" and self.ramp_start >= last:
            return (f"the γ ramp starts after {_flag('ramp_start')} = {self.ramp_start}, but {run}: γ would "
                    f"stay at {self.gamma_start:g}{fix}")
        if self.kind == "warmup" and self.warmup_steps > 0 and last < 1:
            return (f"the γ warm-up ({_flag('warmup_steps')} = {self.warmup_steps}) never leaves its first "
                    f"γ, {self.gamma_start:g}: {run}{fix}")
        if self.kind == "epoch_increment":
            if self.increment == 0:
                return (f"{_flag('increment')} = 0: γ would stay at {self.gamma_start:g}; give an increment "
                        f"> 0, or the constant schedule")
            epochs = last // self.steps_per_epoch + 1
            if epochs <= self.warmup_epochs + 1:
                return (f"γ grows only after {self.warmup_epochs + 1} epoch{'s' if self.warmup_epochs else ''} "
                        f"({_flag('warmup_epochs')} = {self.warmup_epochs}), but the run's {steps} steps make "
                        f"{epochs} epoch{'s' if epochs != 1 else ''} of {self.steps_per_epoch} step"
                        f"{'s' if self.steps_per_epoch != 1 else ''}: γ would stay at {self.gamma_start:g}{fix}")
        return None

    def check_acts(self, steps: int) -> None:
        """CatsimError (one line) when the schedule never acts in a run of `steps` steps."""
        reason = self.idle_reason(steps)
        if reason is not None:
            raise CatsimError(reason)

    @property
    def max_gamma(self) -> float:
        """The largest γ this schedule can return (for the m_γ control and for labels)."""
        if self.kind in ("warmup", "success_ramp"):
            return max(self.gamma, self.gamma_start)
        return self.gamma  # the ramps and increments are capped at gamma

    def __call__(self, step, success_rate=None):
        if self.kind == "constant":
            return constant_gamma(step, self.gamma)
        if self.kind == "warmup":
            return warmup_gamma(step, self.gamma, self.warmup_steps, self.gamma_start)
        if self.kind == "switch":
            return switch_gamma(step, self.gamma, self.switch_step)
        if self.kind == "epoch_increment":
            return epoch_increment_gamma(step, self.gamma, self.gamma_start, self.steps_per_epoch,
                                         self.warmup_epochs, self.increment)
        if self.kind == "step_ramp":
            return step_ramp_gamma(step, self.gamma, self.gamma_start, self.ramp_start, self.ramp_steps)
        if success_rate is None:
            raise CatsimError("the success_ramp gamma schedule needs the batch success rate")
        return success_ramp_gamma(
            success_rate, self.gamma, self.success_low, self.success_high, self.gamma_start
        )


# --- App. N: the GRPO low-learning-rate control ---


def mean_abs_grpo_advantage(success_rate):
    """E|A^GRPO| = 2·sqrt(μ(1−μ)) over one binary group with population std and ε = 0.

    Correct draws get sqrt((1−μ)/μ), wrong ones −sqrt(μ/(1−μ)); weighting by μ and 1−μ gives the
    formula. It is 0 at μ ∈ {0, 1} (inactive groups).
    """
    mu = jnp.clip(jnp.asarray(success_rate), 0.0, 1.0)
    return 2.0 * jnp.sqrt(mu * (1.0 - mu))


def low_lr_multiplier(gamma: float) -> float:
    """m_γ = B(3/2, γ+3/2)/B(3/2, 3/2) = (4/√π)·Γ(γ+3/2)/Γ(γ+3) (F-GRPO App. N).

    The ratio ∫ (1−μ)^γ·sqrt(μ(1−μ)) dμ / ∫ sqrt(μ(1−μ)) dμ over μ ∈ [0, 1]: the average focal
    reduction of the gradient scale under a uniform spread of success rates. The GRPO control runs
    at lr·m_γ (m_0.5 ≈ 0.679 → 6.8e-7 for a base lr of 1e-6). Host-side (SciPy), returns a float.
    """
    g = v.concrete_float(gamma)
    if g is None:
        raise CatsimError(
            "gamma for low_lr_multiplier must be a concrete number, not a traced value"
        )
    v.check_nonnegative("gamma", g)
    from scipy import special  # here, not at import: SciPy costs every command ~0.2 s of start-up

    return float(special.beta(1.5, g + 1.5) / special.beta(1.5, 1.5))


# --- method names with the focal weight on: f-grpo, f-dapo, f-cispo ---

FOCAL_PREFIX = "f-"
# γ of a method named f-* when no γ is given: the paper's LLM setting (F-GRPO γ = 0.5, §5.2)
NAMED_GAMMA = 0.5


def focal_names(methods) -> tuple[str, ...]:
    """"f-" + each of `methods` the paper gives an F- variant (a clipped GRPO-family surrogate,
    `losses.CLIPPED`): ("grpo", "dapo", "cispo", "linear") -> ("f-grpo", "f-dapo", "f-cispo")."""
    return tuple(FOCAL_PREFIX + name for name in methods if name in losses.CLIPPED)


def resolve_method(method: str, gammas, flag: str = "--gamma") -> tuple[str, tuple | None]:
    """(the base method, the γ values that act) of a method name: "f-grpo" with no γ given (None)
    runs GRPO at γ = `NAMED_GAMMA`; "f-grpo" with γ = 0 is refused (CatsimError: the focal weight
    would never act); any other name keeps `gammas` as given. `gammas`: a tuple of γ, or None."""
    if not method.startswith(FOCAL_PREFIX):
        return method, gammas
    base = method[len(FOCAL_PREFIX):]
    if base not in losses.CLIPPED:
        raise CatsimError(f"unknown method {method!r}: the focal ones are {', '.join(focal_names(losses.CLIPPED))}")
    if gammas is None:
        return base, (NAMED_GAMMA,)
    if any(g == 0 for g in gammas):
        raise CatsimError(f"--method {method} with {flag} 0: the focal weight (1 − μ̂)^γ would never act "
                          f"(use --method {base} for γ = 0)")
    return base, tuple(gammas)
