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

Options reach the rules through `options_from` (every plug-in's config) or a typed `Estimator`; a
bad value (a bool, None, "abc", k = 2.7, ddof = 0.5, ε < 0, ±inf) is a one-line CatsimError naming
the option as the user spelt it. Rewards: NaN marks an unscorable sample and gives its group
advantage 0 under every rule and γ; ±inf is refused (a broken reward function); a group of one
sample gets 0 under every rule that compares samples within their group. A rule that reads the
batch's accuracy (A-GRAE, `registry.Rule.reads_batch_mean`) takes it over the scorable groups of
the batch handed here, whatever their sizes, but for groups of one (which it gives 0).

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
from catsim.objectives import _validate as v
from catsim.objectives import registry

__all__ = ["Estimator", "FOCAL_PREFIX", "DEFAULT_GAMMA", "DEFAULT_OPTIONS", "OPTION_NAMES", "estimator_names",
           "resolve", "options_from", "cpu_device", "group_advantages", "contiguous_groups"]

log = logging.getLogger(__name__)

FOCAL_PREFIX = "f-"  # "f-<rule>" = the rule × (1 − μ̂)^γ
DEFAULT_GAMMA = 0.5  # γ of the F-GRPO paper's main runs
DEFAULT_OPTIONS = registry.Options()
_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(registry.Options))
OPTION_NAMES = ("gamma", *_OPTION_FIELDS)  # the keys of `options_from`
# Whole-number options: those whose default in registry.Options is an int (k, ddof).
_INTEGER = frozenset(f.name for f in dataclasses.fields(registry.Options) if type(f.default) is int)
# option -> (test of its value, what the value must be); every value must also be a finite float32
_NEEDS = {
    "gamma": (lambda x: x >= 0, "a finite number >= 0"),
    "k": (lambda x: x >= 1, "an integer >= 1"),
    "eps": (lambda x: x >= 0, "a finite number >= 0"),  # every rule guards its 0/0, so ε = 0 is allowed
    "ddof": (lambda x: x in (0, 1), "0 (population std) or 1 (sample std)"),
    "w_reinforce_lambda": (lambda x: x >= 0, "a finite number >= 0"),
}
_ANY_NUMBER = (lambda x: True, "a finite number")


def _option(option: str, value, label: str, *, parse: bool):
    """`value` as option `option` needs it (int or float), else a CatsimError naming `label` and the value.

    parse=True (config files, command lines): numeric strings and whole floats (k = 4.0) are read as
    numbers; parse=False (a typed `Estimator`): only ints, and floats for the float options. Never a
    bool (YAML's `true` is not 1), None, NaN, ±inf or a number beyond float32.
    """
    test, need = _NEEDS.get(option, _ANY_NUMBER)
    integer = option in _INTEGER
    if integer and need == _ANY_NUMBER[1]:
        need = "an integer"

    def refuse(within: str = ""):
        shown = repr(value)
        return CatsimError(f"{label} must be {need}{within}, got {shown if len(shown) <= 40 else shown[:37] + '...'}")

    x = value
    if parse and isinstance(x, str):
        try:
            x = float(x.strip())
        except ValueError:
            raise refuse() from None
    if isinstance(x, bool) or not isinstance(x, int | float | np.integer | np.floating):
        raise refuse()
    if x != x or abs(x) == math.inf:  # NaN, ±inf (math.isfinite would overflow on a huge int)
        raise refuse()
    if abs(x) > v.FLOAT32_MAX:
        raise refuse(f" within float32 (|x| <= {v.FLOAT32_MAX:.4g})")
    if integer and not (isinstance(x, int | np.integer) or (parse and float(x).is_integer())):
        raise refuse()
    x = int(x) if integer else float(x)
    if not test(x):
        raise refuse()
    return x


def _check_levels(options: registry.Options, label_correct: str, label_wrong: str) -> None:
    if not options.reward_correct > options.reward_wrong:
        raise CatsimError(f"{label_correct} ({options.reward_correct:g}) must exceed {label_wrong} "
                          f"({options.reward_wrong:g})")


@dataclasses.dataclass(frozen=True)
class Estimator:
    """One registry rule with its focal exponent and options (hashable: it keys a compiled program)."""

    rule: str  # a name of `registry.NAMES`
    gamma: float = 0.0  # focal exponent γ ≥ 0; 0 = the rule as published
    options: registry.Options = DEFAULT_OPTIONS  # k, ε, ddof, λ, Rc, Rw

    def __post_init__(self):
        registry.get(self.rule)
        _option("gamma", self.gamma, "gamma", parse=False)
        for name in _OPTION_FIELDS:
            _option(name, getattr(self.options, name), name, parse=False)
        _check_levels(self.options, "reward_correct", "reward_wrong")


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
    if not isinstance(name, str):
        raise CatsimError(f"unknown catsim estimator {name!r}; choose one of {', '.join(estimator_names())}")
    focal = name == "fgrpo" or name.startswith(FOCAL_PREFIX)
    rule = "grpo" if name == "fgrpo" else name.removeprefix(FOCAL_PREFIX)
    if rule not in registry.NAMES:
        raise CatsimError(f"unknown catsim estimator {name!r}; choose one of {', '.join(estimator_names())}")
    if rule == "grpo" and not normalise_std:
        rule = "dr_grpo"
    gamma = _option("gamma", gamma, "gamma", parse=False)
    return Estimator(rule, gamma if focal else 0.0, options)


def options_from(values: Mapping | None, base: registry.Options = DEFAULT_OPTIONS, *,
                 labels: Mapping[str, str] | None = None, where: str = "the catsim options"
                 ) -> tuple[float, registry.Options]:
    """(γ, Options) from a config mapping with keys `OPTION_NAMES` (gamma, k, eps, ddof, ...).

    Args:
      values: the mapping (None: all defaults); numeric strings and whole floats (k = 4.0) are read.
      base: the options the mapping's keys replace.
      labels: how the user spells each option, for the messages ("algorithm.fgrpo.k", "passk_k");
        default: the key itself.
      where: what `values` is, for the message when it is not a mapping ("algorithm.fgrpo").

    Raises a one-line CatsimError naming the option and its value for an unknown key, a value that
    is not a number of the option's kind (a bool, None, "abc", k = 2.7, ddof = 0.5), a non-finite
    value or one outside the option's range (γ, ε, λ >= 0; k >= 1; ddof ∈ {0, 1}; Rc > Rw).
    """
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise CatsimError(f"{where} must be a mapping of catsim options ({', '.join(OPTION_NAMES)}), "
                          f"got {values!r}")
    values = {key: values[key] for key in values}
    unknown = sorted(str(key) for key in values if key not in OPTION_NAMES)
    if unknown:
        raise CatsimError(f"unknown catsim option(s) {', '.join(unknown)} in {where}; choose from "
                          f"{', '.join(OPTION_NAMES)}")
    label = {name: name for name in OPTION_NAMES} | dict(labels or {})
    parsed = {key: _option(key, value, label[key], parse=True) for key, value in values.items()}
    gamma = parsed.pop("gamma", DEFAULT_GAMMA)
    options = dataclasses.replace(base, **parsed)
    _check_levels(options, label["reward_correct"], label["reward_wrong"])
    return gamma, options


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
      rewards_B: [B] scalar rewards, any array-like (a torch tensor of any float dtype, bfloat16
        included, on any device; a binary rule reads reward > (Rc + Rw)/2 as correct; μ̂ is
        `advantages.success_rate` of the rewards with the options' Rc, Rw).
      index_B: [B] hashable group ids (a list, array or tensor, not a string); samples with the
        same id form one group.
      est: the rule, γ and options.
      pin_platform: see `cpu_device`.

    Returns:
      (adv_B, mu_B, g_B) float32 numpy: g·A of each sample's group, and its group's μ̂ and focal
      weight. A group holding a NaN reward (an unscorable sample) gets advantage 0 under every rule
      and γ (its μ̂ and g are NaN); a group of one sample gets 0 under every rule that compares a
      sample with its group (all but the baseline-free w_reinforce, nsr, psr), as TRL's GRPO does.
      A ±inf reward (or one beyond float32) is refused: a CatsimError naming its position, as are
      rewards that are not numbers and group ids that are not a sequence of hashable ids.
    """
    import jax

    raw = _rewards(rewards_B)
    index_B = _group_ids(index_B, raw.size)
    _check_finite(raw, index_B)
    rewards = raw.astype(np.float32)
    if est.gamma > 0:
        _check_reward_range(rewards, est.options)
    members = _members(index_B)
    device = cpu_device(pin_platform)
    rule = registry.get(est.rule)
    batch = np.float32(_batch_mean(rewards, members, rule, est.options))
    adv, mu, g = (np.zeros(rewards.size, np.float32) for _ in range(3))
    for n in sorted({len(m) for m in members}):
        warning = registry.check_k(est.rule, est.options.k, n)
        if warning:
            _warn_once(warning)
        elif not rule.can_move(n, est.options.k):
            _warn_once(f"{est.rule} gives a group of {n} sample(s) advantage 0 (nothing to compare a sample "
                       f"with), so such groups train nothing")
        rows_GxN = np.array([m for m in members if len(m) == n])
        with jax.default_device(device):
            a, m_, g_ = _program(est)(jax.device_put(rewards[rows_GxN], device), batch)
        adv[rows_GxN], mu[rows_GxN], g[rows_GxN] = np.asarray(a), np.asarray(m_)[:, None], np.asarray(g_)[:, None]
    return adv, mu, g


def _rewards(rewards_B) -> np.ndarray:
    """[B] float64 rewards of any array-like. A torch tensor is detached and read as float32 on the
    host first: NumPy has no bfloat16, and a GPU tensor or one that requires grad has no array."""
    if hasattr(rewards_B, "detach") and hasattr(rewards_B, "float"):
        rewards_B = rewards_B.detach().float().cpu().numpy()
    try:
        return np.asarray(rewards_B, np.float64).reshape(-1)
    except (TypeError, ValueError) as err:
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CatsimError(f"rewards must be numbers (NaN for an unscorable sample): {why}") from None


def _group_ids(index_B, size: int) -> list:
    """The [B] group ids as a list of hashable values (a tensor's or array's as Python scalars)."""
    if hasattr(index_B, "detach") and hasattr(index_B, "tolist"):
        index_B = index_B.detach().cpu()
    if isinstance(index_B, str | bytes) or not hasattr(index_B, "__len__"):
        raise CatsimError(f"group ids must be a sequence of {size} ids (one per reward), got "
                          f"{type(index_B).__name__} {str(index_B)[:40]!r}")
    ids = index_B.tolist() if hasattr(index_B, "tolist") else list(index_B)
    if len(ids) != size:
        raise CatsimError(f"{size} rewards but {len(ids)} group ids")
    for i, uid in enumerate(ids):
        try:
            hash(uid)
        except TypeError:
            raise CatsimError(f"group id {str(uid)[:40]} at position {i} is not hashable ({type(uid).__name__}): "
                              "give one str or int id per reward") from None
    return ids


def _check_finite(rewards_B: np.ndarray, index_B: Sequence) -> None:
    """Refuse ±inf (and float32 overflow): a broken reward function, not an unscorable sample (NaN)."""
    bad = np.flatnonzero(~np.isnan(rewards_B) & ~(np.abs(rewards_B) <= v.FLOAT32_MAX))
    if bad.size:
        i = int(bad[0])
        raise CatsimError(f"reward {rewards_B[i]:g} at position {i} of the batch (group {index_B[i]!r}) is not a "
                          f"finite float32: rewards must be finite, or NaN for an unscorable sample "
                          f"(its group then gets advantage 0)")


def _members(index_B: Sequence) -> list[list[int]]:
    """Positions of each group, groups in order of first appearance."""
    ids: dict = {}
    members: list[list[int]] = []
    for i, uid in enumerate(index_B):
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


def _batch_mean(rewards: np.ndarray, members: list[list[int]], rule, o: registry.Options) -> float:
    """B of a batch-level rule (`registry.Rule.reads_batch_mean`): the mean over the batch's scorable
    groups of every size the rule moves (not a group of one) of each group's mean input (0/1 for a
    binary rule), so a group that gets 0 changes no other group's advantage; 0 for the other rules."""
    if not rule.reads_batch_mean:
        return 0.0
    cut = (o.reward_correct + o.reward_wrong) / 2
    groups = (rewards[m] for m in members if rule.can_move(len(m), o.k))
    means = [np.mean(r > cut if rule.binary else r) for r in groups if not np.isnan(r).any()]
    return float(np.mean(means)) if means else 0.0


@functools.cache
def _warn_once(message: str) -> None:
    log.warning("catsim: %s", message)


@functools.lru_cache(maxsize=64)
def _program(est: Estimator):
    """jit(vmap) of one group's (g·A, μ̂, g): [G, N], [] B -> [G, N], [G], [G] (one compilation per N);
    B is read by the batch-level rules only (`_batch_mean`)."""
    import jax
    import jax.numpy as jnp

    from catsim.objectives import advantages, focal

    rule, o = registry.get(est.rule), est.options
    cut = (o.reward_correct + o.reward_wrong) / 2

    def one(rewards_N, batch_mean):
        n = rewards_N.shape[0]  # static: one compilation per group size
        scorable = jnp.all(~jnp.isnan(rewards_N))
        r = jnp.where(scorable, rewards_N, o.reward_wrong)  # keeps NaN out of every rule's arithmetic
        mu = advantages.success_rate(r, reward_correct=o.reward_correct, reward_wrong=o.reward_wrong)
        g = focal.focal_weight(mu, est.gamma)
        if rule.can_move(n, o.k):
            inputs = (r > cut).astype(jnp.float32) if rule.binary else r
            a = g * rule.advantages(inputs, o, batch_mean)
        else:  # e.g. one sample: no std (ddof = 1), no second-best sample, nothing to compare with
            a = jnp.zeros_like(r)
        nan = jnp.float32(jnp.nan)
        return jnp.where(scorable, a, 0.0), jnp.where(scorable, mu, nan), jnp.where(scorable, g, nan)

    return jax.jit(jax.vmap(one, in_axes=(0, None)))
