"""Group advantages for the trainer plug-ins: a registry rule × F-GRPO's focal weight, on the host.

F-GRPO (arXiv 2602.06717, §4) scales every advantage of a group by g = (1 − μ̂)^γ, μ̂ the group's
success rate. The plug-ins (verl, TRL, Tunix) hand this module one flat batch of B scalar rewards
and a group id per reward; it groups them, runs `catsim.objectives.registry` rule × focal weight
on JAX's CPU device and returns numpy arrays, which the plug-in converts back to its framework:

    est = host.resolve("f-maxrl", gamma=0.5, options=registry.Options(k=4))
    adv_B, mu_B, g_B = host.group_advantages(rewards_B, uid_B, est)

Names: every registry name is the rule as published (γ = 0), "f-<name>" is that rule × the focal
weight, and "fgrpo" is "f-grpo". The rules compute here, never in torch: catsim has one
implementation of each.

Shapes: B rewards in a batch, G groups, N rollouts of one group (groups may differ in N).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Mapping, Sequence

import numpy as np

from catsim.errors import CatsimError
from catsim.objectives import registry

__all__ = ["Estimator", "FOCAL_PREFIX", "DEFAULT_GAMMA", "DEFAULT_OPTIONS", "estimator_names", "resolve", "options_from",
           "cpu_device", "group_advantages", "contiguous_groups"]

log = logging.getLogger(__name__)

FOCAL_PREFIX = "f-"  # "f-<rule>" = the rule × (1 − μ̂)^γ
DEFAULT_GAMMA = 0.5  # γ of the F-GRPO paper's main runs
DEFAULT_OPTIONS = registry.Options()
_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(registry.Options))


@dataclasses.dataclass(frozen=True)
class Estimator:
    """One registry rule with its focal exponent and options (hashable: it keys a compiled program)."""

    rule: str  # a name of `registry.NAMES`
    gamma: float = 0.0  # focal exponent γ ≥ 0; 0 = the rule as published
    options: registry.Options = DEFAULT_OPTIONS  # k, ε, ddof, λ, Rc, Rw

    def __post_init__(self):
        registry.get(self.rule)
        if not (isinstance(self.gamma, int | float) and math.isfinite(self.gamma) and self.gamma >= 0):
            raise CatsimError(f"gamma must be a finite number >= 0, got {self.gamma!r}")
        if not (isinstance(self.options.k, int) and self.options.k >= 1):
            raise CatsimError(f"k must be an integer >= 1, got {self.options.k!r}")
        if not self.options.reward_correct > self.options.reward_wrong:
            raise CatsimError(f"reward_correct ({self.options.reward_correct}) must exceed reward_wrong "
                              f"({self.options.reward_wrong})")


def estimator_names() -> tuple[str, ...]:
    """Every name a plug-in registers: the registry's names, "fgrpo" and "f-<name>" for each."""
    return (*registry.NAMES, "fgrpo", *(FOCAL_PREFIX + n for n in registry.NAMES))


def resolve(name: str, gamma: float = DEFAULT_GAMMA, options: registry.Options = DEFAULT_OPTIONS,
            *, normalise_std: bool = True) -> Estimator:
    """The `Estimator` a plug-in name stands for.

    Args:
      name: "fgrpo", "f-<rule>" or a registry rule name.
      gamma: γ of the focal names (plain rule names always use γ = 0).
      options: the rule's options.
      normalise_std: False turns grpo into dr_grpo (verl's `norm_adv_by_std_in_grpo`).
    """
    focal = name == "fgrpo" or name.startswith(FOCAL_PREFIX)
    rule = "grpo" if name == "fgrpo" else name.removeprefix(FOCAL_PREFIX)
    if rule not in registry.NAMES:
        raise CatsimError(f"unknown catsim estimator {name!r}; choose one of {', '.join(estimator_names())}")
    if rule == "grpo" and not normalise_std:
        rule = "dr_grpo"
    return Estimator(rule, float(gamma) if focal else 0.0, options)


def options_from(values: Mapping, base: registry.Options = DEFAULT_OPTIONS) -> tuple[float, registry.Options]:
    """(γ, Options) from a config mapping with keys gamma, k, eps, ddof, w_reinforce_lambda, ..."""
    values = dict(values or {})
    unknown = sorted(set(values) - {"gamma", *_OPTION_FIELDS})
    if unknown:
        raise CatsimError(f"unknown catsim option(s) {', '.join(unknown)}; choose from gamma, "
                          f"{', '.join(_OPTION_FIELDS)}")
    gamma = float(values.pop("gamma", DEFAULT_GAMMA))
    if "k" in values:
        values["k"] = int(values["k"])
    if "ddof" in values:
        values["ddof"] = int(values["ddof"])
    return gamma, dataclasses.replace(base, **values)


def cpu_device(pin_platform: bool = True):
    """JAX's CPU device, without JAX starting (and preallocating) an accelerator backend.

    In a torch trainer's process nothing else uses JAX: with `pin_platform` and no backend started
    yet and no `JAX_PLATFORMS` chosen, JAX is pinned to the CPU platform before its first device
    query (which would otherwise start every backend and let a GPU one take 75% of the memory).
    A JAX-native trainer (Tunix) passes False: its accelerator backend is the user's.
    """
    import jax
    from jax._src import xla_bridge

    started = getattr(xla_bridge, "backends_are_initialized", lambda: True)()
    if pin_platform and not started and not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
        log.info("catsim: JAX pinned to the CPU platform for the advantage rules")
    try:
        return jax.devices("cpu")[0]
    except RuntimeError as e:
        raise CatsimError(f"catsim's rules run on JAX's CPU device: add cpu to JAX_PLATFORMS ({e})") from None


def contiguous_groups(batch_size: int, group_size: int) -> np.ndarray:
    """[B] group ids of a batch laid out as consecutive groups of `group_size` (TRL, Tunix)."""
    if group_size < 1 or batch_size % group_size:
        raise CatsimError(f"a batch of {batch_size} does not split into groups of {group_size}")
    return np.arange(batch_size) // group_size


def group_advantages(rewards_B, index_B: Sequence, est: Estimator, *, pin_platform: bool = True):
    """Advantages of a flat batch, grouped by `index_B` (verl's uid, TRL's prompt blocks).

    Args:
      rewards_B: [B] scalar rewards (a binary rule reads reward > (Rc + Rw)/2 as correct; μ̂ is
        `advantages.success_rate` of the rewards with the options' Rc, Rw).
      index_B: [B] hashable group ids; samples with the same id form one group.
      est: the rule, γ and options.
      pin_platform: see `cpu_device`.

    Returns:
      (adv_B, mu_B, g_B) float32 numpy: g·A of each sample's group, and its group's μ̂ and focal
      weight. A group holding a NaN reward (an unscorable sample) gets advantage 0.
    """
    import jax

    rewards = np.asarray(rewards_B, np.float32).reshape(-1)
    if len(index_B) != rewards.size:
        raise CatsimError(f"{rewards.size} rewards but {len(index_B)} group ids")
    if est.gamma > 0:
        _check_reward_range(rewards, est.options)
    members = _members(index_B)
    device = cpu_device(pin_platform)
    adv, mu, g = (np.zeros(rewards.size, np.float32) for _ in range(3))
    for n in sorted({len(m) for m in members}):
        warning = registry.check_k(est.rule, est.options.k, n)
        if warning:
            _warn_once(warning)
        rows_GxN = np.array([m for m in members if len(m) == n])
        with jax.default_device(device):
            a, m_, g_ = _program(est)(jax.device_put(rewards[rows_GxN], device))
        adv[rows_GxN], mu[rows_GxN], g[rows_GxN] = np.asarray(a), np.asarray(m_)[:, None], np.asarray(g_)[:, None]
    return np.nan_to_num(adv, nan=0.0), mu, g


def _members(index_B: Sequence) -> list[list[int]]:
    """Positions of each group, groups in order of first appearance."""
    ids: dict = {}
    members: list[list[int]] = []
    for i, uid in enumerate(np.asarray(index_B, dtype=object).tolist()):
        j = ids.setdefault(uid, len(ids))
        if j == len(members):
            members.append([])
        members[j].append(i)
    return members


def _check_reward_range(rewards: np.ndarray, o: registry.Options) -> None:
    finite = rewards[np.isfinite(rewards)]
    tol = 1e-5 * (o.reward_correct - o.reward_wrong)
    if finite.size and (finite.min() < o.reward_wrong - tol or finite.max() > o.reward_correct + tol):
        raise CatsimError(f"the focal weight needs rewards in [reward_wrong, reward_correct] = [{o.reward_wrong}, "
                          f"{o.reward_correct}], got {finite.min():g} to {finite.max():g}; set the two levels")


@functools.cache
def _warn_once(message: str) -> None:
    log.warning("catsim: %s", message)


@functools.lru_cache(maxsize=64)
def _program(est: Estimator):
    """jit(vmap) of one group's (g·A, μ̂, g): [G, N] -> [G, N], [G], [G] (one compilation per N)."""
    import jax
    import jax.numpy as jnp

    from catsim.objectives import advantages, focal

    rule, o = registry.get(est.rule), est.options
    cut = (o.reward_correct + o.reward_wrong) / 2

    def one(rewards_N):
        mu = advantages.success_rate(rewards_N, reward_correct=o.reward_correct, reward_wrong=o.reward_wrong)
        inputs = (rewards_N > cut).astype(jnp.float32) if rule.binary else rewards_N
        g = focal.focal_weight(mu, est.gamma)
        return g * rule.advantages(inputs, o), mu, g

    return jax.jit(jax.vmap(one))
