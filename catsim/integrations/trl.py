"""F-GRPO and catsim's rare-solution rules inside TRL's GRPOTrainer (trl >= 1.16; tested on 1.16.0).

Change one import line and the config class:

    from catsim.integrations.trl import FGRPOConfig, FGRPOTrainer   # was: from trl import ...
    args = FGRPOConfig(output_dir="out", focal_gamma=0.5)              # F-GRPO (arXiv 2602.06717)
    trainer = FGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

`advantage_rule="grpo"` (the default) keeps TRL's own advantages (its `scale_rewards` and
`multi_objective_aggregation`) and multiplies each group's by F-GRPO's focal weight (1 − μ̂)^γ;
any other name of `catsim.objectives.registry` ("maxrl", "passk_training", "pkpo", ...) replaces
them with that rule × the focal weight (γ = 0: the rule as published). μ̂ and the rules read the
reward TRL sums over its reward functions (weighted), in [reward_wrong, reward_correct].

How it hooks in (TRL 1.16.0 `trl/trainer/grpo_trainer.py`, which has no `_transform_advantages`
hook): `_calculate_rewards` returns the rewards gathered from every process, which the subclass
keeps; `_generate_and_score_completions` runs TRL's body through `super()`, then the subclass
computes the per-group weights (or advantages) on JAX's CPU from the gathered rewards
(`catsim.integrations.host`), slices this process's share exactly as TRL slices its advantages
(`process_index * len(inputs)`), replaces `advantages`, fixes the logged advantages and logs
`catsim/*` metrics. These are private methods, hence the exact `trl==1.16.0` pin of `.[trl]`.

A group holding an unscorable completion (every reward function returned None) gets advantage 0,
under every rule and γ (TRL's own GRPO zeroes only that completion and leaves it out of its
group's mean, so with one, γ = 0 differs from a plain GRPOTrainer in that group). A group of one
(`num_generations_eval=1`) gets 0, as in TRL. Every catsim field is checked when the config is
built (a one-line CatsimError naming the field), and pass@k's k against `num_generations` and
`num_generations_eval`, before a model is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import numpy as np
import torch
from trl import GRPOConfig

from catsim.errors import CatsimError
from catsim.integrations import host
from catsim.objectives import registry

__all__ = ["FGRPOConfig", "make_trainer", "FGRPOTrainer", "estimator_of"]  # noqa: F822 - FGRPOTrainer is built lazily (__getattr__)

log = logging.getLogger(__name__)

TRL_OWN = "grpo"  # this rule keeps TRL's advantages and only scales them


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

    def __post_init__(self):
        super().__post_init__()
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
    in no rule here."""
    fields = {"advantage_rule", "focal_gamma", "reward_correct", "reward_wrong"}
    if rule != TRL_OWN and registry.get(rule).needs_k:
        fields.add("passk_k")
    if rule != TRL_OWN and registry.get(rule).reads_eps:  # MaxRL's p̂ + ε, passk_best's std + ε
        fields.add("advantage_eps")
    if rule == "w_reinforce":
        fields.add("w_reinforce_lambda")
    return fields


def ignored_fields(args) -> list[str]:
    """The catsim fields of `args` set away from their defaults that its rule never reads (they
    were accepted and silently did nothing: `advantage_ddof=0` under every rule)."""
    defaults = {f.name: f.default for f in dataclasses.fields(FGRPOConfig) if f.name in _OWN_FIELDS}
    reads = read_fields(_field(args, defaults, "advantage_rule"))
    return [f"{name} = {_field(args, defaults, name)!r}" for name in _OWN_FIELDS
            if name not in reads and _field(args, defaults, name) != defaults[name]]


def _field(args, defaults, name):
    return getattr(args, name, defaults[name])


def make_trainer(base=None):
    """A subclass of `base` (default TRL's GRPOTrainer) whose advantages are catsim's rule × (1 − μ̂)^γ.

    It chains TRL's `_calculate_rewards` and `_generate_and_score_completions` through `super()`,
    so it composes with other GRPOTrainer subclasses passed as `base`.
    """
    if base is None:
        from trl import GRPOTrainer as base

    class FGRPOTrainer(base):
        """GRPOTrainer with catsim's group-advantage rules and F-GRPO's focal weight (arXiv 2602.06717)."""

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
            rewards = _summed_rewards(rewards_per_func, self.reward_weights)
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
