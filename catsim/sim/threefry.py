"""`jax.random.uniform`'s float32 draws, bit for bit, with Threefry-2x32 unrolled.

On the CPU, JAX lowers its Threefry hash as a rolled loop (5 iterations of 4 rounds, chosen to keep
compile times short) that XLA cannot fuse: each iteration copies the two uint32 state arrays.
For a group's N uniforms that costs about twice the straight-line hash (measured: 8 × 65,536
uniforms, 0.87 ms rolled against 0.42 ms unrolled). The simulator draws N uniforms per run and step,
so it computes the same hash here in straight-line code: the 20 rounds and key injections of
Threefry-2x32 (Salmon et al., 2011) over the counters `jax.random` uses (a uint64 iota split into
high and low words, `jax_threefry_partitionable`), the two output words xor-ed, and the mantissa
trick of `jax.random.uniform`. Equality with `jax.random.uniform` is tested for every shape and key
the simulator uses (tests/test_sim_threefry.py); any other key implementation, dtype, or the
non-partitionable stream falls back to `jax.random.uniform` itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x, d: int):
    return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def threefry2x32(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds, as `jax.extend.random.threefry2x32_p` computes it."""
    keys = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + keys[0], x1 + keys[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ _rotate_left(x1, r)
        x0 = x0 + keys[(i + 1) % 3]
        x1 = x1 + keys[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _is_threefry_key(key) -> bool:
    return (jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
            and str(jax.random.key_impl(key)) == "threefry2x32" and key.shape == ())


def uniform(key, n: int, dtype=jnp.float32):
    """`jax.random.uniform(key, (n,), dtype)`: the same values, faster on the CPU for float32."""
    if (np.dtype(dtype) != np.float32 or not _is_threefry_key(key) or n >= 2**32
            or not jax.config.jax_threefry_partitionable):
        return jax.random.uniform(key, (n,), dtype=dtype)
    k = jax.random.key_data(key)
    b0, b1 = threefry2x32(k[0], k[1], jnp.zeros(n, np.uint32), lax.iota(np.uint32, n))
    mantissa = ((b0 ^ b1) >> np.uint32(9)) | np.uint32(0x3F800000)  # 23 random bits, exponent of 1.0
    return jnp.maximum(0.0, lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0)
