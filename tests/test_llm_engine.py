"""catsim.llm.rollout.cascade and attention.cascade_attention: the shared-prompt (cascade) rollout equals the
static engine and full attention, with or without compaction, whatever the batch layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.llm.model.attention import cascade_attention, reference_attention
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import init_params
from catsim.llm.rollout import SamplingConfig, generate, left_pad
from catsim.llm.rollout.cascade import generate_cascade

CFG = ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, architecture="Qwen3ForCausalLM", qk_norm=True)
PARAMS = init_params(CFG, jax.random.key(0), init_std=0.3)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
KEY = jax.random.key(42)


@pytest.mark.parametrize("dtype,atol", [(jnp.float32, 2e-6), (jnp.bfloat16, 2e-2)])
def test_cascade_attention_equals_full_attention(dtype, atol):
    """U = 2 prompts x R = 3 rows, GQA (4 query heads on 2 KV heads), prompts left-padded (3 and
    0 padding slots) and rows with generated slots masked out (finished rows, dead slots): the merged
    attention equals the reference over each row's concatenated prompt + generated cache."""
    u, r, t, s, n, h, k, e = 2, 3, 2, 7, 6, 4, 2, 8
    keys = jax.random.split(jax.random.key(1), 5)
    q = jax.random.normal(keys[0], (u, r, t, h, e)).astype(dtype)
    pk = jax.random.normal(keys[1], (u, s, k, e)).astype(dtype)
    pv = jax.random.normal(keys[2], (u, s, k, e)).astype(dtype)
    gk = jax.random.normal(keys[3], (u, r, n, k, e)).astype(dtype)
    gv = jax.random.normal(keys[4], (u, r, n, k, e)).astype(dtype)
    prefix_valid = np.ones((u, s), bool)
    prefix_valid[0, :3] = False  # left padding
    gen_valid = np.ones((u, r, n), bool)
    gen_valid[1, 2, 1:] = False  # a row that finished after one token
    gen_valid[0, 1, 0] = False
    offset = 3  # queries at generated slots 3 and 4
    got = cascade_attention(q, pk, pv, jnp.asarray(prefix_valid), gk, gv, jnp.asarray(gen_valid), offset)
    full_k = jnp.concatenate([jnp.repeat(pk, r, axis=0), gk.reshape(u * r, n, k, e)], axis=1)
    full_v = jnp.concatenate([jnp.repeat(pv, r, axis=0), gv.reshape(u * r, n, k, e)], axis=1)
    valid = np.concatenate([np.repeat(prefix_valid, r, axis=0), gen_valid.reshape(u * r, n)], axis=1)
    want = reference_attention(q.reshape(u * r, t, h, e), full_k, full_v, jnp.asarray(valid), s + offset)
    assert got.dtype == dtype
    np.testing.assert_allclose(np.asarray(got, np.float32).reshape(u * r, t, h, e),
                               np.asarray(want, np.float32), atol=atol, rtol=0)
    # the generated slots beyond a query's own are really excluded (the test can fail)
    shifted = cascade_attention(q, pk, pv, jnp.asarray(prefix_valid), gk, gv, jnp.asarray(gen_valid), offset + 1)
    assert np.abs(np.asarray(shifted, np.float32) - np.asarray(got, np.float32)).max() > 10 * atol


def _inputs(rows, width=None):
    tokens, mask = left_pad([PROMPTS[p] for p, _ in rows], length=width)
    return (np.asarray(tokens), np.asarray(mask), np.asarray([p for p, _ in rows], np.int32),
            np.asarray([s for _, s in rows], np.int32))


ROWS = [(p, s) for p in range(3) for s in range(4)]  # 3 prompts x 4 samples, rows grouped


def _stop_on(token):
    return dict(stop_tokens=(token,), pad_token=1)


@pytest.mark.parametrize("sampling", [
    SamplingConfig(max_new_tokens=24, temperature=0.0),
    SamplingConfig(max_new_tokens=24, temperature=1.0, top_p=0.95, **_stop_on(3)),
])
def test_cascade_equals_static_engine_with_and_without_compaction(sampling):
    """Same tokens, masks, lengths and finished flags; log-probs within float32 rounding. Chunks
    of 4 steps, so the rows that stop early are compacted away several times (checked)."""
    tokens, mask, pids, sids = _inputs(ROWS)
    static = jax.device_get(generate(PARAMS, CFG, sampling, tokens, mask, KEY, pids, sids, engine="static"))
    compacted = jax.device_get(generate_cascade(PARAMS, CFG, sampling, tokens, mask, KEY, pids, sids, chunk_steps=4))
    full = jax.device_get(generate_cascade(PARAMS, CFG, sampling, tokens, mask, KEY, pids, sids, chunk_steps=4,
                                           compact=False))
    for out in (compacted, full):
        np.testing.assert_array_equal(out.tokens_BxN, static.tokens_BxN)
        np.testing.assert_array_equal(out.mask_BxN, static.mask_BxN)
        np.testing.assert_array_equal(out.lengths_B, static.lengths_B)
        np.testing.assert_array_equal(out.finished_B, static.finished_B)
        np.testing.assert_allclose(out.logprobs_BxN, static.logprobs_BxN, atol=1e-5)
        np.testing.assert_allclose(out.model_logprobs_BxN, static.model_logprobs_BxN, atol=1e-5)
    if sampling.stop_tokens:  # lengths skewed enough that compaction really happened
        lengths = static.lengths_B
        assert static.finished_B.sum() >= 6 and lengths.min() < 12 and lengths.max() > 16, lengths


def test_cascade_samples_do_not_depend_on_layout():
    """Another order, batch size, padding width and grouping (rows of one prompt split, one
    sample alone): each row's tokens as in the grouped batch."""
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0, **_stop_on(3))
    base = jax.device_get(generate(PARAMS, CFG, sampling, *_inputs(ROWS)[:2], KEY, *_inputs(ROWS)[2:]))
    other_rows = [ROWS[i] for i in (7, 0, 11, 4, 2)]
    t, m, p, s = _inputs(other_rows, width=9)
    other = jax.device_get(generate(PARAMS, CFG, sampling, t, m, KEY, p, s))
    for j, row in enumerate(other_rows):
        i = ROWS.index(row)
        np.testing.assert_array_equal(other.tokens_BxN[j], base.tokens_BxN[i])
        np.testing.assert_allclose(other.logprobs_BxN[j], base.logprobs_BxN[i], atol=1e-5)
    assert not np.array_equal(base.tokens_BxN[0], base.tokens_BxN[1])  # samples of a prompt differ


def test_unknown_engine_is_refused():
    from catsim.errors import CatsimError
    with pytest.raises(CatsimError, match="engine"):
        generate(PARAMS, CFG, SamplingConfig(max_new_tokens=2), *_inputs(ROWS)[:2], KEY, engine="paged")
