"""The simulator's MaxRL / pass@k / unlikeliness / NSR updates: the lean step against autodiff and
against the objectives' per-sample functions, a short run per method, bad flags."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.objectives import advantages as adv
from catsim.objectives import losses, registry, rewards
from catsim.sim import config as C
from catsim.sim import engine, lean, sampler

V, NC = 300, 40


def _setup(actions):
    rng = np.random.default_rng(1)
    z = jnp.asarray(rng.normal(size=V), jnp.float32)
    correct = jnp.arange(V) < NC
    actions = jnp.asarray(actions, jnp.int32)
    return z, correct, actions, jnp.ones(actions.shape[0], jnp.float32)


# 12 draws: 1 correct (action 3) or 3 correct (3, 3, 7) among wrong actions (repeats included)
ONE = [3, 50, 50, 61, 70, 80, 90, 100, 110, 120, 130, 140]
THREE = [3, 3, 7, 61, 70, 80, 90, 100, 110, 120, 130, 140]


RULE_CHANGES = [dict(advantage=name, passk_k=3) for name in registry.NAMES if name != "grpo"] + [
    dict(advantage="grpo", positive_weight=0.1), dict(advantage="w_reinforce", w_reinforce_lambda=0.3)]


@pytest.mark.parametrize("change", RULE_CHANGES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
@pytest.mark.parametrize("draws", [ONE, THREE])
def test_lean_step_equals_autodiff_and_the_per_sample_rule(change, draws):
    """Every registry rule: the lean step = autodiff of the loss = the registry's per-sample rule."""
    update = C.UpdateConfig(surrogate="reinforce", optimizer="sgd", learning_rate=1.0, **change)
    z, correct, actions, weights = _setup(draws)
    tx = engine.make_optimizer(update, 1.0)
    gamma = jnp.float32(0.5)
    counts = sampler.scatter_add(jnp.zeros(V), actions, weights)
    z_ref, _, _ = engine.apply_update(update, tx, engine.Constants(z, correct), z,
                                      jax.nn.log_softmax(z), tx.init(z), counts, gamma)
    z_lean, _, _ = lean.lean_update(update, tx, correct, z, jax.nn.softmax(z), tx.init(z),
                                    actions, weights, gamma)
    np.testing.assert_allclose(np.asarray(z_lean - z), np.asarray(z_ref - z), rtol=1e-4, atol=1e-6)
    # the same step from the registry's per-sample rule on the 0/1 rewards (on ±1 for the others)
    rule = registry.get(update.advantage)
    r01 = np.asarray(correct[actions], np.float32)
    a = rule.advantages(jnp.asarray(r01 if rule.binary else 2 * r01 - 1), lean.rule_options(update))
    a = a * losses.positive_sample_weight(a, update.positive_weight)
    mu = r01.mean()
    a = a * (1 - mu) ** 0.5  # the focal weight at γ = 0.5

    def loss(zz):
        return losses.token_mean(losses.reinforce_loss(jax.nn.log_softmax(zz)[actions], a))

    step = -jax.grad(loss)(z)
    np.testing.assert_allclose(np.asarray(z_lean - z), np.asarray(step), rtol=1e-4, atol=1e-6)


def test_unlikeliness_step_matches_the_objectives_reward():
    update = C.UpdateConfig(surrogate="reinforce", optimizer="sgd", learning_rate=1.0,
                            advantage="grpo", unlikeliness_beta=0.25)
    z, correct, actions, weights = _setup([3, 3, 7, 9, 61, 70, 80, 90])
    tx = engine.make_optimizer(update, 1.0)
    z_lean, _, _ = lean.lean_update(update, tx, correct, z, jax.nn.softmax(z), tx.init(z),
                                    actions, weights, jnp.float32(0.0))
    logp = jax.nn.log_softmax(z)[actions]
    shaped = rewards.unlikeliness(jnp.asarray(correct[actions], jnp.float32), logp, beta=0.25)
    a = adv.grpo(-1.0 + 2.0 * shaped, eps=0.0)

    def loss(zz):
        return losses.token_mean(losses.reinforce_loss(jax.nn.log_softmax(zz)[actions], a))

    np.testing.assert_allclose(np.asarray(z_lean - z), np.asarray(-jax.grad(loss)(z)), rtol=1e-4, atol=1e-6)


def test_short_runs_of_every_method_retain_finite_mass():
    base = C.SimConfig(policy=C.PolicyConfig(num_actions=400, num_correct=40), group_size=8,
                       steps=8, log_every=4)
    labels = set()
    for change in (dict(advantage="pkpo"), dict(unlikeliness_beta=0.25, advantage="grpo")):
        cfg = dataclasses.replace(base, update=dataclasses.replace(base.update, **change))
        labels.add(cfg.method_label)
        run = jax.jit(engine.make_run(cfg))
        traj = run(engine.make_constants(cfg), jax.random.key(0), jnp.float32(1.0), jnp.float32(1e-2))
        m = np.asarray(traj.metrics["mret"])
        assert np.all(np.isfinite(m)) and np.all((m >= 0) & (m <= 1.0 + 1e-6))
    assert len(labels) == 2  # each method gets its own label


@pytest.mark.parametrize("change, message", [
    (dict(passk_k=0), "passk_k"), (dict(unlikeliness_beta=1.5), "unlikeliness_beta"),
    (dict(positive_weight=-1.0), "positive_weight"),
    (dict(unlikeliness_beta=0.25, advantage="maxrl"), "mean_centred or grpo"),
    (dict(unlikeliness_beta=0.25, entropy_coef=1e-3), "one PPO epoch"),
    (dict(advantage="nope"), "unknown advantage"), (dict(w_reinforce_lambda=-0.1), "w_reinforce_lambda"),
])
def test_bad_settings(change, message):
    with pytest.raises(CatsimError, match=message):
        C.UpdateConfig(**change)


def test_cli_bad_flag_is_one_line(capsys):
    assert main(["simulate", "--group-size", "4", "--steps", "2", "--passk-k", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "passk_k" in err and "\n" not in err


@pytest.mark.parametrize("rule", ["passk_training", "pkpo", "pkpo_mean"])
def test_k_above_n_is_refused_and_k_equal_n_warned(rule, capsys):
    """A pass@k rule with k > N gives every group zero advantage: refused in one line (exit 2)."""
    assert main(["simulate", "--group-size", "4", "--steps", "2", "--advantage", rule, "--passk-k", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert "exceeds the group size N = 4" in err and "\n" not in err
    from catsim.sim.sweep import simulate

    with pytest.raises(CatsimError, match="exceeds"):  # a config is a template: its run checks k
        simulate(C.SimConfig(update=C.UpdateConfig(advantage=rule, passk_k=5), group_size=4, steps=1))
    assert main(["simulate", "--group-size", "4", "--steps", "2", "--advantage", rule, "--passk-k", "4"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning: passk_k = N = 4" in err[0]
    assert ("trains nothing" in err[0]) == (rule != "pkpo")
