"""What both rollout engines share (`static`, `cascade`): each row's key, the sampling step, the
weights laid out for decoding, the output columns, and power-of-two sizes.

Randomness: row b draws at decode step n with
`fold_in(row_keys(key, prompt_ids_B, sample_ids_B)[b], n)`, i.e.
`fold_in(fold_in(fold_in(key, prompt_ids_B[b]), sample_ids_B[b]), n)`, so a completion depends only
on (key, prompt id, sample index, prompt tokens), whichever engine, grid or batch layout draws it.

    keys_B = row_keys(key, prompt_ids_B, sample_ids_B)
    drawn = sample_step(logits_BxV, keys_B, step, done_B, sampling)   # one decode step's tokens
    columns = write_columns(columns, at, drawn)                         # into the B x N outputs
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, cast_params, split_layers
from catsim.llm.sampling import SamplingConfig, sample_one

# Decode with per-layer weight arrays (`split_layers`)? None: on the CPU backend only, and only
# when the copy takes at most half of the host memory available. On the CPU a slice of the
# stacked L x ... weights is copied before each matmul of every decode step (0.5B shape, 4 layers,
# float32, 4 rows: 44.9 -> 33.6 ms per step); the split costs one copy of the layer weights while
# `generate` runs. Accelerators keep the scan (not measured: no accelerator was available).
DECODE_SPLIT_LAYERS: bool | None = None


def pow2(n: int, floor: int = 1) -> int:
    """The smallest power of two >= max(n, floor): grid sizes, cache slots, prompt widths and
    batch sizes, so that a few compiled programs serve every request."""
    return max(floor, 1 << (max(n, 1) - 1).bit_length())


def bucket(length: int, floor: int = 16) -> int:
    """A prompt width or batch size rounded up to a power of two (>= floor): `pow2`."""
    return pow2(length, floor)


def row_keys(key: jax.Array, prompt_ids_B: jax.Array, sample_ids_B: jax.Array) -> jax.Array:
    """Each row's key, fold_in(fold_in(key, prompt id), sample id): B keys."""
    return jax.vmap(lambda pid, sid: jax.random.fold_in(jax.random.fold_in(key, pid), sid))(
        prompt_ids_B, sample_ids_B)


class Drawn(NamedTuple):
    """One decode step's draw for B rows; rows done before the step are masked."""

    tokens_B: jax.Array  # int32 token drawn (pad_token for rows already done)
    logprobs_B: jax.Array  # float32 log pi_sample(token) (0 for rows already done)
    model_logprobs_B: jax.Array  # float32 log pi_model(token) (0 for rows already done)
    live_B: jax.Array  # bool: the row was live at this step (the token belongs to its completion)
    done_B: jax.Array  # bool: the row is done after this step (it was, or it drew a stop token)


def sample_step(logits_BxV: jax.Array, keys_B: jax.Array, step: jax.Array, done_B: jax.Array,
                sampling: SamplingConfig, temperature=None) -> Drawn:
    """Draw each row's next token from its float32 logits with the key fold_in(keys_B[b], step)
    (`sampling.sample_one`, at the traced `temperature` if given); rows already done get
    `sampling.pad_token`."""
    stop_S = jnp.asarray(sampling.stop_tokens or (-1,), jnp.int32)
    step_keys_B = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys_B, step)
    token_B, logp_B, model_logp_B = jax.vmap(sample_one, in_axes=(0, 0, None, None))(logits_BxV, step_keys_B, sampling,
                                                                                     temperature)
    live_B = ~done_B
    token_B = jnp.where(live_B, token_B, sampling.pad_token).astype(jnp.int32)
    return Drawn(token_B, jnp.where(live_B, logp_B, 0.0), jnp.where(live_B, model_logp_B, 0.0), live_B,
                 done_B | (live_B & jnp.isin(token_B, stop_S)))


class Columns(NamedTuple):
    """Generated tokens of B rows over N steps (the fields of `sampling.Rollout` written by step)."""

    tokens_BxN: jax.Array
    logprobs_BxN: jax.Array
    model_logprobs_BxN: jax.Array
    mask_BxN: jax.Array


def empty_columns(rows: int, steps: int, pad_token: int) -> Columns:
    return Columns(jnp.full((rows, steps), pad_token, jnp.int32), jnp.zeros((rows, steps), jnp.float32),
                   jnp.zeros((rows, steps), jnp.float32), jnp.zeros((rows, steps), bool))


def write_columns(columns: Columns, at: jax.Array, drawn: Drawn) -> Columns:
    """`columns` with step `at` set to `drawn`."""
    return Columns(columns.tokens_BxN.at[:, at].set(drawn.tokens_B),
                   columns.logprobs_BxN.at[:, at].set(drawn.logprobs_B),
                   columns.model_logprobs_BxN.at[:, at].set(drawn.model_logprobs_B),
                   columns.mask_BxN.at[:, at].set(drawn.live_B))


def _available_host_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def split_layers_for_decode(layer_bytes: int) -> bool:
    """Whether decoding runs per-layer weight arrays (`DECODE_SPLIT_LAYERS`) for layers of
    `layer_bytes` bytes."""
    if DECODE_SPLIT_LAYERS is not None:
        return DECODE_SPLIT_LAYERS
    if jax.default_backend() != "cpu" or jax.process_count() > 1:
        return False  # several processes must trace one program: no decision on local memory
    available = _available_host_bytes()
    return available is not None and layer_bytes <= available // 2


def decode_layout(params: Params, cfg: ModelConfig) -> Params:
    """The weights as both engines decode with them: cast to the compute dtype once (not in every
    decode step: float32 masters), the layers split where `split_layers_for_decode` says (as they
    are when `decode_params` split them already). Traceable (the static engine calls it under jit)."""
    return _layout(params, cfg, _split_wanted(params, cfg))


def laid_out(params: Params, cfg: ModelConfig) -> Params:
    """`decode_layout` of concrete weights, as the cascade engine calls it before a rollout: one
    compiled program where the weights change (eagerly the split is one slice op per leaf and layer,
    ≈ 2.3 ms of the maze model's 60 ms RL step on 2 cores), the weights themselves where nothing
    changes (no copy: weights cast and split already, e.g. by `decode_params`)."""
    split = _split_wanted(params, cfg)
    if not split and all(x.dtype == jnp.dtype(cfg.dtype) for x in jax.tree.leaves(params)):
        return params
    return _layout_jit(params, cfg, split)


def _split_wanted(params: Params, cfg: ModelConfig) -> bool:
    """Stacked layers that `split_layers_for_decode` splits (their size in the compute dtype)."""
    layers = params["layers"]
    return not isinstance(layers, (list, tuple)) and split_layers_for_decode(
        sum(x.size * jnp.dtype(cfg.dtype).itemsize for x in jax.tree.leaves(layers)))


def _layout(params: Params, cfg: ModelConfig, split: bool) -> Params:
    params = cast_params(params, cfg.dtype)
    return split_layers(params) if split else params


_layout_jit = jax.jit(_layout, static_argnums=(1, 2))


def decode_params(params: Params) -> Params:
    """`params` laid out for `generate` only (`catsim llm sample`): where `generate` would split
    the stacked layers in every call (`DECODE_SPLIT_LAYERS`), they are split once here and the
    stacked arrays deleted, so the weights are not held twice while sampling (the memory rule
    applies to the largest weight, the most the split holds twice at a time). The caller must
    hold no other reference to `params`' layers, and use the result only with `generate`
    (measured on the 0.5B shape, 4 layers, float32: the sampling process's peak 1,412 → ≈ 1,170 MB,
    decode speed that of the split)."""
    # released leaf by leaf: the split holds its largest weight twice at most, not every layer
    # (already split parameters come back from `split_layers` as they are)
    if not split_layers_for_decode(max(x.size * x.dtype.itemsize for x in jax.tree.leaves(params["layers"]))):
        return params
    return split_layers(params, release=True)
