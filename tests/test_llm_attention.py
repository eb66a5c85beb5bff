"""Every attention implementation against the reference einsum: grouped-query heads, padding
anywhere, KV-cache offsets, gradients, and the blockwise one's memory (no T x S array)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jax_core

from catsim.errors import CatsimError
from catsim.llm.model.attention import attention, reference_attention, resolve
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import forward, forward_cached, init_cache, init_params

IMPLS = ("blockwise", "dot_product")


def _inputs(b=3, t=11, s=11, h=4, k=2, e=8, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, h, e)), jnp.float32)
    key = jnp.asarray(rng.normal(size=(b, s, k, e)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, s, k, e)), jnp.float32)
    valid = np.ones((b, s), bool)
    valid[1, :4] = False  # left padding
    valid[2, s - 3:] = False  # right padding
    valid[2, 5] = False  # a hole in the middle
    return q, key, v, jnp.asarray(valid)


def _real_rows(valid, t, q_offset=0):
    """B x T: queries with at least one key to attend to (the others' outputs are meaningless)."""
    slots = q_offset + np.arange(t)
    allowed = (np.arange(valid.shape[1])[None, None, :] <= slots[None, :, None]) & np.asarray(valid)[:, None, :]
    return allowed.any(axis=-1)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("block", [4, 8])  # 3 and 2 query/key blocks
def test_full_attention_equals_reference(impl, block):
    q, k, v, valid = _inputs()
    ref = reference_attention(q, k, v, valid)
    got = attention(q, k, v, valid, implementation=impl, block_size=block)
    real = _real_rows(valid, q.shape[1])
    # float32 sums of ~11 terms of size ~1: rounding ~1e-6
    np.testing.assert_allclose(np.asarray(got)[real], np.asarray(ref)[real], atol=2e-5)
    # no mask at all (every key real)
    np.testing.assert_allclose(attention(q, k, v, implementation=impl, block_size=block),
                               reference_attention(q, k, v), atol=2e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_cache_offset_equals_reference(impl):
    """Queries at slots 5..7 of a 16-slot cache, as a prefill continuation; and one decoded token."""
    q, k, v, valid = _inputs(t=3, s=16)
    for offset in (5, jnp.asarray(5, jnp.int32), jnp.asarray(13, jnp.int32)):
        ref = reference_attention(q, k, v, valid, offset)
        got = attention(q, k, v, valid, offset, implementation=impl, block_size=4)
        real = _real_rows(valid, 3, int(offset))
        np.testing.assert_allclose(np.asarray(got)[real], np.asarray(ref)[real], atol=2e-5)
    q1 = q[:, :1]
    ref = reference_attention(q1, k, v, valid, jnp.asarray(9))
    got = jax.jit(lambda *a: attention(*a, implementation=impl, block_size=4))(q1, k, v, valid, jnp.asarray(9))
    np.testing.assert_allclose(got, ref, atol=2e-5)


@pytest.mark.parametrize("impl", IMPLS)
def test_gradients_equal_reference(impl):
    q, k, v, valid = _inputs()
    weight = jnp.asarray(_real_rows(valid, q.shape[1]), jnp.float32)[:, :, None, None]
    probe = jnp.asarray(np.random.default_rng(5).normal(size=q.shape), jnp.float32)

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, valid) * probe * weight)

    ref = jax.grad(functools_partial(loss, reference_attention), argnums=(0, 1, 2))(q, k, v)
    got = jax.grad(functools_partial(loss, lambda *a: attention(*a, implementation=impl, block_size=4)),
                   argnums=(0, 1, 2))(q, k, v)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, atol=5e-5)


def functools_partial(f, first):
    return lambda *a: f(first, *a)


def test_bfloat16_inputs_close_to_reference():
    q, k, v, valid = (x.astype(jnp.bfloat16) if x.dtype == jnp.float32 else x for x in _inputs())
    ref = reference_attention(q, k, v, valid)
    real = _real_rows(valid, q.shape[1])
    for impl in IMPLS:
        got = attention(q, k, v, valid, implementation=impl, block_size=4)
        assert got.dtype == jnp.bfloat16
        # both round probabilities and outputs to bf16 (relative 2^-8 of values ~1)
        err = np.abs(np.asarray(got, np.float32) - np.asarray(ref, np.float32))[real].max()
        assert err < 3e-2


def _largest_intermediate(jaxpr) -> int:
    """The most elements of any value produced anywhere in a jaxpr (sub-jaxprs included)."""
    biggest = 0
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            shape = getattr(var.aval, "shape", ())
            biggest = max(biggest, math.prod(shape))
        for sub in jax_core.jaxprs_in_params(eqn.params):
            biggest = max(biggest, _largest_intermediate(sub))
    return biggest


def test_blockwise_never_forms_a_t_by_s_array():
    """Forward and backward of the blockwise attention at T = S = 256 in blocks of 32: no value
    anywhere is as large as one head's T x S scores; the reference's are B·H·T·S."""
    b, t, h, k, e, block = 1, 256, 4, 2, 8, 32
    q, key, v, valid = (x[:b] for x in _inputs(t=t, s=t, h=h, k=k, e=e))

    def loss(fn):
        return lambda q, key, v: jnp.sum(fn(q, key, v, valid))

    blockwise = jax.make_jaxpr(jax.grad(loss(lambda *a: attention(*a, implementation="blockwise",
                                                                  block_size=block)),
                                        argnums=(0, 1, 2)))(q, key, v).jaxpr
    reference = jax.make_jaxpr(jax.grad(loss(reference_attention), argnums=(0, 1, 2)))(q, key, v).jaxpr
    assert _largest_intermediate(reference) >= b * h * t * t
    assert _largest_intermediate(blockwise) < t * t  # at most B·H·block² and O(T) values
    assert _largest_intermediate(blockwise) <= max(b * h * block * block, b * t * h * e)


def _model(**changes):
    changes = {"attention": "reference", **changes}
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, qkv_bias=True, **changes)
    return cfg, init_params(cfg, jax.random.key(0), init_std=0.2)


@pytest.mark.parametrize("impl", IMPLS)
def test_model_forward_and_cached_decode_equal_reference(impl):
    cfg, params = _model()
    rng = np.random.default_rng(3)
    tokens = jnp.asarray(rng.integers(0, 64, size=(2, 13)))
    mask = np.ones((2, 13), bool)
    mask[0, :5] = False  # a left-padded prompt
    mask = jnp.asarray(mask)
    ref = forward(params, cfg, tokens, mask_BxT=mask)
    fast_cfg = cfg.replace(attention=impl, attention_block=4)
    got = forward(params, fast_cfg, tokens, mask_BxT=mask)
    np.testing.assert_allclose(np.asarray(got)[np.asarray(mask)], np.asarray(ref)[np.asarray(mask)],
                               atol=1e-4)
    # prefill 6 tokens, then decode one at a time through the cache with the same implementation
    pos = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0)
    cache = init_cache(fast_cfg, 2, 16)
    out, cache = forward_cached(params, fast_cfg, tokens[:, :6], pos[:, :6], mask[:, :6], cache)
    steps = [out]
    for i in range(6, 13):
        out, cache = forward_cached(params, fast_cfg, tokens[:, i:i + 1], pos[:, i:i + 1],
                                    mask[:, i:i + 1], cache)
        steps.append(out)
    cached = np.asarray(jnp.concatenate(steps, axis=1))
    np.testing.assert_allclose(cached[np.asarray(mask)], np.asarray(ref)[np.asarray(mask)], atol=1e-4)


def test_auto_resolves_per_backend_and_bad_names_fail():
    on_gpu = jax.default_backend() == "gpu"
    assert resolve("auto", jnp.float32) == "blockwise"
    assert resolve("auto", jnp.bfloat16) == ("cudnn" if on_gpu else "blockwise")
    assert resolve("reference", jnp.bfloat16) == "reference"
    with pytest.raises(CatsimError, match="attention"):
        resolve("flash", jnp.float32)
    with pytest.raises(CatsimError, match="attention"):
        _model(attention="flash")
    with pytest.raises(CatsimError, match="attention_block"):
        _model(attention_block=0)
