"""Inverse-success advantage calibration (arXiv 2601.15609): hand-computed groups, edge groups, and
the per-sample form equal to the counts form the simulator uses."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.objectives import calibration as cal
from catsim.objectives import registry

S7, S3 = math.sqrt(7.0), math.sqrt(3.0)


def _group(c, g=8):
    return jnp.asarray([1.0] * c + [0.0] * (g - c))


# G = 8, population std, ε = 0. GRPO: p = c/8, σ = sqrt(p(1 − p)), A_c = (1 − p)/σ, A_w = −p/σ.
#   c = 1: σ = √7/8, A_c = √7, A_w = −1/√7; calibrated A_c = (8 − 1)·√7 = 7√7
#   c = 2: σ = √3/4, A_c = √3, A_w = −1/√3; calibrated A_c = (8 − 2)·√3 = 6√3
#   c = 7: σ = √7/8, A_c = 1/√7, A_w = −√7;  calibrated A_c = (8 − 7)/√7 = 1/√7 (GRPO's)
HAND = {1: (7 * S7, -1 / S7), 2: (6 * S3, -1 / S3), 7: (1 / S7, -S7)}


@pytest.mark.parametrize("c", sorted(HAND))
def test_hand_computed_groups_of_eight(c):
    a_c, a_w = HAND[c]
    got = np.asarray(cal.inverse_success(_group(c), eps=0.0))
    np.testing.assert_allclose(got, [a_c] * c + [a_w] * (8 - c), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(cal.inverse_success_counts(c, 8, eps=0.0)), [a_c, a_w], rtol=1e-6)


def test_only_positive_advantages_are_scaled_and_order_does_not_matter():
    r = jnp.asarray([0.0, 1.0, 0.0, 0.0, 1.0, 0.0])  # c = 2 of G = 6: positives × 4
    grpo = np.asarray(registry.get("grpo").advantages(r))
    got = np.asarray(cal.inverse_success(r))
    np.testing.assert_allclose(got[grpo > 0], 4 * grpo[grpo > 0], rtol=1e-6)
    np.testing.assert_array_equal(got[grpo < 0], grpo[grpo < 0])


@pytest.mark.parametrize("rewards", [[1.0] * 8, [0.0] * 8, [1.0], [0.0]], ids=["all-correct", "all-wrong", "G=1 correct",
                                                                              "G=1 wrong"])
def test_edge_groups_get_zero(rewards):
    np.testing.assert_array_equal(np.asarray(cal.inverse_success(jnp.asarray(rewards))), 0.0)
    c, g = int(sum(rewards)), len(rewards)
    np.testing.assert_array_equal(np.asarray(cal.inverse_success_counts(c, g)), [0.0, 0.0])
    np.testing.assert_array_equal(np.asarray(cal.inverse_success(jnp.asarray(rewards), ddof=1)), 0.0)  # no raise at G=1


def test_one_correct_gets_g_minus_one_times_grpo():
    for g in (2, 4, 16, 64):
        grpo_c, grpo_w = registry.get("grpo").class_advantages(1, g)
        a_c, a_w = cal.inverse_success_counts(1, g)
        np.testing.assert_allclose(float(a_c), (g - 1) * float(grpo_c), rtol=1e-6)
        assert float(a_w) == float(grpo_w)


def test_alpha_zero_is_grpo_and_alpha_two_squares():
    r = _group(3)
    grpo = np.asarray(registry.get("grpo").advantages(r))
    np.testing.assert_allclose(np.asarray(cal.inverse_success(r, alpha=0.0)), grpo, rtol=1e-6)
    got = np.asarray(cal.inverse_success(r, alpha=2.0))
    np.testing.assert_allclose(got[:3], 25 * grpo[:3], rtol=1e-6)


@pytest.mark.parametrize("g", [1, 2, 3, 8, 17])
def test_group_form_equals_counts_form(g):
    rule = registry.get("inverse_success")
    for c in range(g + 1):
        want_c, want_w = rule.class_advantages(c, g)
        got = np.asarray(rule.advantages(_group(c, g)))
        np.testing.assert_allclose(got, [float(want_c)] * c + [float(want_w)] * (g - c), rtol=1e-6, atol=1e-7)


def test_sample_std_and_eps_reach_the_base():
    r = _group(2, 4)
    o = registry.Options(ddof=1, eps=1e-4)
    want = np.array(registry.get("grpo").advantages(r, o))
    want[want > 0] *= 2  # G − |S⁺| = 2
    np.testing.assert_allclose(np.asarray(registry.get("inverse_success").advantages(r, o)), want, rtol=1e-6)


def test_jits_and_vmaps_over_groups():
    groups = jnp.stack([_group(c) for c in (0, 1, 2, 7, 8)])
    got = np.asarray(jax.jit(jax.vmap(cal.inverse_success))(groups))
    for i in range(len(groups)):
        np.testing.assert_allclose(got[i], np.asarray(cal.inverse_success(groups[i])), rtol=1e-6)
    assert np.all(got[[0, 4]] == 0.0) and got[1, 0] > 0


def test_refuses_non_binary_rewards_and_negative_alpha():
    with pytest.raises(CatsimError, match="binary rewards"):
        cal.inverse_success(jnp.asarray([0.5, 1.0]))
    with pytest.raises(CatsimError, match="alpha"):
        cal.inverse_success(_group(1), alpha=-1.0)


def test_registry_entry():
    rule = registry.get("inverse_success")
    assert rule.binary and rule.reads_eps and not rule.needs_k and not rule.baseline_free
    assert "2601.15609" in rule.paper
    assert not rule.can_move(1) and rule.can_move(2)
