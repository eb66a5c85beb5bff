"""catsim's rules in Tunix's advantage-estimator registry: the names resolve through Tunix's own
`function_registry` and return catsim's values on a batch; at γ = 0 "fgrpo" is Tunix's "grpo".

Skips where google-tunix is absent (`pip install -e ".[tunix]"`; tested with google-tunix 0.1.7
in its own venv beside jax 0.10.2).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.integrations import host
from catsim.objectives import advantages, focal, registry

pytest.importorskip("tunix", reason="google-tunix is not installed (pip install -e '.[tunix]')")
from tunix.rl import algo_core, function_registry  # noqa: E402
from tunix.rl.grpo import grpo_learner  # noqa: E402

from catsim.integrations import tunix as ctunix  # noqa: E402

N = 4
REWARDS_B = np.array([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1], np.float32)


def _reference(name):
    est = host.resolve(name, host.DEFAULT_GAMMA, ctunix.TUNIX_OPTIONS)
    rule, out = registry.get(est.rule), []
    for r in REWARDS_B.reshape(-1, N):
        g = focal.focal_weight(advantages.success_rate(jnp.asarray(r)), est.gamma)
        out.append(np.asarray(g * rule.advantages(jnp.asarray(r), est.options)))
    return np.concatenate(out)


@pytest.mark.parametrize("name", ctunix.NAMES)
def test_tunix_resolves_each_name_to_catsims_values(name):
    fn = function_registry.get_advantage_estimator(name)
    np.testing.assert_allclose(fn(rewards=REWARDS_B, num_generations=N), _reference(name), rtol=1e-6, atol=1e-7)


def test_tunix_keeps_its_grpo_and_fgrpo_at_gamma_zero_equals_it():
    assert "grpo" not in ctunix.NAMES and {"fgrpo", "maxrl", "pkpo", "f-maxrl"} <= set(ctunix.NAMES)
    assert function_registry.get_advantage_estimator("grpo") is algo_core.compute_advantages
    ctunix.register("fgrpo-0", "fgrpo", gamma=0.0)
    got = function_registry.get_advantage_estimator("fgrpo-0")(rewards=REWARDS_B, num_generations=N)
    np.testing.assert_allclose(got, algo_core.compute_advantages(REWARDS_B, N), rtol=1e-5, atol=1e-6)
    weighted = function_registry.get_advantage_estimator("fgrpo")(rewards=REWARDS_B, num_generations=N)
    mu = REWARDS_B.reshape(-1, N).mean(1).repeat(N)
    np.testing.assert_allclose(weighted, got * (1 - mu) ** host.DEFAULT_GAMMA, rtol=1e-5, atol=1e-6)


def test_custom_options_registration_is_idempotent_and_checked():
    fn = function_registry.get_advantage_estimator(ctunix.register("pkpo-k2", "pkpo", k=2))
    assert ctunix.register("pkpo-k2", "pkpo", k=2) == "pkpo-k2"
    assert function_registry.get_advantage_estimator("pkpo-k2") is fn  # not re-registered
    assert ctunix.register_all() == ctunix.NAMES
    with pytest.raises(CatsimError, match="unknown catsim option"):
        ctunix.register("bad", "pkpo", kk=2)
    with pytest.raises(CatsimError, match="exceeds the group size"):
        fn(rewards=REWARDS_B, num_generations=1)


def test_tunix_grpo_config_accepts_the_name():
    config = grpo_learner.GRPOConfig(advantage_estimator="fgrpo", num_generations=N)
    assert function_registry.get_advantage_estimator(config.advantage_estimator).catsim_estimator.rule == "grpo"
