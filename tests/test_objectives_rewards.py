"""DAPO's overlong reward shaping and overlong filtering (hand-computed cases)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.objectives import rewards


def test_overlong_penalty_is_zero_then_linear_then_flat():
    # L_max = 20, buffer 4: free up to 16, −0.25 per token after, −1 from 20 on
    lengths = jnp.array([0, 10, 16, 17, 18, 20, 21, 100])
    got = rewards.overlong_penalty(lengths, 20, 4)
    np.testing.assert_allclose(got, [0, 0, 0, -0.25, -0.5, -1.0, -1.0, -1.0], rtol=0, atol=1e-7)
    scaled = rewards.overlong_penalty(lengths, 20, 4, penalty=0.5)
    np.testing.assert_allclose(scaled, 0.5 * np.asarray(got), atol=1e-7)


def test_overlong_penalty_dapo_values_and_jit():
    # DAPO: L_max 20480, buffer 4096 → penalty starts after 16384 tokens
    f = jax.jit(lambda n: rewards.overlong_penalty(n, 20480, 4096))
    np.testing.assert_allclose(f(jnp.array([16384, 18432, 20480, 30000])), [0, -0.5, -1, -1], atol=1e-6)


def test_overlong_penalty_without_buffer_is_a_step_at_the_cap():
    np.testing.assert_allclose(rewards.overlong_penalty(jnp.array([9, 10, 11]), 10, 0), [0, -1, -1])


def test_overlong_keep_masks_truncated_rollouts():
    np.testing.assert_array_equal(rewards.overlong_keep(np.array([True, False, True])), [0.0, 1.0, 0.0])


@pytest.mark.parametrize("args, match", [
    ((10, 11), "buffer"), ((10, -1), "buffer"), ((0, 0), "max_length"), ((10.5, 2), "max_length"),
])
def test_overlong_penalty_rejects_bad_settings(args, match):
    with pytest.raises(CatsimError, match=match):
        rewards.overlong_penalty(jnp.array([1]), *args)
    with pytest.raises(CatsimError, match="penalty"):
        rewards.overlong_penalty(jnp.array([1]), 10, 2, penalty=-1.0)
