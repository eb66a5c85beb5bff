"""F-GRPO and catsim's rare-solution rules inside TRL's GRPOTrainer (trl >= 1.0, < 1.17; tested on 1.0.0 and 1.16.0).

Change one import line and the config class:

    from catsim.integrations.trl import FGRPOConfig, FGRPOTrainer   # was: from trl import ...
    args = FGRPOConfig(output_dir="out", focal_gamma=0.5)              # F-GRPO (arXiv 2602.06717)
    trainer = FGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

`advantage_rule="grpo"` (the default) keeps TRL's own advantages (its `scale_rewards` and
`multi_objective_aggregation`) and multiplies each group's by F-GRPO's focal weight (1 − μ̂)^γ;
any other name of `catsim.objectives.registry` ("maxrl", "passk_training", "pkpo", ...) replaces
them with that rule × the focal weight (γ = 0: the rule as published).

Success (μ̂ and what the catsim rules read):
  * one reward function, no success option: that reward, in [reward_wrong, reward_correct]
    (μ̂ = (R̄ − Rw)/(Rc − Rw); a 0/1 rule reads reward > (Rc + Rw)/2 as correct);
  * `success_reward_funcs=["accuracy"]` (names as TRL logs them, or indices into `reward_funcs`)
    and/or `success_threshold` (default 1.0): a completion succeeds when every named function that
    scored it (returned a number, not None) gives at least the threshold; μ̂ is the group's share
    of successes and a replacing rule reads success as its 0/1 reward. Reward weights and the
    other reward functions (a format reward) act only through TRL's own advantages (rule "grpo");
  * several reward functions and neither option: refused when the trainer is built (before the
    model is loaded). TRL's summed reward would count a format reward that every completion earns
    as success, so every group would read as solved and F-GRPO's weight would zero every advantage.

How it hooks in: no TRL release from 1.0.0 to 1.16.0 has a public hook for the advantages
(`trl/trainer/grpo_trainer.py` computes them inside `_generate_and_score_completions`; TRL's
maintainers name overriding that method as the way to change them). So the subclass chains two
private methods, whose signatures `check_trl` verifies when the trainer class is built (a one-line
CatsimError otherwise, never a silent fallback): `_calculate_rewards` returns the [B_all, F]
rewards of every function, gathered from every process, which the subclass keeps;
`_generate_and_score_completions` runs TRL's body through `super()`, then the subclass computes the
per-group weights (or advantages) on JAX's CPU from the gathered rewards
(`catsim.integrations.host`), slices this process's share exactly as TRL slices its advantages
(`process_index * len(inputs)`), replaces `advantages`, fixes the logged advantages and logs
`catsim/*` metrics. `pyproject.toml`'s `trl` extra pins the tested range.

A group holding an unscorable completion (every reward function, or every success function,
returned None) gets advantage 0, under every rule and γ (TRL's own GRPO zeroes only that
completion and leaves it out of its group's mean, so with one, γ = 0 differs from a plain
GRPOTrainer in that group). A group of one (`num_generations_eval=1`) gets 0, as in TRL. Every
catsim field is checked when the config is built (a one-line CatsimError naming the field), and
pass@k's k against `num_generations` and `num_generations_eval`, before a model is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from collections.abc import Sequence

import numpy as np
import torch
from trl import GRPOConfig

from catsim.errors import CatsimError
from catsim.integrations import host
from catsim.objectives import registry

__all__ = ["FGRPOConfig", "make_trainer", "FGRPOTrainer", "estimator_of", "success_columns", "success_of",  # noqa: F822 - FGRPOTrainer is built lazily (__getattr__)
           "check_trl"]

log = logging.getLogger(__name__)

TRL_OWN = "grpo"  # this rule keeps TRL's advantages and only scales them
TRL_LOWEST, TRL_BELOW = (1, 0), (1, 17)  # the tested range of trl (major, minor): pyproject's `trl` extra
TRL_RANGE = f">={TRL_LOWEST[0]}.{TRL_LOWEST[1]},<{TRL_BELOW[0]}.{TRL_BELOW[1]}"
TESTED_TRL = ("1.0.0", "1.16.0")  # .ci/run tests both ends
DEFAULT_SUCCESS_THRESHOLD = 1.0  # success_threshold when success_reward_funcs alone is set
# the private GRPOTrainer methods the subclass overrides, with the parameters it calls them with
OVERRIDDEN = {"_calculate_rewards": ("self", "inputs", "prompts", "completions", "completion_ids_list"),
              "_generate_and_score_completions": ("self", "inputs")}


@dataclasses.dataclass
class FGRPOConfig(GRPOConfig):
    """TRL's GRPOConfig plus the group-advantage rule and its options (catsim.objectives.registry)."""

    focal_gamma: float = dataclasses.field(default=host.DEFAULT_GAMMA, metadata={
        "help": "F-GRPO focal exponent γ: each group's advantages × (1 − μ̂)^γ; 0 = the rule as published."})
    advantage_rule: str = dataclasses.field(default=TRL_OWN, metadata={
        "help": f"'grpo' scales TRL's advantages; one of {', '.join(registry.NAMES)} replaces them."})
    passk_k: int = dataclasses.field(default=4, metadata={"help": "k of passk_training / pkpo / pkpo_mean."})
    advantage_eps: float = dataclasses.field(default=1e-6, metadata={"help": "ε of the catsim rules."})
    advantage_ddof: int = dataclasses.field(default=1, metadata={
        "help": "std of catsim's grpo rules: 1 sample (TRL), 0 population."})
    w_reinforce_lambda: float = dataclasses.field(default=0.1, metadata={"help": "λ of W-REINFORCE."})
    reward_correct: float = dataclasses.field(default=1.0, metadata={"help": "Rc: μ̂ = (R̄ − Rw)/(Rc − Rw)."})
    reward_wrong: float = dataclasses.field(default=0.0, metadata={"help": "Rw < Rc."})
    success_reward_funcs: list[str] | None = dataclasses.field(default=None, metadata={
        "help": "The reward functions whose outputs are success (μ̂ and the 0/1 rules): names as TRL logs them "
                "(rewards/<name>/mean) or indices into reward_funcs. A completion succeeds when each of them "
                "that scored it gives >= success_threshold. Needed with several reward functions."})
    success_threshold: float | None = dataclasses.field(default=None, metadata={
        "help": f"A success reward counts as success from this value up (default {DEFAULT_SUCCESS_THRESHOLD} "
                "where success_reward_funcs is set). Unset with one reward function and no "
                "success_reward_funcs: μ̂ reads that reward in [reward_wrong, reward_correct]."})

    def __post_init__(self):
        super().__post_init__()
        _success_choice(self)  # checked here; matched against the reward functions when the trainer is built
        est = estimator_of(self)  # every catsim field, checked here, before any model is loaded
        ignored = ignored_fields(self)
        if ignored:
            raise CatsimError(f"advantage_rule={est.rule!r} does not read {', '.join(ignored)}: it would "
                              "have no effect (leave it at its default, or choose a rule that reads it)")
        for field in ("num_generations", "num_generations_eval"):
            n = getattr(self, field, None)
            if n is None:
                continue
            try:
                warning = registry.check_k(est.rule, est.options.k, n)
            except CatsimError as e:
                raise CatsimError(f"{field} = {n}: {e}") from None
            if warning:
                log.warning("catsim: %s: %s", field, warning)


# the registry option each FGRPOConfig field sets (host.options_from's keys)
_OPTION_OF = {"focal_gamma": "gamma", "passk_k": "k", "advantage_eps": "eps", "advantage_ddof": "ddof",
              "w_reinforce_lambda": "w_reinforce_lambda", "reward_correct": "reward_correct",
              "reward_wrong": "reward_wrong"}
_OWN_FIELDS = ("advantage_rule", *_OPTION_OF)


def estimator_of(args) -> host.Estimator:
    """The rule, γ and options of a config (a plain GRPOConfig gets FGRPOConfig's defaults).

    A bad value is a one-line CatsimError naming the field (`advantage_ddof must be 0 ... got 2`).
    """
    defaults = {f.name: f.default for f in dataclasses.fields(FGRPOConfig) if f.name in _OWN_FIELDS}
    get = functools.partial(_field, args, defaults)
    gamma, options = host.options_from({option: get(field) for field, option in _OPTION_OF.items()},
                                       labels={option: field for field, option in _OPTION_OF.items()},
                                       where="FGRPOConfig")
    return host.Estimator(get("advantage_rule"), gamma, options)


def read_fields(rule: str) -> set[str]:
    """The FGRPOConfig fields `rule` reads. Every rule reads γ and the reward levels (μ̂ of the
    focal weight); "grpo" keeps TRL's own advantages (its ε and std), so catsim's ε and ddof act
    only in the other rules that read them (`Rule.reads_eps`, `Rule.reads_ddof`)."""
    fields = {"advantage_rule", "focal_gamma", "reward_correct", "reward_wrong"}
    if rule != TRL_OWN and registry.get(rule).needs_k:
        fields.add("passk_k")
    if rule != TRL_OWN and registry.get(rule).reads_eps:  # MaxRL's p̂ + ε, passk_best's std + ε
        fields.add("advantage_eps")
    if rule != TRL_OWN and registry.get(rule).reads_ddof:  # inverse_success's GRPO std
        fields.add("advantage_ddof")
    if rule == "w_reinforce":
        fields.add("w_reinforce_lambda")
    return fields


def ignored_fields(args) -> list[str]:
    """The catsim fields of `args` set away from their defaults that its rule never reads (they
    were accepted and silently did nothing: `advantage_ddof=0` under a rule with no std; the reward levels
    where success is named, since success is then 0/1)."""
    defaults = {f.name: f.default for f in dataclasses.fields(FGRPOConfig) if f.name in _OWN_FIELDS}
    reads = read_fields(_field(args, defaults, "advantage_rule"))
    if success_is_named(args):
        reads -= {"reward_correct", "reward_wrong"}
    return [f"{name} = {_field(args, defaults, name)!r}" for name in _OWN_FIELDS
            if name not in reads and _field(args, defaults, name) != defaults[name]]


def _field(args, defaults, name):
    return getattr(args, name, defaults[name])


# --- success: which reward functions say a completion is right ------------------------------------

def success_is_named(args) -> bool:
    """True where the config names success (success_reward_funcs or success_threshold): μ̂ is then a
    share of 0/1 successes, not a reward level."""
    return getattr(args, "success_reward_funcs", None) is not None or getattr(args, "success_threshold", None) is not None


def _success_choice(args) -> tuple[tuple[str | int, ...] | None, float | None]:
    """(the named success functions or None, the threshold or None), each checked: one-line CatsimErrors."""
    chosen, threshold = getattr(args, "success_reward_funcs", None), getattr(args, "success_threshold", None)
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)
                                  or not np.isfinite(threshold)):
        raise CatsimError(f"success_threshold must be a finite number, got {threshold!r}")
    if chosen is None:
        return None, threshold
    if isinstance(chosen, str | int) and not isinstance(chosen, bool):
        chosen = [chosen]  # one name or index
    if not isinstance(chosen, Sequence) or not chosen:
        raise CatsimError(f"success_reward_funcs must be a non-empty list of reward function names or indices, "
                          f"got {chosen!r}")
    for item in chosen:
        if isinstance(item, bool) or not (isinstance(item, int) and item >= 0 or isinstance(item, str) and item):
            raise CatsimError(f"success_reward_funcs: {item!r} is neither a reward function's name nor an index >= 0")
    if len(set(chosen)) < len(chosen):
        raise CatsimError(f"success_reward_funcs names a reward function twice: {list(chosen)!r}")
    return tuple(chosen), threshold


def success_columns(args, names: Sequence[str]) -> tuple[tuple[int, ...], float] | None:
    """The columns of TRL's [B, F] per-function rewards that are success, and the threshold; None
    where μ̂ reads the one reward function's reward in [reward_wrong, reward_correct] (no success option).

    Args:
      args: the config (its `success_reward_funcs`, `success_threshold`; a plain GRPOConfig has neither).
      names: the F reward functions' names, as TRL logs them (`GRPOTrainer.reward_func_names`).

    Several reward functions and no `success_reward_funcs`, an unknown or ambiguous name and an index
    out of range are one-line CatsimErrors that say what to pass.
    """
    chosen, threshold = _success_choice(args)
    names = list(names)
    if chosen is None:
        if len(names) == 1:
            return None if threshold is None else ((0,), threshold)
        why = " (success_threshold alone does not say which)" if threshold is not None else ""
        raise CatsimError(
            f"{len(names)} reward functions ({', '.join(names)}) and no success_reward_funcs{why}: catsim's μ̂ would "
            f"read their sum, where a reward every completion earns (a format reward) makes every group look solved "
            f"and F-GRPO's weight zeroes its advantages; name the ones that define success, e.g. "
            f"FGRPOConfig(..., success_reward_funcs=[{names[-1]!r}])")
    columns = []
    for item in chosen:
        if isinstance(item, str) and item not in names and item.isdigit():
            item = int(item)  # an index given on a command line
        if isinstance(item, int):
            if item >= len(names):
                raise CatsimError(f"success_reward_funcs: index {item} is out of range for {len(names)} reward "
                                  f"function(s) ({', '.join(names)})")
            columns.append(item)
        elif names.count(item) == 1:
            columns.append(names.index(item))
        elif item in names:
            raise CatsimError(f"success_reward_funcs: {len(names)} reward functions are named {item!r}; give the "
                              f"index of the one that defines success (0 to {len(names) - 1})")
        else:
            raise CatsimError(f"success_reward_funcs: no reward function is named {item!r}; they are "
                              f"{', '.join(names)} (or give an index, 0 to {len(names) - 1})")
    if len(set(columns)) < len(columns):
        raise CatsimError(f"success_reward_funcs names a reward function twice: {list(chosen)!r}")
    return tuple(columns), DEFAULT_SUCCESS_THRESHOLD if threshold is None else float(threshold)


def success_of(rewards_per_func: torch.Tensor, columns: Sequence[int], threshold: float) -> torch.Tensor:
    """[B, F] rewards -> [B] success in {0, 1}: 1 where every success function that scored the
    completion gave >= threshold; NaN (unscorable) where none of them scored it (all returned None)."""
    r_BxS = rewards_per_func[:, list(columns)].float()
    scored_BxS = ~torch.isnan(r_BxS)
    success_B = (~(scored_BxS & (r_BxS < threshold)).any(dim=1)).float()
    success_B[~scored_BxS.any(dim=1)] = torch.nan
    return success_B


def _refuse_unnamed_success(trainer_args: tuple, trainer_kwargs: dict) -> None:
    """Several reward functions and no success choice: refused before GRPOTrainer loads the model
    (the names TRL gives them are checked after, against `reward_func_names`)."""
    funcs = trainer_kwargs.get("reward_funcs", trainer_args[1] if len(trainer_args) > 1 else None)
    config = trainer_kwargs.get("args", trainer_args[2] if len(trainer_args) > 2 else None)
    if isinstance(funcs, list | tuple) and len(funcs) > 1 and getattr(config, "success_reward_funcs", None) is None:
        success_columns(config, [f.split("/")[-1] if isinstance(f, str) else getattr(f, "__name__", type(f).__name__)
                                 for f in funcs])


# --- the TRL release ------------------------------------------------------------------------------

def check_trl(grpo_trainer=None) -> None:
    """Refuse, in one line, a TRL whose GRPOTrainer lacks the private methods the subclass chains
    (`OVERRIDDEN`) or calls them otherwise; warn once where its version is outside the tested range."""
    import trl

    if grpo_trainer is None:
        grpo_trainer = trl.GRPOTrainer
    version = getattr(trl, "__version__", "?")
    for name, want in OVERRIDDEN.items():
        method = getattr(grpo_trainer, name, None)
        try:
            got = tuple(inspect.signature(method).parameters) if callable(method) else None
        except (TypeError, ValueError):
            got = None
        if got != want:
            has = "no such method" if got is None else f"({', '.join(got)})"
            raise CatsimError(f"trl {version}: GRPOTrainer.{name} is {has}, not ({', '.join(want)}), which catsim's "
                              f"TRL plug-in overrides (tested on trl {' and '.join(TESTED_TRL)}); "
                              f"run pip install 'trl{TRL_RANGE}'")
    major_minor = tuple(int(x) for x in version.split(".")[:2] if x.isdigit())
    if len(major_minor) == 2 and not TRL_LOWEST <= major_minor < TRL_BELOW:
        _warn_once(f"catsim: trl {version} is outside the range the TRL plug-in is tested on (trl{TRL_RANGE})")


@functools.cache
def _warn_once(message: str) -> None:
    log.warning("%s", message)


def make_trainer(base=None):
    """A subclass of `base` (default TRL's GRPOTrainer) whose advantages are catsim's rule × (1 − μ̂)^γ.

    It chains TRL's `_calculate_rewards` and `_generate_and_score_completions` through `super()`,
    so it composes with other GRPOTrainer subclasses passed as `base`. The installed TRL's methods
    are checked first (`check_trl`), and `base` must be a GRPOTrainer.
    """
    from trl import GRPOTrainer

    check_trl(GRPOTrainer)
    if base is None:
        base = GRPOTrainer
    if not (isinstance(base, type) and issubclass(base, GRPOTrainer)):
        raise CatsimError(f"make_trainer(base): base must be trl's GRPOTrainer or a subclass of it, got {base!r}")

    class FGRPOTrainer(base):
        """GRPOTrainer with catsim's group-advantage rules and F-GRPO's focal weight (arXiv 2602.06717)."""

        def __init__(self, *args, **kwargs):
            _refuse_unnamed_success(args, kwargs)
            super().__init__(*args, **kwargs)
            self._catsim_success = success_columns(self.args, self.reward_func_names)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._catsim_rewards_per_func = rewards_per_func  # [B_all, F], gathered over processes
            return rewards_per_func

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            rewards_per_func = self.__dict__.pop("_catsim_rewards_per_func", None)
            if rewards_per_func is None:
                raise CatsimError("TRL's GRPOTrainer did not call _calculate_rewards: this TRL release is not supported")
            output["advantages"] = self._catsim_advantages(output["advantages"], rewards_per_func, len(inputs))
            return output

        def _catsim_advantages(self, trl_advantages, rewards_per_func, local_size):
            """[b] local advantages from TRL's [b] and the gathered [B_all, F] rewards."""
            mode = "train" if self.model.training else "eval"
            n = self.num_generations if mode == "train" else self.num_generations_eval
            est = estimator_of(self.args)
            if self._catsim_success is None:  # the one reward function's level in [Rw, Rc] (× its weight)
                rewards = _summed_rewards(rewards_per_func, self.reward_weights)
            else:  # 0/1 success of the named functions
                rewards = success_of(rewards_per_func, *self._catsim_success)
                est = host.Estimator(est.rule, est.gamma,
                                     dataclasses.replace(est.options, reward_correct=1.0, reward_wrong=0.0))
            adv_all, mu_all, g_all = host.group_advantages(
                rewards.cpu().numpy(), host.contiguous_groups(rewards.numel(), n), est)
            start = self.accelerator.process_index * local_size
            local = slice(start, start + local_size)
            if est.rule == TRL_OWN:
                g = torch.as_tensor(g_all[local], device=trl_advantages.device, dtype=trl_advantages.dtype)
                advantages = torch.nan_to_num(trl_advantages * g, nan=0.0)
            else:
                advantages = torch.as_tensor(adv_all[local], device=trl_advantages.device, dtype=trl_advantages.dtype)
            self._catsim_log(mode, advantages, mu_all[::n], g_all[::n])
            return advantages

        def _catsim_log(self, mode, advantages, mu_G, g_G):
            """Its own metrics, and the completions table's advantages replaced by the ones used."""
            used = self.accelerator.gather(advantages.detach())
            scored = ~np.isnan(mu_G)  # a group holding an unscorable completion has no μ̂ (advantage 0)
            if scored.any():
                self._metrics[mode]["catsim/success_rate/mean"].append(float(mu_G[scored].mean()))
                self._metrics[mode]["catsim/focal_weight/mean"].append(float(g_G[scored].mean()))
            self._metrics[mode]["catsim/advantages/abs_mean"].append(used.abs().mean().item())
            logged = self._logs["advantages"]
            if len(logged) >= used.numel():
                for i, a in enumerate(used.tolist(), start=len(logged) - used.numel()):
                    logged[i] = a

    FGRPOTrainer.__module__ = __name__
    return FGRPOTrainer


def _summed_rewards(rewards_per_func: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[B, F] -> [B]: TRL's weighted sum over reward functions; NaN where every function gave None."""
    rewards = torch.nansum(rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0), dim=1)
    rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
    return rewards.float()


@functools.cache
def _default_trainer():
    return make_trainer()


def __getattr__(name):
    """`FGRPOTrainer` is built on first use, so importing this module does not import GRPOTrainer."""
    if name == "FGRPOTrainer":
        return _default_trainer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
