"""catsim.objectives.advantages: hand-computed groups, counts vs explicit rewards, jit parity."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catsim.errors import CatsimError
from catsim.objectives import advantages as adv


def test_success_rate_binary_graded_and_negative_wrong_reward():
    # 2 correct of 4 with rewards 1/0: μ̂ = 2/4.
    assert float(adv.success_rate(jnp.array([1.0, 0.0, 0.0, 1.0]))) == 0.5
    # ±1 rewards, 1 correct of 4: R̄ = (1 − 3)/4 = −0.5, μ̂ = (−0.5 + 1)/(1 + 1) = 0.25 = X/N.
    r = jnp.array([1.0, -1.0, -1.0, -1.0])
    assert float(adv.success_rate(r, reward_correct=1.0, reward_wrong=-1.0)) == 0.25
    # graded rewards in [0, 1]: R̄ = (0.5 + 1 + 0)/3 = 0.5.
    assert float(adv.success_rate(jnp.array([0.5, 1.0, 0.0]))) == pytest.approx(0.5)
    # graded in [−0.5, 2]: R̄ = 0.75 → (0.75 + 0.5)/2.5 = 0.5.
    r = jnp.array([2.0, -0.5])
    assert float(adv.success_rate(r, reward_correct=2.0, reward_wrong=-0.5)) == pytest.approx(0.5)


@pytest.mark.parametrize("rc, rw", [(0.0, 0.0), (0.0, 1.0), (float("nan"), 0.0)])
def test_success_rate_rejects_bad_reward_levels(rc, rw):
    with pytest.raises(CatsimError):
        adv.success_rate(jnp.array([1.0, 0.0]), reward_correct=rc, reward_wrong=rw)


def test_rank_is_checked():
    with pytest.raises(CatsimError, match="rank 1"):
        adv.grpo(jnp.ones((2, 3)))
    with pytest.raises(CatsimError, match="rank 1"):
        adv.success_rate(jnp.float32(1.0))


def test_is_active():
    assert bool(adv.is_active(jnp.array([1.0, 0.0, 0.0])))
    assert not bool(adv.is_active(jnp.array([1.0, 1.0, 1.0])))
    assert not bool(adv.is_active(jnp.array([0.0])))
    assert bool(adv.is_active(jnp.array([0.2, 0.3])))


def test_mean_centred_and_dr_grpo():
    r = jnp.array([1.0, -1.0, -1.0, -1.0])  # mean −0.5
    np.testing.assert_allclose(adv.mean_centred(r), [1.5, -0.5, -0.5, -0.5])
    np.testing.assert_allclose(adv.dr_grpo(r), [1.5, -0.5, -0.5, -0.5])


def test_grpo_hand_computed():
    # [1,1,0,0]: mean 0.5, population std 0.5 → ±1.
    np.testing.assert_allclose(adv.grpo(jnp.array([1.0, 1.0, 0.0, 0.0]), eps=0.0), [1, 1, -1, -1])
    # sample std: sqrt(4·0.25/3) = 0.57735 → 0.5/0.57735 = 0.8660254.
    np.testing.assert_allclose(
        adv.grpo(jnp.array([1.0, 1.0, 0.0, 0.0]), eps=0.0, ddof=1),
        [0.8660254, 0.8660254, -0.8660254, -0.8660254],
        rtol=1e-6,
    )
    # [1,0,0,0]: μ = 1/4, std = sqrt(3/16) = 0.4330127; A_c = 0.75/0.4330127 = sqrt(3),
    # A_w = −0.25/0.4330127 = −1/sqrt(3).
    np.testing.assert_allclose(
        adv.grpo(jnp.array([1.0, 0.0, 0.0, 0.0]), eps=0.0),
        [3**0.5, -(3**-0.5), -(3**-0.5), -(3**-0.5)],
        rtol=1e-6,
    )
    # ε = 0.5 on the ±1 case: 0.5/(0.5 + 0.5) = 0.5.
    np.testing.assert_allclose(adv.grpo(jnp.array([1.0, 0.0]), eps=0.5), [0.5, -0.5])


@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_grpo_inactive_group_is_zero_not_nan(eps):
    out = adv.grpo(jnp.full((5,), 0.7), eps=eps)
    np.testing.assert_array_equal(out, np.zeros(5))


def test_grpo_rejects_bad_arguments():
    with pytest.raises(CatsimError, match="eps"):
        adv.grpo(jnp.array([1.0, 0.0]), eps=-1.0)
    with pytest.raises(CatsimError, match="ddof"):
        adv.grpo(jnp.array([1.0, 0.0]), ddof=2)
    with pytest.raises(CatsimError, match="at least 2"):
        adv.grpo(jnp.array([1.0]), ddof=1)


@pytest.mark.parametrize("normalise_std", [False, True])
@pytest.mark.parametrize("n, x", [(1, 0), (1, 1), (4, 1), (4, 3), (8, 5), (6, 6)])
def test_binary_group_advantages_match_explicit_rewards(normalise_std, n, x):
    rc, rw = 1.0, -1.0
    rewards = jnp.array([rc] * x + [rw] * (n - x))
    explicit = adv.grpo(rewards, eps=0.0) if normalise_std else adv.mean_centred(rewards)
    a_c, a_w = adv.binary_group_advantages(
        x, n, reward_correct=rc, reward_wrong=rw, normalise_std=normalise_std
    )
    expected = np.array([float(a_c)] * x + [float(a_w)] * (n - x))
    np.testing.assert_allclose(explicit, expected, rtol=1e-6, atol=1e-7)


def test_binary_group_advantages_hand_values_and_errors():
    # mean-centred ±1 rewards, X=1 of 4: A_c = 2·(3/4) = 1.5, A_w = −2·(1/4) = −0.5.
    a_c, a_w = adv.binary_group_advantages(1, 4, reward_correct=1.0, reward_wrong=-1.0)
    assert (float(a_c), float(a_w)) == (1.5, -0.5)
    with pytest.raises(CatsimError, match="num_correct"):
        adv.binary_group_advantages(5, 4)
    with pytest.raises(CatsimError, match="group_size"):
        adv.binary_group_advantages(0, 0)
    # traced counts are accepted (the simulator computes X inside jit)
    f = jax.jit(lambda x: adv.binary_group_advantages(x, 4, normalise_std=True))
    a_c, a_w = f(jnp.int32(1))
    np.testing.assert_allclose([a_c, a_w], [3**0.5, -(3**-0.5)], rtol=1e-6)


def test_batch_renormalise():
    a = jnp.array([[1.0, -1.0], [3.0, -3.0]])
    # batch std = sqrt((1 + 1 + 9 + 9)/4) = sqrt(5)
    np.testing.assert_allclose(adv.batch_renormalise(a, eps=0.0), a / 5**0.5, rtol=1e-6)
    # the second group masked out: std over [1, −1] is 1, masked entries come back 0
    mask = jnp.array([[1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(adv.batch_renormalise(a, mask, eps=0.0), [[1, -1], [0, 0]])
    # centre: [1,2,3,4] − 2.5 = [−1.5, −.5, .5, 1.5], std sqrt(1.25)
    b = jnp.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(
        adv.batch_renormalise(b, eps=0.0, centre=True),
        np.array([-1.5, -0.5, 0.5, 1.5]) / 1.25**0.5,
        rtol=1e-6,
    )
    np.testing.assert_array_equal(adv.batch_renormalise(jnp.zeros((2, 3)), eps=0.0), 0.0)
    with pytest.raises(CatsimError, match="shapes must match"):
        adv.batch_renormalise(a, jnp.ones(3))


def test_jit_and_vmap_agree_with_eager():
    rewards = jnp.array([[1.0, 0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 1.0], [1.0] * 5])
    for fn in (adv.grpo, adv.mean_centred, adv.success_rate, adv.is_active):
        eager = np.stack([np.asarray(fn(r)) for r in rewards])
        np.testing.assert_array_equal(jax.jit(jax.vmap(fn))(rewards), eager)


def test_success_rate_rejects_rewards_outside_the_levels():
    with pytest.raises(CatsimError, match="must lie in"):
        adv.success_rate(jnp.array([1.0, -1.0]))  # Rw = 0 by default
    with pytest.raises(CatsimError, match="finite"):
        adv.success_rate(jnp.array([1.0, float("nan")]))
    # inside jit the values cannot be inspected; in-range values work there
    assert float(jax.jit(adv.success_rate)(jnp.array([1.0, 0.0]))) == 0.5


# ----------------------------------------------------------------------------- all-equal groups
# A common reward that is not exact in binary (0.1, 0.37, 0.7, DAPO's overlong shaping) used to
# leave R − mean(R) at ~1e-8 and the std as tiny: grpo(eps=0) gave ±1 to every rollout, the
# trainer's float32 default (ε = 1e-6, sample std) up to ±0.106 (0.7 × 16 rollouts).
_CONSTANT_VALUES = st.one_of(st.sampled_from([0.1, 0.37, 0.7, 1 / 3, -0.3]),
                             st.floats(-2.0, 2.0, allow_nan=False, width=32))


@functools.cache
def _constant_group_programs(eps, ddof):
    """One jitted vmapped program per (ε, ddof): rows of a [K, N] batch are the groups."""
    return jax.jit(lambda r: (jax.vmap(functools.partial(adv.grpo, eps=eps, ddof=ddof))(r),
                              jax.vmap(adv.mean_centred)(r)))


@settings(max_examples=20)
@given(values=st.lists(_CONSTANT_VALUES, min_size=8, max_size=8), n=st.sampled_from([3, 7, 16]),
       dtype=st.sampled_from(["float32", "float64"]), eps=st.sampled_from([0.0, 1e-6]),
       ddof=st.sampled_from([0, 1]))
def test_constant_group_gets_exact_zero_advantage(values, n, dtype, eps, ddof):
    with jax.enable_x64(dtype == "float64"):
        rewards = jnp.broadcast_to(jnp.asarray(values, dtype)[:, None], (8, n))
        for out in _constant_group_programs(eps, ddof)(rewards):
            assert out.dtype == rewards.dtype
            np.testing.assert_array_equal(np.asarray(out), np.zeros((8, n)))
    # eager, unbatched (the public call as users write it)
    np.testing.assert_array_equal(adv.grpo(jnp.full((n,), values[0], jnp.float32), eps=eps, ddof=ddof), 0.0)


def test_constant_group_values_that_used_to_fail_and_a_barely_active_group():
    # the three cases the defect report measured, float32
    for value, n in ((0.1, 3), (0.37, 16), (0.7, 16)):
        r = jnp.full((n,), value, jnp.float32)
        np.testing.assert_array_equal(adv.grpo(r, eps=0.0), 0.0)
        np.testing.assert_array_equal(adv.grpo(r, eps=1e-6, ddof=1), 0.0)
    # one ulp of difference IS a (tiny) spread: the group is active and GRPO normalises it to ±1
    r = jnp.array([0.7, 0.7, float(np.nextafter(np.float32(0.7), np.float32(1)))], jnp.float32)
    assert bool(adv.is_active(r))
    assert float(jnp.max(jnp.abs(adv.grpo(r, eps=0.0)))) > 0.5


@pytest.mark.parametrize("normalise_std", [False, True])
@pytest.mark.parametrize("eps", [0.0, 1e-6])
def test_binary_counts_of_an_inactive_group_are_both_zero(normalise_std, eps):
    for x, n in ((0, 5), (5, 5), (0, 1), (1, 1)):
        a_c, a_w = adv.binary_group_advantages(x, n, reward_correct=0.7, reward_wrong=0.1,
                                               normalise_std=normalise_std, eps=eps)
        assert (float(a_c), float(a_w)) == (0.0, 0.0)
