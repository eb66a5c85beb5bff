"""Decode steps against a prompt cache shared by a group of rows (the rollout's cascade path).

Rows sit on a U x R grid: U prompts, R row slots per prompt, flattened to B = U·R rows. The
prompt's keys/values are stored once per prompt (`PrefixCache`, filled by one prefill per prompt
with `transformer.forward_cached`); each row's generated keys/values in its own cache
(`GenCache`). Every live row has generated exactly as many tokens as every other (one wave), so
the generated caches share one fill index. Attention is `attention.cascade_attention`.

    prefix = prefix_cache(cache)                           # after the prefill of the U prompts
    gen = init_gen_cache(cfg, u * r, slots)
    logits_BxV, gen = decode_step(params, cfg, tokens_B, positions_B, live_B, prefix, gen, index, r)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from catsim.llm.model.attention import cascade_attention
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import (
    KVCache,
    Params,
    apply_layers,
    attn_out_and_mlp,
    cast_params,
    embed,
    final_logits,
    qkv,
    rope_tables,
    write_kv,
)


class PrefixCache(NamedTuple):
    """Keys/values of U prompts (left-padded to S slots), stored once per prompt."""

    k_LxUxSxKxE: jax.Array
    v_LxUxSxKxE: jax.Array
    valid_UxS: jax.Array  # slot holds a real prompt token


class GenCache(NamedTuple):
    """Each row's generated keys/values: N slots, filled left to right in step."""

    k_LxBxNxKxE: jax.Array
    v_LxBxNxKxE: jax.Array
    valid_BxN: jax.Array  # slot holds a token the row generated while live


def prefix_cache(cache: KVCache) -> PrefixCache:
    """The prompt cache of a prefill whose cache has exactly the prompt's slots."""
    return PrefixCache(cache.k_LxBxSxKxE, cache.v_LxBxSxKxE, cache.valid_BxS)


def init_gen_cache(cfg: ModelConfig, rows: int, slots: int) -> GenCache:
    shape = (cfg.num_layers, rows, slots, cfg.num_kv_heads, cfg.head_dim)
    return GenCache(jnp.zeros(shape, cfg.dtype), jnp.zeros(shape, cfg.dtype), jnp.zeros((rows, slots), bool))


def decode_step(params: Params, cfg: ModelConfig, tokens_B: jax.Array, positions_B: jax.Array,
                live_B: jax.Array, prefix: PrefixCache, gen: GenCache, index: jax.Array,
                rows_per_prompt: int) -> tuple[jax.Array, GenCache]:
    """Feed one token per row (row b = u·R + r belongs to prompt u); write its key/value into
    generated slot `index`. Returns (float32 logits B x V, the updated cache). Traced inside the
    rollout's jitted chunk; `params` are in the compute dtype (stacked, or `split_layers`)."""
    b = tokens_B.shape[0]
    u, r = prefix.valid_UxS.shape[0], rows_per_prompt
    n = gen.valid_BxN.shape[1]
    valid_BxN = jax.lax.dynamic_update_slice(gen.valid_BxN, live_B[:, None], (0, index))
    cos, sin = rope_tables(cfg, positions_B[:, None])

    def block(carry, layer_and_index):
        x_Bx1xD, k_LxBxNxKxE, v_LxBxNxKxE = carry
        layer, prefix_k_UxSxKxE, prefix_v_UxSxKxE, i = layer_and_index
        layer = cast_params(layer, cfg.dtype)
        q_Bx1xHxE, k_Bx1xKxE, v_Bx1xKxE = qkv(cfg, layer, x_Bx1xD, cos, sin)
        k_LxBxNxKxE, v_LxBxNxKxE = write_kv(k_LxBxNxKxE, v_LxBxNxKxE, k_Bx1xKxE, v_Bx1xKxE, i, index)
        kv = (cfg.num_kv_heads, cfg.head_dim)
        attn = cascade_attention(
            q_Bx1xHxE.reshape(u, r, 1, cfg.num_heads, cfg.head_dim), prefix_k_UxSxKxE, prefix_v_UxSxKxE,
            prefix.valid_UxS, k_LxBxNxKxE[i].reshape(u, r, n, *kv), v_LxBxNxKxE[i].reshape(u, r, n, *kv),
            valid_BxN.reshape(u, r, n), index)
        x_Bx1xD = attn_out_and_mlp(cfg, layer, x_Bx1xD, attn.reshape(b, 1, cfg.num_heads, cfg.head_dim))
        return (x_Bx1xD, k_LxBxNxKxE, v_LxBxNxKxE), None

    carry = (embed(params, cfg, tokens_B[:, None]), gen.k_LxBxNxKxE, gen.v_LxBxNxKxE)
    x_Bx1xD, k, v = apply_layers(block, carry, params["layers"], prefix.k_LxUxSxKxE, prefix.v_LxUxSxKxE)
    return final_logits(params, cfg, x_Bx1xD)[:, 0], GenCache(k, v, valid_BxN)
