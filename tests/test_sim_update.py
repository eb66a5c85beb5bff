"""One update step of every rule equals a hand-computed update on a 6-action softmax policy.

The expected values are written from the formulas (paper eq. 5 / App. J, REINFORCE, PPO/DAPO
clipping, CISPO, entropy and KL gradients, SGD and the first Adam step) in NumPy float64, not
from catsim.objectives.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.objectives.focal import GammaSchedule
from catsim.sim import config as C
from catsim.sim import engine

Z = np.array([0.7, -0.2, 0.1, 0.4, -0.5, 0.0])  # logits of 6 actions
Z0 = np.array([0.2, 0.0, -0.3, 0.5, 0.1, -0.1])  # reference policy for the KL term
CORRECT = np.array([True, True, True, False, False, False])
DRAWS = [0, 0, 2, 3]  # a group of N = 4 draws: three correct, one wrong
COUNTS = np.bincount(DRAWS, minlength=6).astype(float)


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def rewards(rc=1.0, rw=-1.0):
    return np.array([rc if CORRECT[o] else rw for o in DRAWS])


def centred(r):
    return r - r.mean()


def grad_linear(z, adv):
    """∇_z of the loss −(1/N)Σ_j A_j p_{o_j}: −(1/N)Σ_j A_j p_{o_j}(e_{o_j} − p)."""
    p = softmax(z)
    g = np.zeros(6)
    for a, o in zip(adv, DRAWS):
        g -= a * p[o] * (np.eye(6)[o] - p)
    return g / len(DRAWS)


def grad_reinforce(z, adv, weights=None):
    """∇_z of −(1/N)Σ_j w_j A_j log p_{o_j}: −(1/N)Σ_j w_j A_j (e_{o_j} − p)."""
    p = softmax(z)
    weights = np.ones(len(DRAWS)) if weights is None else weights
    g = np.zeros(6)
    for w, a, o in zip(weights, adv, DRAWS):
        g -= w * a * (np.eye(6)[o] - p)
    return g / len(DRAWS)


def step(update, gamma=0.0, lr=None):
    lr = update.learning_rate if lr is None else lr
    tx = engine.make_optimizer(update, lr)
    consts = engine.Constants(jnp.asarray(Z0, jnp.float32), jnp.asarray(CORRECT))
    z = jnp.asarray(Z, jnp.float32)
    z_new, _, (mu_hat, g, active) = engine.apply_update(
        update, tx, consts, z, jax.nn.log_softmax(z), tx.init(z),
        jnp.asarray(COUNTS, jnp.float32), jnp.float32(gamma))
    return np.asarray(z_new, np.float64), float(mu_hat), float(g), bool(active)


def adam_first_step(grad, lr, eps=1e-8):
    return -lr * grad / (np.abs(grad) + eps)


TOL = dict(rtol=2e-5, atol=2e-6)


def test_linear_sgd_is_paper_eq5():
    upd = C.UpdateConfig(surrogate="linear", optimizer="sgd", learning_rate=0.5)
    z_new, mu_hat, g, active = step(upd)
    adv = centred(rewards())
    np.testing.assert_allclose(z_new, Z - 0.5 * grad_linear(Z, adv), **TOL)
    # eq. 5 on the distinct-action form: Δz_i = (η/N)·Σ_j r̃_j p_{o_j}(δ_{i o_j} − p_i)
    p = softmax(Z)
    s = sum(a * p[o] for a, o in zip(adv, DRAWS))
    per_action = np.array([sum(a for a, o in zip(adv, DRAWS) if o == i) for i in range(6)])
    np.testing.assert_allclose(z_new - Z, 0.5 / 4 * (per_action * p - s * p), **TOL)
    assert (mu_hat, g, active) == (0.75, 1.0, True)


def test_reinforce_sgd_and_adam_and_adamw():
    adv = centred(rewards())
    upd = C.UpdateConfig(surrogate="reinforce", optimizer="sgd", learning_rate=0.3)
    np.testing.assert_allclose(step(upd)[0], Z - 0.3 * grad_reinforce(Z, adv), **TOL)
    upd = C.UpdateConfig(surrogate="reinforce", optimizer="adam", learning_rate=0.01)
    g = grad_reinforce(Z, adv)
    np.testing.assert_allclose(step(upd)[0], Z + adam_first_step(g, 0.01), **TOL)
    upd = C.UpdateConfig(surrogate="linear", optimizer="adamw", learning_rate=0.01, weight_decay=0.1)
    g = grad_linear(Z, adv)
    np.testing.assert_allclose(step(upd)[0], Z + adam_first_step(g, 0.01) - 0.01 * 0.1 * Z, **TOL)


def test_grpo_std_advantage_and_focal_weight():
    r = rewards()
    adv = centred(r) / (r.std() + 1e-3)
    upd = C.UpdateConfig(surrogate="reinforce", optimizer="sgd", learning_rate=0.2,
                         advantage="grpo", adv_eps=1e-3)
    z_new, mu_hat, g, _ = step(upd, gamma=1.5)
    focal = (1 - 0.75) ** 1.5
    assert g == pytest.approx(focal)
    np.testing.assert_allclose(z_new, Z - 0.2 * grad_reinforce(Z, focal * adv), **TOL)


def test_other_reward_levels():
    adv = centred(rewards(2.0, 0.5))
    upd = C.UpdateConfig(surrogate="linear", optimizer="sgd", learning_rate=1.0,
                         reward_correct=2.0, reward_wrong=0.5)
    np.testing.assert_allclose(step(upd)[0], Z - grad_linear(Z, adv), **TOL)


@pytest.mark.parametrize("rule,low,high", [("grpo", 0.2, 0.2), ("dapo", 0.2, 0.28)])
def test_ppo_clip_second_epoch(rule, low, high):
    lr = 2.0  # large enough that epoch 2 sees ratios outside the clip range
    adv = centred(rewards())
    z1 = Z - lr * grad_reinforce(Z, adv)  # epoch 1: ratio = 1, the REINFORCE gradient
    rho = np.array([softmax(z1)[o] / softmax(Z)[o] for o in DRAWS])
    clipped = ((adv > 0) & (rho > 1 + high)) | ((adv < 0) & (rho < 1 - low))
    assert clipped.any() and not clipped.all()  # the case is non-trivial
    z2 = z1 - lr * grad_reinforce(z1, adv, weights=np.where(clipped, 0.0, rho))
    upd = C.UpdateConfig(surrogate=rule, optimizer="sgd", learning_rate=lr, ppo_epochs=2)
    np.testing.assert_allclose(step(upd)[0], z2, rtol=1e-4, atol=1e-5)


def test_cispo_clipped_weight_second_epoch():
    lr = 3.0
    adv = centred(rewards())
    z1 = Z - lr * grad_reinforce(Z, adv)
    rho = np.array([softmax(z1)[o] / softmax(Z)[o] for o in DRAWS])
    weight = np.clip(rho, 0.0, 1.5)
    assert (rho > 1.5).any()
    z2 = z1 - lr * grad_reinforce(z1, adv, weights=weight)
    upd = C.UpdateConfig(surrogate="cispo", optimizer="sgd", learning_rate=lr, ppo_epochs=2,
                         clip_high=0.5)
    np.testing.assert_allclose(step(upd)[0], z2, rtol=1e-4, atol=1e-5)


def test_entropy_bonus_and_kl_penalty():
    adv = centred(rewards())
    p, q = softmax(Z), softmax(Z0)
    h = -(p * np.log(p)).sum()
    dh = -p * (np.log(p) + h)
    kl = (p * (np.log(p) - np.log(q))).sum()
    dkl = p * (np.log(p) - np.log(q) - kl)
    upd = C.UpdateConfig(surrogate="reinforce", optimizer="sgd", learning_rate=0.4,
                         entropy_coef=0.3, kl_coef=0.7)
    expected = Z - 0.4 * (grad_reinforce(Z, adv) - 0.3 * dh + 0.7 * dkl)
    np.testing.assert_allclose(step(upd)[0], expected, **TOL)


def test_low_lr_control_multiplier():
    """App. N: lr × m_G of the control's own G, whatever the focal γ of the run."""
    from catsim.sim.sweep import learning_rate_for

    cfg = C.SimConfig(update=C.UpdateConfig(learning_rate=1e-6, low_lr_gamma=0.5))
    assert learning_rate_for(cfg) == pytest.approx(6.79e-7, rel=2e-3)  # App. N: 6.8e-7
    cfg = dataclasses.replace(cfg, update=dataclasses.replace(cfg.update, low_lr_gamma=0.0))
    assert learning_rate_for(cfg) == 1e-6
    with pytest.raises(CatsimError, match="low_lr_gamma"):
        C.UpdateConfig(low_lr_gamma=-0.5)


def test_low_lr_control_is_grpo_at_the_reduced_rate():
    """`low_lr_gamma = 0.5` at γ = 0 gives the same numbers as γ = 0 at lr = η·m_0.5, and differs
    from F-GRPO (γ = 0.5) at that rate: the control changes the rate only, not the focal weight."""
    from catsim.objectives.focal import low_lr_multiplier
    from catsim.sim.sweep import simulate

    base = C.SimConfig(policy=C.PolicyConfig(num_actions=60, num_correct=12), group_size=8, steps=8,
                       update=C.UpdateConfig(learning_rate=0.05))
    control = dataclasses.replace(base, update=dataclasses.replace(base.update, low_lr_gamma=0.5))
    slow = dataclasses.replace(base, update=dataclasses.replace(
        base.update, learning_rate=0.05 * low_lr_multiplier(0.5)))
    a = simulate(control, gammas=[0.0], seeds=2)
    b = simulate(slow, gammas=[0.0], seeds=2)
    focal = simulate(slow, gammas=[0.5], seeds=2)
    for name in a.data:
        np.testing.assert_array_equal(a.data[name], b.data[name])
    assert not np.array_equal(a.data["qpos"], focal.data["qpos"])


def test_gamma_schedule_switch_in_a_run():
    """GRPO-then-F-GRPO: the focal weight is 1 before the switch step and (1 − μ̂)^γ after."""
    pol = C.PolicyConfig(num_actions=40, num_correct=10)
    upd = C.UpdateConfig(gamma=GammaSchedule(kind="switch", switch_step=3))
    cfg = C.SimConfig(policy=pol, update=upd, group_size=8, steps=6)
    run = jax.jit(engine.make_run(cfg))
    traj = run(engine.make_constants(cfg), jax.random.key(0), 2.0, 1e-2)
    focal = np.asarray(traj.metrics["focal"])[1:]
    mu = np.asarray(traj.metrics["mu_hat"])[1:]
    np.testing.assert_allclose(focal[:3], 1.0)
    np.testing.assert_allclose(focal[3:], (1 - mu[3:]) ** 2, rtol=1e-6)
