"""catsim.objectives.focal: focal weight, γ schedules, the App. N low-LR multiplier."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from catsim.errors import CatsimError
from catsim.objectives import advantages as adv
from catsim.objectives import focal


def test_focal_weight_hand_values():
    assert float(focal.focal_weight(0.25, 2.0)) == pytest.approx(0.5625)  # 0.75²
    assert float(focal.focal_weight(0.5, 1.0)) == 0.5
    assert float(focal.focal_weight(0.0, 3.0)) == 1.0
    # μ̂ = 1: γ = 0 keeps GRPO (0^0 = 1), γ > 0 gives 0; never NaN.
    assert float(focal.focal_weight(1.0, 0.0)) == 1.0
    assert float(focal.focal_weight(1.0, 0.5)) == 0.0
    # graded-reward rounding just above 1 is clipped rather than producing NaN
    assert float(focal.focal_weight(1.0000001, 0.5)) == 0.0
    with pytest.raises(CatsimError, match="gamma"):
        focal.focal_weight(0.5, -1.0)


def test_apply_focal_scales_grpo_advantages():
    rewards = jnp.array([1.0, 0.0, 0.0, 0.0])  # μ̂ = 1/4, g(γ=1) = 3/4
    a = adv.grpo(rewards, eps=0.0)
    out = focal.apply_focal(a, adv.success_rate(rewards), 1.0)
    np.testing.assert_allclose(out, 0.75 * np.asarray(a), rtol=1e-7)


def test_gamma_schedules_hand_values():
    assert float(focal.constant_gamma(123, 0.5)) == 0.5
    # linear warm-up 0 → 1 over 10 steps
    assert float(focal.warmup_gamma(5, 1.0, 10)) == 0.5
    assert float(focal.warmup_gamma(0, 1.0, 10, gamma_start=0.2)) == pytest.approx(0.2)
    assert float(focal.warmup_gamma(15, 1.0, 10)) == 1.0
    assert float(focal.warmup_gamma(0, 1.0, 0)) == 1.0  # no warm-up
    # GRPO then F-GRPO at step 10
    assert float(focal.switch_gamma(9, 0.5, 10)) == 0.0
    assert float(focal.switch_gamma(10, 0.5, 10)) == 0.5
    # curriculum ramp between success 0.3 and 0.7: 0.5 is half way
    assert float(focal.success_ramp_gamma(0.5, 1.0, 0.3, 0.7)) == pytest.approx(0.5)
    assert float(focal.success_ramp_gamma(0.1, 1.0, 0.3, 0.7)) == 0.0
    assert float(focal.success_ramp_gamma(0.9, 1.0, 0.3, 0.7)) == 1.0


def test_gamma_schedule_dataclass_and_jit():
    sched = focal.GammaSchedule(kind="warmup", gamma=1.0, warmup_steps=4)
    steps = jnp.arange(6)
    np.testing.assert_allclose(jax.jit(jax.vmap(sched))(steps), [0, 0.25, 0.5, 0.75, 1, 1])
    sw = focal.GammaSchedule(kind="switch", gamma=2.0, switch_step=3)
    np.testing.assert_allclose(jax.vmap(sw)(steps), [0, 0, 0, 2, 2, 2])
    cur = focal.GammaSchedule(kind="curriculum", gamma=1.0, success_low=0.2, success_high=0.6)
    assert float(jax.jit(cur)(0, 0.5)) == pytest.approx(0.75)
    assert focal.GammaSchedule(kind="constant", gamma=0.5).max_gamma == 0.5
    with pytest.raises(CatsimError, match="success rate"):
        cur(0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kind="cosine"), "unknown gamma schedule"),
        (dict(gamma=-0.5), "gamma"),
        (dict(kind="warmup", warmup_steps=-1), "warmup_steps"),
        (dict(kind="switch", switch_step=1.5), "switch_step"),
        (dict(kind="curriculum", success_low=0.7, success_high=0.3), "success_low < success_high"),
        (dict(success_high=1.5), "success_high"),
    ],
)
def test_gamma_schedule_rejects_bad_config(kwargs, match):
    with pytest.raises(CatsimError, match=match):
        focal.GammaSchedule(**kwargs)


def test_low_lr_multiplier_closed_forms():
    assert focal.low_lr_multiplier(0.0) == pytest.approx(1.0, rel=1e-14)
    # γ = 1/2: B(3/2, 2)/B(3/2, 3/2) = (4/15)/(π/8) = 32/(15π) ≈ 0.679
    assert focal.low_lr_multiplier(0.5) == pytest.approx(32 / (15 * math.pi), rel=1e-13)
    assert round(focal.low_lr_multiplier(0.5), 3) == 0.679
    # γ = 1: Γ(3/2)Γ(5/2)/Γ(4) / (π/8) = (3π/8)/6·8/π = 1/2
    assert focal.low_lr_multiplier(1.0) == pytest.approx(0.5, rel=1e-13)
    # (4/√π)·Γ(γ+3/2)/Γ(γ+3) at γ = 2
    g = 2.0
    gamma_form = 4 / math.sqrt(math.pi) * math.exp(math.lgamma(g + 1.5) - math.lgamma(g + 3))
    assert focal.low_lr_multiplier(g) == pytest.approx(gamma_form, rel=1e-12)
    with pytest.raises(CatsimError):
        focal.low_lr_multiplier(-0.1)


@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0])
def test_low_lr_multiplier_matches_quadrature_and_monte_carlo(gamma):
    def weighted(mu):
        return (1 - mu) ** gamma * math.sqrt(mu * (1 - mu))

    num, _ = integrate.quad(weighted, 0.0, 1.0, epsabs=1e-13)
    den, _ = integrate.quad(lambda mu: math.sqrt(mu * (1 - mu)), 0.0, 1.0, epsabs=1e-13)
    assert focal.low_lr_multiplier(gamma) == pytest.approx(num / den, rel=1e-8)

    # Monte Carlo over μ ~ U(0,1), using the library's own mean|A| and focal weight.
    mu = np.random.default_rng(0).uniform(size=400_000)
    scale = np.asarray(focal.mean_abs_grpo_advantage(mu), dtype=np.float64)
    g = np.asarray(focal.focal_weight(mu, gamma), dtype=np.float64)
    ratio = np.mean(g * scale) / np.mean(scale)
    # relative MC error ~ std/(mean·sqrt(n)) < 2e-3 for these integrands; 5e-3 is > 3 sigma
    assert ratio == pytest.approx(focal.low_lr_multiplier(gamma), rel=5e-3)


@pytest.mark.parametrize("n, x", [(8, 3), (4, 1), (16, 12)])
def test_mean_abs_grpo_advantage_equals_group_mean(n, x):
    # One binary group with X correct: the mean |A_GRPO| over its rollouts is 2·sqrt(μ̂(1−μ̂)).
    rewards = jnp.array([1.0] * x + [0.0] * (n - x))
    group_mean = float(jnp.mean(jnp.abs(adv.grpo(rewards, eps=0.0))))
    mu = x / n
    assert group_mean == pytest.approx(2 * math.sqrt(mu * (1 - mu)), rel=1e-6)
    assert float(focal.mean_abs_grpo_advantage(mu)) == pytest.approx(group_mean, rel=1e-6)


def test_curriculum_function_rejects_empty_ramp():
    with pytest.raises(CatsimError, match="success_low < success_high"):
        focal.success_ramp_gamma(0.5, 1.0, 0.5, 0.5)


def test_focal_group_advantages_compose_success_rate_and_advantages():
    # ±1 rewards, 1 of 4 correct: μ̂ = 1/4, g(γ=2) = 9/16; mean-centred A = (1.5, −.5, −.5, −.5)
    r = jnp.array([1.0, -1.0, -1.0, -1.0])
    out = focal.focal_group_advantages(
        r, 2.0, kind="mean_centred", reward_correct=1.0, reward_wrong=-1.0
    )
    np.testing.assert_allclose(out, 9 / 16 * np.array([1.5, -0.5, -0.5, -0.5]), rtol=1e-6)
    # GRPO: A = (sqrt 3, −1/sqrt 3, …) with ε = 0
    out = focal.focal_group_advantages(r, 1.0, reward_correct=1.0, reward_wrong=-1.0, eps=0.0)
    np.testing.assert_allclose(out, 0.75 * np.array([3**0.5] + [-(3**-0.5)] * 3), rtol=1e-6)
    with pytest.raises(CatsimError, match="unknown advantage"):
        focal.focal_group_advantages(r, 1.0, kind="ppo")


def test_epoch_increment_schedule_is_the_articles_dynamic_gamma_rule():
    # The article's loop, run literally: once per epoch, `if epoch > warmup: γ = min(1.0, γ + 0.1)`.
    steps_per_epoch, warmup, start = 5, 2, 0.3
    expected, gamma = [], start
    for epoch in range(12):
        if epoch > warmup:
            gamma = min(1.0, gamma + 0.1)
        expected += [gamma] * steps_per_epoch
    sched = focal.GammaSchedule(kind="epoch_increment", gamma=1.0, gamma_start=start,
                                steps_per_epoch=steps_per_epoch, warmup_epochs=warmup)
    got = jax.jit(jax.vmap(sched))(jnp.arange(len(expected)))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)  # float32 sums of 0.1
    assert sched.max_gamma == 1.0


def test_step_ramp_schedule_is_the_articles_get_gamma():
    def get_gamma(current_step):  # the article's §5.2 function, verbatim
        base = 0.5
        if current_step > 1000:
            return min(1.5, base + (current_step - 1000) / 2000)
        return base

    sched = focal.GammaSchedule(kind="step_ramp", gamma=1.5, gamma_start=0.5, ramp_start=1000,
                                ramp_steps=2000)
    steps = np.array([0, 999, 1000, 1001, 1500, 2999, 3000, 3001, 10_000])
    np.testing.assert_allclose(jax.vmap(sched)(jnp.asarray(steps)), [get_gamma(s) for s in steps],
                               rtol=1e-6)
    assert sched.max_gamma == 1.5


def test_curriculum_is_the_old_name_of_the_success_ramp():
    assert focal.GammaSchedule(kind="curriculum", gamma=1.0).kind == "success_ramp"
    assert "curriculum" not in focal.GAMMA_SCHEDULES


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="epoch_increment", steps_per_epoch=0), "steps_per_epoch"),
    (dict(kind="epoch_increment", increment=-0.1), "increment"),
    (dict(kind="step_ramp", ramp_steps=0), "ramp_steps"),
    (dict(kind="step_ramp", ramp_start=-1), "ramp_start"),
])
def test_article_schedules_reject_bad_config(kwargs, match):
    with pytest.raises(CatsimError, match=match):
        focal.GammaSchedule(**kwargs)


def test_focal_group_advantages_sample_std_option():
    r = jnp.array([1.0, 0.0, 0.0, 0.0])  # μ = 1/4; population std √(3)/4, sample std 1/2
    pop = focal.focal_group_advantages(r, 0.0, eps=0.0)
    sample = focal.focal_group_advantages(r, 0.0, eps=0.0, ddof=1)
    np.testing.assert_allclose(pop, [0.75 / (3 ** 0.5 / 4)] + [-0.25 / (3 ** 0.5 / 4)] * 3, rtol=1e-6)
    np.testing.assert_allclose(sample, [1.5, -0.5, -0.5, -0.5], rtol=1e-6)
