"""catsim's group-advantage rules as Tunix advantage estimators (google-tunix >= 0.1.7; tested on 0.1.7).

Importing this module registers with Tunix's `tunix/rl/function_registry.py`
(`register_advantage_estimator`) "fgrpo" (F-GRPO, arXiv 2602.06717: GRPO × (1 − μ̂)^γ per group),
every rule of `catsim.objectives.registry` under its own name (Tunix's own "grpo" stays Tunix's)
and each rule's F-variant "f-<rule>", so that

    import catsim.integrations.tunix  # noqa: F401
    algo_config = GRPOConfig(advantage_estimator="fgrpo", num_generations=8, ...)

works in `GRPOLearner` / `AgenticGRPOLearner`, which call the estimator as
`fn(rewards=[B] rewards, num_generations=N)` on consecutive groups of N (`tunix/rl/grpo/grpo_learner.py`).
Tunix's signature carries no options, so the names above use the defaults (γ = 0.5, k = 4, Tunix's
ε = 1e-6 and sample std); `register("my-fgrpo", "fgrpo", gamma=1.0, k=2)` adds a name with others.

The rules run on JAX's CPU device on the host (the rewards are host numpy arrays there); unlike the
torch plug-ins this one never pins JAX's platform, since the accelerator backend is Tunix's own.
"""

from __future__ import annotations

import logging

import jax
import numpy as np
from tunix.rl import function_registry

from catsim.integrations import host
from catsim.objectives import registry

__all__ = ["TUNIX_OPTIONS", "make_estimator", "register", "register_all", "NAMES"]

log = logging.getLogger(__name__)

TUNIX_OPTIONS = registry.Options(eps=1e-6, ddof=1)  # Tunix's grpo: (r − r̄)/(std(ddof=1) + 1e-6)
TUNIX_OWN = ("grpo",)  # names Tunix registers itself ("drgrpo" and "rloo" do not clash)


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
    """Register `estimator` (default: `name`) under `name` with γ and registry.Options fields; idempotent."""
    fn = make_estimator(estimator or name, gamma, host.options_from(options, TUNIX_OPTIONS)[1])
    registered = _registered(name)
    if getattr(registered, "catsim_estimator", None) != fn.catsim_estimator:
        function_registry.register_advantage_estimator(name)(fn)
    return name


def register_all() -> tuple[str, ...]:
    """Every catsim estimator under its own name, with the defaults; Tunix's own names stay Tunix's."""
    return tuple(register(name) for name in host.estimator_names() if name not in TUNIX_OWN)


def _registered(name: str):
    try:
        return function_registry.get_advantage_estimator(name)
    except LookupError:
        return None


NAMES = register_all()
