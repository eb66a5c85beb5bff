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
    batch_mean = REWARDS_B.reshape(-1, N).mean(axis=1).mean()  # B of a batch-level rule (A-GRAE)
    for r in REWARDS_B.reshape(-1, N):
        g = focal.focal_weight(advantages.success_rate(jnp.asarray(r)), est.gamma)
        out.append(np.asarray(g * rule.advantages(jnp.asarray(r), est.options, batch_mean)))
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


# --- Tunix's own names, groups of one, unscorable rewards, bad option values (issue 50) --------

@pytest.mark.parametrize("own", ["grpo", "rloo", "drgrpo"])
def test_tunixs_own_estimators_are_never_replaced(own):
    before = function_registry.get_advantage_estimator(own)
    assert not hasattr(before, "catsim_estimator") and own not in ctunix.NAMES
    with pytest.raises(CatsimError, match=f"'{own}' is Tunix's own, and catsim does not replace it.*catsim-{own}"):
        ctunix.register(own, "fgrpo", gamma=0.0)  # used to overwrite Tunix's grpo
    with pytest.raises(CatsimError, match="Tunix's own"):
        ctunix.register(own)
    assert function_registry.get_advantage_estimator(own) is before
    assert function_registry.get_advantage_estimator("grpo") is algo_core.compute_advantages
    name = ctunix.register(f"catsim-{own}", "grpo", gamma=0.0)  # catsim's grpo under its own name
    got = function_registry.get_advantage_estimator(name)(rewards=REWARDS_B, num_generations=N)
    np.testing.assert_allclose(got, algo_core.compute_advantages(REWARDS_B, N), rtol=1e-5, atol=1e-6)


def test_another_librarys_estimator_is_never_replaced():
    def mine(rewards, num_generations):
        return rewards

    function_registry.register_advantage_estimator("mine-fgrpo")(mine)
    with pytest.raises(CatsimError, match="'mine-fgrpo' is registered by .*catsim does not replace it"):
        ctunix.register("mine-fgrpo", "fgrpo")
    assert function_registry.get_advantage_estimator("mine-fgrpo") is mine


def test_a_group_of_one_gets_zero():
    rewards = np.array([1.0, 0.0, 1.0], np.float32)  # used to abort: the sample std needs N >= 2
    for name in ("fgrpo", "maxrl", "f-passk_best"):
        got = function_registry.get_advantage_estimator(name)(rewards=rewards, num_generations=1)
        np.testing.assert_array_equal(got, 0.0)


def test_a_nan_reward_zeroes_its_group():
    rewards = REWARDS_B.copy()
    rewards[1] = np.nan  # maxrl [1, NaN, 0, 0] at γ = 0 used to give [3, −1, −1, −1]
    got = function_registry.get_advantage_estimator("maxrl")(rewards=rewards, num_generations=N)
    np.testing.assert_array_equal(got[:N], 0.0)
    np.testing.assert_allclose(got[N:], _reference("maxrl")[N:], rtol=1e-6, atol=1e-7)
    rewards[1] = np.inf
    with pytest.raises(CatsimError, match="reward inf at position 1"):
        function_registry.get_advantage_estimator("maxrl")(rewards=rewards, num_generations=N)


@pytest.mark.parametrize("options, shown", [
    ({"k": 2.7}, "k must be an integer >= 1, got 2.7"),  # was read as k = 2
    ({"ddof": 0.5}, "ddof must be 0 (population std) or 1 (sample std), got 0.5"),  # was population std
    ({"gamma": True}, "gamma must be a finite number >= 0, got True"),
    ({"gamma": "abc"}, "gamma must be a finite number >= 0, got 'abc'"),
    ({"eps": -1.0}, "eps must be a finite number >= 0, got -1.0"),
    ({"w_reinforce_lambda": -1.0}, "w_reinforce_lambda must be a finite number >= 0, got -1.0"),
])
def test_bad_option_values_are_refused_at_registration(options, shown):
    with pytest.raises(CatsimError) as e:
        ctunix.register("bad-options", "f-pkpo", **options)
    assert str(e.value).startswith(shown), str(e.value)
    with pytest.raises(LookupError):
        function_registry.get_advantage_estimator("bad-options")
