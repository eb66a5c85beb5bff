"""catsim's group-advantage rules as verl advantage estimators (verl >= 0.6, < 0.10; tested on 0.9.1).

Importing this module registers, with verl's `verl.trainer.ppo.core_algos.register_adv_est`:
"fgrpo" (F-GRPO, arXiv 2602.06717: GRPO × (1 − μ̂)^γ per group), every rule of
`catsim.objectives.registry` under its own name ("maxrl", "passk_training", "pkpo", ...; verl's own
"grpo" stays verl's) and each rule's F-variant "f-<rule>" ("f-maxrl", ...). verl's driver calls them
from `verl/trainer/ppo/ray_trainer.py::compute_advantage` as
`fn(token_level_rewards=, response_mask=, config=config.algorithm, index=uid)` and they group by
`index` like verl's `core_algos.compute_grpo_outcome_advantage`.

    python -m verl.trainer.main_ppo algorithm.adv_estimator=fgrpo \
        +algorithm.fgrpo.gamma=0.5 [+algorithm.fgrpo.k=4 ...]

Options come from `config.algorithm.fgrpo` (keys of `host.options_from`: gamma, k, eps, ddof,
w_reinforce_lambda, reward_correct, reward_wrong; defaults γ = 0.5, verl's ε = 1e-6 and sample
std) and `algorithm.norm_adv_by_std_in_grpo` (False: fgrpo becomes F-Dr.GRPO, as verl's grpo). A bad
value is a one-line CatsimError naming `algorithm.fgrpo.<key>` and the value.

verl's Ray TaskRunner imports this module through verl's own loaders: the `verl.plugins` entry
point that catsim's pyproject declares (`verl/__init__.py`, verl >= 0.9) or
`VERL_USE_EXTERNAL_MODULES=catsim.integrations.verl` (verl 0.6–0.8, and later).

Caveats: μ̂ is read from the summed token-level rewards, so run with
`algorithm.use_kl_in_reward=False` (refused otherwise for the focal and 0/1 rules); binary rules
read reward > (Rc + Rw)/2 as correct; in multi-turn sessions each sample must be one whole
trajectory with its score on its tokens (verl's agent loop does this), one uid per prompt. verl's
grpo gives a group of one sample its reward as advantage; catsim's rules give it 0 (all but the
baseline-free w_reinforce, nsr, psr). A NaN score zeroes its group; ±inf is refused.

verl 0.9's default trainer (`trainer.use_v1`; `compute_advantage_for_multi_trajectories` in
`verl/trainer/ppo/v1/utils.py`) keeps only each session's final output for its own "grpo" when an
agent loop returns several outputs per session, but hands every output to any other estimator:
catsim's then count outputs, not sessions, in a group (docs/integrations.md).
"""

from __future__ import annotations

import logging

import torch
from verl.trainer.ppo import core_algos

from catsim.errors import CatsimError
from catsim.integrations import host
from catsim.objectives import registry

__all__ = ["CONFIG_KEY", "VERL_OPTIONS", "estimator_options", "make_estimator", "register", "NAMES"]

log = logging.getLogger(__name__)

CONFIG_KEY = "fgrpo"  # the options block: `+algorithm.fgrpo.gamma=0.5`
VERL_OPTIONS = registry.Options(eps=1e-6, ddof=1)  # verl's grpo: (r − r̄)/(torch.std + 1e-6)


def estimator_options(config) -> tuple[float, registry.Options, bool]:
    """(γ, Options, normalise_std) from verl's algorithm config (DictConfig, AlgoConfig, dict or None)."""
    if config is None:
        return host.DEFAULT_GAMMA, VERL_OPTIONS, True
    where = f"algorithm.{CONFIG_KEY}"
    gamma, options = host.options_from(config.get(CONFIG_KEY, None), VERL_OPTIONS, where=where,
                                       labels={name: f"{where}.{name}" for name in host.OPTION_NAMES})
    return gamma, options, bool(config.get("norm_adv_by_std_in_grpo", True))


def make_estimator(name: str):
    """verl's estimator signature for the catsim estimator `name` (see `host.resolve`)."""
    host.resolve(name)  # unknown names fail here, at registration

    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None,
                  **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T] rewards and mask, [B] uids -> ([B, T], [B, T]) advantages = returns (outcome reward)."""
        if index is None:
            raise CatsimError(f"verl estimator {name!r} groups by uid: the batch has no non_tensor_batch['uid']")
        gamma, options, normalise_std = estimator_options(config)
        est = host.resolve(name, gamma, options, normalise_std=normalise_std)
        if config is not None and config.get("use_kl_in_reward", False) and (est.gamma > 0 or registry.get(est.rule).binary):
            raise CatsimError(f"{name} reads μ̂ from token_level_rewards: set algorithm.use_kl_in_reward=False")
        scores_B = token_level_rewards.detach().sum(dim=-1).float().cpu().numpy()
        adv_B, _, _ = host.group_advantages(scores_B, index, est)
        adv = torch.as_tensor(adv_B, device=token_level_rewards.device).to(token_level_rewards.dtype)
        adv = adv.unsqueeze(-1) * response_mask
        return adv, adv

    estimator.__name__ = estimator.__qualname__ = f"catsim_{name.replace('-', '_')}"
    estimator.catsim_estimator = name
    return estimator


def register() -> tuple[str, ...]:
    """Register every catsim estimator with verl; idempotent. Returns the names now catsim's.

    A name verl already owns ("grpo") is left to verl; registering twice (a reload, the entry point
    plus the environment variable) keeps the first catsim function.
    """
    table = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", {})
    names = []
    for name in host.estimator_names():
        owner = table.get(name)
        if owner is not None:
            if getattr(owner, "catsim_estimator", None) == name:
                names.append(name)
            continue
        core_algos.register_adv_est(name)(make_estimator(name))
        names.append(name)
    log.debug("catsim: registered verl advantage estimators %s", ", ".join(names))
    return tuple(names)


NAMES = register()
