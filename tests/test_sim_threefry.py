"""catsim.sim.threefry: the simulator's uniforms are jax.random.uniform's, bit for bit."""

import jax
import jax.extend.random
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.sim import threefry


@pytest.mark.parametrize("n", [1, 2, 3, 31, 1000, 65536])
def test_uniform_equals_jax_random_uniform(n):
    for seed, step in [(0, 0), (1, 7), (123456, 999), (2**31 - 1, 2**20)]:
        key = jax.random.fold_in(jax.random.key(seed), step)
        ours = np.asarray(threefry.uniform(key, n))
        theirs = np.asarray(jax.random.uniform(key, (n,)))
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, theirs)


def test_uniform_equals_under_jit_and_vmap():
    # how the engine calls it: per run (vmap) and per step (fold_in) inside one compiled program
    keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(5), s))(jnp.arange(8))
    ours = jax.jit(jax.vmap(lambda k: threefry.uniform(k, 4096)))(keys)
    theirs = jax.vmap(lambda k: jax.random.uniform(k, (4096,)))(keys)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_hash_equals_jax_threefry_on_random_words():
    # the hash itself, on arbitrary keys and counters (not only the iota counters uniform uses)
    rng = np.random.default_rng(0)
    k0, k1 = (jnp.asarray(rng.integers(0, 2**32, (), dtype=np.uint32)) for _ in range(2))
    x0, x1 = (jnp.asarray(rng.integers(0, 2**32, 4096, dtype=np.uint32)) for _ in range(2))
    ours = threefry.threefry2x32(k0, k1, x0, x1)
    theirs = jax.extend.random.threefry2x32_p.bind(k0, k1, x0, x1)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_other_keys_and_dtypes_fall_back_to_jax():
    rbg = jax.random.key(3, impl="rbg")
    np.testing.assert_array_equal(np.asarray(threefry.uniform(rbg, 100)),
                                  np.asarray(jax.random.uniform(rbg, (100,))))
    key = jax.random.key(3)
    out = threefry.uniform(key, 10, jnp.bfloat16)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out, np.float32),
                                  np.asarray(jax.random.uniform(key, (10,), jnp.bfloat16), np.float32))
