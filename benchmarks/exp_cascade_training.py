"""Experiment (kept as the record of a negative result): the RL update's shared-prompt pass with
cascade attention against the one catsim runs (`scoring.grouped_token_logps`).

catsim's grouped pass runs each prompt once and hands its keys and values to the group's n
completions by repeating them (a B x (W + M) cache per layer). The alternative here keeps the prompt's
keys once per prompt and merges the two partial softmaxes by log-sum-exp, as the rollout's decode
does (`attention.cascade_attention`; Hydragen, Juravsky et al. 2024), so nothing is repeated. Both
give the same log-probabilities and gradients up to float rounding (printed). Timed: the jitted
value and gradient of a log-prob loss at the tiny Maze benchmark's shape (8 prompts x 8 samples,
prompt width 32, 16 completion tokens; hidden 64, `LAYERS` layers), median of 60 calls, 3 rounds.

    python benchmarks/exp_cascade_training.py [LAYERS]      # alone on the machine; default 3
"""

from __future__ import annotations

import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm.model.attention import cascade_attention
from catsim.llm.model.cascade import prefix_cache
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import (
    apply_layers,
    attn_out_and_mlp,
    cast_params,
    default_positions,
    embed,
    final_norm,
    forward_cached,
    init_cache,
    init_params,
    output_projection,
    qkv,
    rope_tables,
)
from catsim.llm.scoring import grouped_token_logps, logits_chunking, tempered_logps


def grouped_cascade(params, cfg, prompt_PxW, prompt_real_PxW, tokens_BxM, real_BxM, temperature=1.0):
    """`grouped_token_logps` with the prompt's keys kept once per prompt (cascade attention)."""
    p, w = prompt_PxW.shape
    b, m = tokens_BxM.shape
    n = b // p
    prompt_real_PxW = prompt_real_PxW.astype(bool)
    cache = init_cache(cfg, p, w)
    h_last_Px1xD, cache = forward_cached(params, cfg, prompt_PxW, default_positions(prompt_real_PxW),
                                         prompt_real_PxW, cache, last_only=True, hidden=True, unroll=True)
    prefix = prefix_cache(cache)
    h_BxMxD = jnp.repeat(h_last_Px1xD, n, axis=0)
    if m > 1:
        t = m - 1
        start_B = jnp.repeat(jnp.sum(prompt_real_PxW, axis=1, dtype=jnp.int32), n)
        cos, sin = rope_tables(cfg, start_B[:, None] + jnp.arange(t, dtype=jnp.int32)[None])
        own_PxNxT = real_BxM[:, :-1].astype(bool).reshape(p, n, t)
        heads, kv_heads, e = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim

        def block(x_BxTxD, layer_and_prefix):
            layer, prefix_k, prefix_v, _ = layer_and_prefix
            layer = cast_params(layer, cfg.dtype)
            q, k, v = qkv(cfg, layer, x_BxTxD, cos, sin)
            attn = cascade_attention(q.reshape(p, n, t, heads, e), prefix_k, prefix_v, prefix.valid_UxS,
                                     k.reshape(p, n, t, kv_heads, e), v.reshape(p, n, t, kv_heads, e), own_PxNxT, 0)
            return attn_out_and_mlp(cfg, layer, x_BxTxD, attn.reshape(b, t, heads, e)), None

        x_BxTxD = apply_layers(block, embed(params, cfg, tokens_BxM[:, :-1]), params["layers"],
                               prefix.k_LxUxSxKxE, prefix.v_LxUxSxKxE, unroll=True)
        h_BxMxD = jnp.concatenate([h_BxMxD, final_norm(params, cfg, x_BxTxD)], axis=1)
    w_out, vocab_axis = output_projection(params, cfg)
    return tempered_logps(h_BxMxD, w_out, tokens_BxM, temperature, vocab_axis=vocab_axis, entropy=True,
                          entropy_grad=True, over=logits_chunking(None))


def main() -> None:
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cfg = ModelConfig(vocab_size=14, hidden_size=64, intermediate_size=256, num_layers=layers, num_heads=4,
                      num_kv_heads=4, head_dim=16, max_position_embeddings=1024)
    params = init_params(cfg, jax.random.key(0), 0.3)
    p, n, w, m = 8, 8, 32, 16
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(rng.integers(3, 14, (p, w)), jnp.int32)
    prompt_real = np.ones((p, w), bool)
    for r in range(p):  # left padding of 0-9 slots
        prompt_real[r, :rng.integers(0, 10)] = False
    prompt_real = jnp.asarray(prompt_real)
    tokens = jnp.asarray(rng.integers(3, 14, (p * n, m)), jnp.int32)
    real = jnp.asarray(np.arange(m)[None] < rng.integers(1, m + 1, p * n)[:, None])

    def value_and_grad(fn):
        def loss(params):
            logps, entropy = fn(params, cfg, prompt, prompt_real, tokens, real)
            return jnp.sum(logps * real) + 0.01 * jnp.sum(entropy * real)
        return jax.jit(jax.value_and_grad(loss))

    current, cascade = value_and_grad(grouped_token_logps), value_and_grad(grouped_cascade)
    (loss_c, grad_c), (loss_n, grad_n) = current(params), cascade(params)
    grad_diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(grad_c), jax.tree.leaves(grad_n)))
    print(f"loss {float(loss_c):.6f} against {float(loss_n):.6f}; largest gradient difference {grad_diff:.2e}")

    def median_ms(fn, calls=60):
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(params))
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    for r in range(3):
        print(f"round {r}: grouped (repeated prompt keys) {median_ms(current):.1f} ms, "
              f"cascade {median_ms(cascade):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
