"""The static rollout engine (the reference the cascade engine is tested against): one prefill over
all rows into a P + N-slot cache, then a jitted `lax.while_loop` of one-token decode steps over the
whole batch until every row has stopped."""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, default_positions, forward_cached, init_cache
from catsim.llm.rollout.decode import (
    Columns,
    decode_layout,
    empty_columns,
    row_keys,
    sample_step,
    write_columns,
)
from catsim.llm.sampling import Rollout, SamplingConfig, traced_temperature


class _LoopState(NamedTuple):
    step: jax.Array
    logits_BxV: jax.Array
    cache: Any
    positions_B: jax.Array
    done_B: jax.Array
    columns: Columns


def generate_static(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP: jax.Array,
                    prompt_mask_BxP: jax.Array, key: jax.Array, prompt_ids_B: jax.Array,
                    sample_ids_B: jax.Array, *, activation_sharding: Any = None) -> Rollout:
    """`rollout.generate`'s result by the static engine: all rows decoded together until the
    longest one stops. `params` as stored (cast and laid out here, `decode.decode_layout`). With
    `sampling.temperature_varies`, one compiled decoder serves every temperature
    (`sampling.traced_temperature`)."""
    sampling, temperature = traced_temperature(sampling)
    return _generate_static(params, cfg, sampling, temperature, prompt_BxP, prompt_mask_BxP, key, prompt_ids_B,
                            sample_ids_B, activation_sharding=activation_sharding)


@functools.partial(jax.jit, static_argnames=("cfg", "sampling", "activation_sharding"))
def _generate_static(params: Params, cfg: ModelConfig, sampling: SamplingConfig, temperature: jax.Array,
                     prompt_BxP: jax.Array, prompt_mask_BxP: jax.Array, key: jax.Array, prompt_ids_B: jax.Array,
                     sample_ids_B: jax.Array, *, activation_sharding: Any = None) -> Rollout:
    b, p = prompt_BxP.shape
    n = sampling.max_new_tokens
    keys_B = row_keys(key, prompt_ids_B, sample_ids_B)
    prompt_mask_BxP = prompt_mask_BxP.astype(bool)
    params = decode_layout(params, cfg)
    cache = init_cache(cfg, b, p + n)
    logits_Bx1xV, cache = forward_cached(
        params, cfg, prompt_BxP, default_positions(prompt_mask_BxP), prompt_mask_BxP, cache,
        last_only=True, activation_sharding=activation_sharding)

    def body(state: _LoopState) -> _LoopState:
        drawn = sample_step(state.logits_BxV, keys_B, state.step, state.done_B, sampling, temperature)
        logits_Bx1xV, cache = forward_cached(
            params, cfg, drawn.tokens_B[:, None], state.positions_B[:, None], drawn.live_B[:, None], state.cache,
            activation_sharding=activation_sharding)
        return _LoopState(state.step + 1, logits_Bx1xV[:, 0], cache, state.positions_B + 1, drawn.done_B,
                          write_columns(state.columns, state.step, drawn))

    def cond(state: _LoopState) -> jax.Array:
        return (state.step < n) & ~jnp.all(state.done_B)

    init = _LoopState(
        step=jnp.zeros((), jnp.int32),
        logits_BxV=logits_Bx1xV[:, 0],
        cache=cache,
        positions_B=jnp.sum(prompt_mask_BxP, axis=1).astype(jnp.int32),
        done_B=jnp.zeros((b,), bool),
        columns=empty_columns(b, n, sampling.pad_token),
    )
    final = jax.lax.while_loop(cond, body, init)
    out = final.columns
    return Rollout(out.tokens_BxN, out.logprobs_BxN, out.model_logprobs_BxN, out.mask_BxN,
                   jnp.sum(out.mask_BxN, axis=1).astype(jnp.int32), final.done_B)
