"""catsim's group-advantage rules as Tunix advantage estimators (google-tunix >= 0.1.7; tested on 0.1.7).

Importing this module registers with Tunix's `tunix/rl/function_registry.py`
(`register_advantage_estimator`) "fgrpo" (F-GRPO, arXiv 2602.06717: GRPO × (1 − μ̂)^γ per group),
every rule of `catsim.objectives.registry` under its own name and each rule's F-variant "f-<rule>",
so that

    import catsim.integrations.tunix  # noqa: F401
    algo_config = GRPOConfig(advantage_estimator="fgrpo", num_generations=8, ...)

works in `GRPOLearner` / `AgenticGRPOLearner`, which call the estimator as
`fn(rewards=[B] rewards, num_generations=N)` on consecutive groups of N (`tunix/rl/grpo/grpo_learner.py`).
Tunix's signature carries no options, so the names above use the defaults (γ = 0.5, k = 4, Tunix's
ε = 1e-6 and sample std); `register("my-fgrpo", "fgrpo", gamma=1.0, k=2)` adds a name with others.
catsim never replaces an estimator it did not register: Tunix's own "grpo", "rloo" and "drgrpo"
stay Tunix's (`register("grpo", ...)` is refused; catsim's grpo rule goes under another name,
`register("catsim-grpo", "grpo")`).

The rules run on JAX's CPU device on the host (the rewards are host numpy arrays there); unlike the
torch plug-ins this one never pins JAX's platform, since the accelerator backend is Tunix's own.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
from tunix.rl import algo_core as _algo_core  # noqa: F401 - registers Tunix's own names first
from tunix.rl import function_registry

from catsim.errors import CatsimError
from catsim.integrations import host
from catsim.objectives import registry

__all__ = ["TUNIX_OPTIONS", "make_estimator", "register", "register_all", "NAMES"]

log = logging.getLogger(__name__)

TUNIX_OPTIONS = registry.Options(eps=1e-6, ddof=1)  # Tunix's grpo: (r − r̄)/(std(ddof=1) + 1e-6)
TUNIX_OWN = ("grpo", "rloo", "drgrpo")  # Tunix 0.1.7's own estimators (tunix/rl/algo_core.py)


def make_estimator(estimator: str, gamma: float = host.DEFAULT_GAMMA, options: registry.Options = TUNIX_OPTIONS):
    """Tunix's estimator signature for a catsim estimator name (see `host.resolve`)."""
    est = host.resolve(estimator, gamma, options)

    def advantage_estimator(rewards, num_generations: int) -> np.ndarray:
        """[B] rewards in consecutive groups of `num_generations` -> [B] float32 advantages."""
        rewards_B = np.asarray(jax.device_get(rewards), np.float32).reshape(-1)
        groups = host.contiguous_groups(rewards_B.size, num_generations)
        adv_B, _, _ = host.group_advantages(rewards_B, groups, est, pin_platform=False)
        return adv_B

    advantage_estimator.__name__ = f"catsim_{estimator.replace('-', '_')}"
    advantage_estimator.catsim_estimator = est
    return advantage_estimator


def register(name: str, estimator: str | None = None, *, gamma: float = host.DEFAULT_GAMMA, **options) -> str:
    """Register `estimator` (default: `name`) under `name` with γ and registry.Options fields; idempotent.

    catsim never replaces an estimator it did not register: a name Tunix owns ("grpo", "rloo",
    "drgrpo") or another library registered is a CatsimError; register under another name
    (`register("catsim-grpo", "grpo")`). A catsim name may be registered again with other options.
    """
    whose = _not_catsims(name)
    if whose:
        raise CatsimError(f"advantage estimator {name!r} is {whose}, and catsim does not replace it: register "
                          f"the catsim rule under another name, e.g. register('catsim-{name}', "
                          f"{estimator or name!r})")
    gamma, opts = host.options_from({"gamma": gamma, **options}, TUNIX_OPTIONS, where="register()'s options")
    fn = make_estimator(estimator or name, gamma, opts)
    if getattr(_registered(name), "catsim_estimator", None) != fn.catsim_estimator:
        function_registry.register_advantage_estimator(name)(fn)
    return name


def register_all() -> tuple[str, ...]:
    """Every catsim estimator under its own name, with the defaults; a name Tunix (or another library)
    already owns stays its owner's."""
    return tuple(register(name) for name in host.estimator_names() if not _not_catsims(name))


def _not_catsims(name: str) -> str | None:
    """Whose estimator `name` is when catsim did not register it ("Tunix's own", ...), else None."""
    if name in TUNIX_OWN:
        return "Tunix's own"
    owner = _registered(name)
    if owner is None or hasattr(owner, "catsim_estimator"):
        return None
    return f"registered by {getattr(owner, '__module__', None) or 'another library'}"


def _registered(name: str):
    try:
        return function_registry.get_advantage_estimator(name)
    except LookupError:
        return None


NAMES = register_all()
