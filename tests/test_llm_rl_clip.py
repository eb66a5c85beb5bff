"""The RL optimizer's global-norm clip: optax.clip_by_global_norm's rule as a multiplication, so
that the compiled optimizer step holds no second copy of the gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from catsim.llm.rl.step import clip_by_global_norm

GRADS = {"a": jax.random.normal(jax.random.key(0), (7, 5)), "b": jax.random.normal(jax.random.key(1), (11,))}
NORM = float(optax.tree.norm(GRADS))


@pytest.mark.parametrize("max_norm", [0.5 * NORM, 2.0 * NORM])
def test_equals_optax_clip_by_global_norm(max_norm):
    ours, _ = clip_by_global_norm(max_norm).update(GRADS, optax.EmptyState())
    ref, _ = optax.clip_by_global_norm(max_norm).update(GRADS, optax.EmptyState())
    for g, r in zip(jax.tree.leaves(ours), jax.tree.leaves(ref)):
        # t·(c/‖g‖) against (t/‖g‖)·c: a few float32 roundings of numbers of the size of t
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=0,
                                   atol=4 * np.finfo(np.float32).eps * float(jnp.max(jnp.abs(r))))
    clipped = float(optax.tree.norm(ours))
    assert clipped == pytest.approx(min(NORM, max_norm), rel=1e-6)


def test_compiled_adam_step_keeps_no_second_gradient():
    """XLA keeps optax's division (g/‖g‖)·c as its own gradient-sized temporary (it does not
    duplicate a division into Adam's two moment updates); the multiplication is fused."""
    leaf = jax.ShapeDtypeStruct((1024, 1024), jnp.float32)  # 4 MiB

    def temp_bytes(clip):
        opt = optax.chain(clip, optax.adamw(1e-3, weight_decay=0.01))
        state = jax.eval_shape(opt.init, {"w": leaf})

        def step(params, state, grads):
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        compiled = jax.jit(step, donate_argnums=(0, 1)).lower({"w": leaf}, state, {"w": leaf}).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    size = 1024 * 1024 * 4
    assert temp_bytes(optax.clip_by_global_norm(1.0)) >= size
    assert temp_bytes(clip_by_global_norm(1.0)) < size // 4
