"""The lean update (closed-form gradient from the group's draws) against autodiff of the loss."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.sim import config as C
from catsim.sim import engine, lean, metrics, sampler

SMALL = C.SimConfig(policy=C.PolicyConfig(num_actions=300, num_correct=40), group_size=16,
                    steps=12, log_every=4)
LEAN_SURROGATES = ("reinforce", "linear", "grpo", "dapo", "cispo")


def _draws(v, n, seed):
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, v, size=n).astype(np.int32)
    actions[:3] = [0, 0, 5]  # repeats: counts above 1
    return jnp.asarray(actions), jnp.ones(n, jnp.float32)


@pytest.mark.parametrize("surrogate", LEAN_SURROGATES)
@pytest.mark.parametrize("advantage", ("grpo", "mean_centred"))
def test_lean_gradient_equals_autodiff(surrogate, advantage):
    """One SGD step at lr 1 moves z by −∇L: the lean update's step equals the autodiff one."""
    update = C.UpdateConfig(surrogate=surrogate, optimizer="sgd", learning_rate=1.0,
                            advantage=advantage)
    assert lean.has_closed_form_gradient(update)
    v, n = 300, 24
    rng = np.random.default_rng(1)
    z = jnp.asarray(rng.normal(size=v), jnp.float32)
    correct = jnp.arange(v) < 40
    consts = engine.Constants(z, correct)
    actions, weights = _draws(v, n, 2)
    counts = sampler.scatter_add(jnp.zeros(v), actions, weights)
    tx = engine.make_optimizer(update, 1.0)
    gamma = jnp.float32(0.5)
    z_ref, _, group_ref = engine.apply_update(update, tx, consts, z, jax.nn.log_softmax(z),
                                              tx.init(z), counts, gamma)
    z_lean, _, group = lean.lean_update(update, tx, correct, z, jax.nn.softmax(z), tx.init(z),
                                        actions, weights, gamma)
    step_ref, step_lean = np.asarray(z_ref - z), np.asarray(z_lean - z)
    assert np.abs(step_ref).max() > 1e-4  # the step is not trivially zero
    # z ~ N(0, 1): z' − z is resolved to a float32 ulp of z (≤ 1e-6 for |z| < 8)
    np.testing.assert_allclose(step_lean, step_ref, rtol=1e-4, atol=1e-6)
    for a, b in zip(group, group_ref):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-6)


def test_lean_gradient_counts_only_the_weighted_draws():
    """Draws with weight 0 (a shared program's surplus draws) leave the update unchanged."""
    update = C.UpdateConfig(surrogate="reinforce", optimizer="sgd", learning_rate=1.0)
    v = 300
    z = jnp.asarray(np.random.default_rng(3).normal(size=v), jnp.float32)
    correct = jnp.arange(v) < 40
    actions, weights = _draws(v, 24, 4)
    tx = engine.make_optimizer(update, 1.0)
    padded_actions = jnp.concatenate([actions, jnp.arange(10, dtype=jnp.int32)])
    padded_weights = jnp.concatenate([weights, jnp.zeros(10)])
    a = lean.lean_update(update, tx, correct, z, jax.nn.softmax(z), tx.init(z), actions, weights,
                         jnp.float32(0.0))[0]
    b = lean.lean_update(update, tx, correct, z, jax.nn.softmax(z), tx.init(z), padded_actions,
                         padded_weights, jnp.float32(0.0))[0]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("surrogate,optimizer", [("reinforce", "adam"), ("linear", "sgd"),
                                                 ("grpo", "adamw")])
def test_lean_runs_match_autodiff_runs(monkeypatch, surrogate, optimizer):
    """Whole runs (sampling, updates, records) agree between the two paths to float32 rounding:
    a draw could only differ where a uniform falls within rounding of a CDF boundary."""
    lr = 0.05 if optimizer == "sgd" else 1e-2
    cfg = dataclasses.replace(SMALL, update=C.UpdateConfig(surrogate=surrogate, optimizer=optimizer,
                                                           learning_rate=lr))
    assert lean.uses_lean_step(cfg.update)
    keys, gammas, lrs = engine.run_keys([0, 1]), jnp.array([0.0, 1.0]), jnp.full(2, lr)
    consts = engine.make_constants(cfg)
    out = {}
    for flag in (True, False):
        monkeypatch.setattr(lean, "LEAN_STEP", flag)
        out[flag] = engine.make_batched_run(cfg)(consts, keys, gammas, lrs)
    for name in metrics.ALL_METRICS:
        np.testing.assert_allclose(np.asarray(out[True].metrics[name]),
                                   np.asarray(out[False].metrics[name]), rtol=2e-5, atol=2e-6,
                                   err_msg=name)
    np.testing.assert_allclose(np.asarray(out[True].final_logits),
                               np.asarray(out[False].final_logits), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("change", [dict(ppo_epochs=2), dict(entropy_coef=1e-3),
                                    dict(kl_coef=0.1), dict(asym_channels=True),
                                    dict(asym_recompose=True)])
def test_updates_without_a_closed_form_take_the_autodiff_path(change):
    update = C.UpdateConfig(**change)
    assert not lean.has_closed_form_gradient(update)
    assert not lean.uses_lean_step(update)
