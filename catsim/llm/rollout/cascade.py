"""The cascade rollout engine: one prefill per prompt, a shared prompt cache, decode in jitted
chunks, finished rows dropped between chunks. `catsim.llm.rollout.generate` runs it by default.

An RL rollout is one wave: P prompts × N samples start together, so at decode step t every live row
has generated exactly t tokens. The engine uses that:

1. Rows sharing a prompt id and prompt tokens form a group; each distinct prompt is prefilled once
   and its keys/values are stored once ([L, U, S, K, E], `model.cascade.PrefixCache`). The group's
   first tokens are all drawn from that one logit row, each with its own key.
2. Rows sit on a U x R grid (U prompts, R row slots each, both powers of two); each row's generated
   keys/values live in its own cache, and decode attention merges the shared prompt part and the
   row's own part by log-sum-exp (`attention.cascade_attention`).
3. Decoding runs in jitted chunks of `CHUNK_STEPS` steps (a chunk stops early once every row is
   done). Between chunks the host reads the done mask and gathers the live rows into the smallest
   grid of powers of two that holds them (the prompts with a live row, the most live rows of one
   prompt); the generated cache has a power-of-two number of slots, grown as it fills, so attention
   reads only what is filled. The grid shapes and slot counts are powers of two, so a few compiled
   programs serve every rollout of a run.

Randomness is the static engine's (`decode.row_keys`, `decode.sample_step`): the uniform of row b
at step n comes from `fold_in(fold_in(fold_in(key, prompt_ids_B[b]), sample_ids_B[b]), n)`, so a
completion depends only on (key, prompt id, sample index, prompt tokens), whatever the layout, grid
or compaction. Both engines compute the same logits up to float rounding (the merged softmax adds in
another order), so greedy and sampled tokens agree unless two candidates tie within the last bits.

Several processes (`jax.distributed`): rows are independent, so each process runs the engine over
its own rows (`generate_cascade_per_process`: the rows of the batch's shards on its devices) with
a full copy of the weights on its first local device, and returns the rows as a global array
sharded like the batch, as the static engine's result is (`sharding.to_host` all-gathers it). The
host loop's grid and compaction follow the process's own rows, so processes run different programs.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from catsim.llm.model.cascade import (
    GenCache,
    PrefixCache,
    decode_step,
    init_gen_cache,
    prefix_cache,
)
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, default_positions, forward_cached, init_cache
from catsim.llm.rollout.decode import (
    Columns,
    empty_columns,
    laid_out,
    pow2,
    row_keys,
    sample_step,
    write_columns,
)
from catsim.llm.sampling import Rollout, SamplingConfig, traced_temperature

CHUNK_STEPS = 16  # decode steps per jitted chunk: compaction happens between chunks
GEN_SLOTS_FLOOR = 32  # smallest generated-cache size (slots), then powers of two up to the cap


class _State(NamedTuple):
    logits_BxV: jax.Array  # float32 logits for the next token of each row
    gen: GenCache
    positions_B: jax.Array  # RoPE position of the next token fed
    done_B: jax.Array  # row emitted a stop token (or is an empty slot of the grid)
    keys_B: jax.Array  # each row's key, fold_in(fold_in(key, prompt id), sample id)


@functools.partial(jax.jit, static_argnames=("cfg", "rows_per_prompt", "slots"))
def _prefill(params: Params, cfg: ModelConfig, tokens_UxP: jax.Array, mask_UxP: jax.Array, key: jax.Array,
             prompt_ids_B: jax.Array, sample_ids_B: jax.Array, dead_B: jax.Array, *,
             rows_per_prompt: int, slots: int) -> tuple[_State, PrefixCache]:
    """One prefill per prompt; the initial state of the U·R rows (row u·R + r reads prompt u)."""
    u, p = tokens_UxP.shape
    logits_Ux1xV, cache = forward_cached(params, cfg, tokens_UxP, default_positions(mask_UxP), mask_UxP,
                                         init_cache(cfg, u, p), last_only=True)
    keys_B = row_keys(key, prompt_ids_B, sample_ids_B)
    lengths_U = jnp.sum(mask_UxP, axis=1).astype(jnp.int32)
    state = _State(jnp.repeat(logits_Ux1xV[:, 0], rows_per_prompt, axis=0),
                   init_gen_cache(cfg, u * rows_per_prompt, slots),
                   jnp.repeat(lengths_U, rows_per_prompt), dead_B, keys_B)
    return state, prefix_cache(cache)


@functools.partial(jax.jit, static_argnames=("cfg", "sampling", "steps", "rows_per_prompt"), donate_argnums=(3,))
def _chunk(params: Params, cfg: ModelConfig, sampling: SamplingConfig, state: _State, prefix: PrefixCache,
           start: jax.Array, temperature: jax.Array, *, steps: int, rows_per_prompt: int) -> tuple[_State, Columns]:
    """Up to `steps` decode steps from generated slot `start` (fewer once every row is done); the
    chunk's B x steps columns. `sampling` static; `temperature` None (compiled in) or traced
    (`sampling.traced_temperature`)."""
    def body(carry):
        i, st, out = carry
        step = start + i
        drawn = sample_step(st.logits_BxV, st.keys_B, step, st.done_B, sampling, temperature)
        logits_BxV, gen = decode_step(params, cfg, drawn.tokens_B, st.positions_B, drawn.live_B, prefix, st.gen,
                                      step, rows_per_prompt)
        return i + 1, _State(logits_BxV, gen, st.positions_B + 1, drawn.done_B, st.keys_B), write_columns(out, i, drawn)

    def cond(carry):
        i, st, _ = carry
        return (i < steps) & ~jnp.all(st.done_B)

    out = empty_columns(state.done_B.shape[0], steps, sampling.pad_token)
    _, state, out = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), state, out))
    return state, out


@functools.partial(jax.jit, static_argnames=("slots",))
def _relayout(state: _State, prefix: PrefixCache, slot_sel_B: jax.Array, prompt_sel_U: jax.Array,
              dead_B: jax.Array, *, slots: int) -> tuple[_State, PrefixCache]:
    """The rows `slot_sel_B` of the old grid (and the prompts `prompt_sel_U`) as a new grid; rows
    `dead_B` are empty slots (done). The generated cache is padded or kept at `slots`."""
    def rows(x, axis=0):
        return jnp.take(x, slot_sel_B, axis=axis)

    def fit(x, axis):  # pad the slot axis to `slots` (never shrinks: slots only grow)
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, slots - x.shape[axis])
        return jnp.pad(x, widths)

    gen = GenCache(fit(rows(state.gen.k_LxBxNxKxE, 1), 2), fit(rows(state.gen.v_LxBxNxKxE, 1), 2),
                   fit(rows(state.gen.valid_BxN), 1))
    new = _State(rows(state.logits_BxV), gen, rows(state.positions_B), rows(state.done_B) | dead_B,
                 state.keys_B[slot_sel_B])
    prefix = PrefixCache(jnp.take(prefix.k_LxUxSxKxE, prompt_sel_U, axis=1),
                         jnp.take(prefix.v_LxUxSxKxE, prompt_sel_U, axis=1),
                         jnp.take(prefix.valid_UxS, prompt_sel_U, axis=0))
    return new, prefix


def _group_rows(tokens_BxP: np.ndarray, mask_BxP: np.ndarray, prompt_ids_B: np.ndarray) -> list[list[int]]:
    """Rows sharing a prompt id and prompt (tokens and padding), in order of first appearance."""
    groups: dict[Any, list[int]] = {}
    for row in range(tokens_BxP.shape[0]):
        key = (int(prompt_ids_B[row]), np.where(mask_BxP[row], tokens_BxP[row], -1).tobytes())
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _grid(groups: list[list[int]]) -> tuple[int, int, np.ndarray]:
    """(U, R, the row each of the U·R slots holds, -1 for an empty slot)."""
    u, r = pow2(len(groups)), pow2(max(len(g) for g in groups))
    slot_row = np.full(u * r, -1, np.int64)
    for j, rows in enumerate(groups):
        slot_row[j * r: j * r + len(rows)] = rows
    return u, r, slot_row


def generate_cascade(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP, prompt_mask_BxP,
                     key: jax.Array, prompt_ids_B, sample_ids_B, *, chunk_steps: int = CHUNK_STEPS,
                     compact: bool = True) -> Rollout:
    """`rollout.generate`'s result by the cascade engine, in this process. `params` as stored (cast
    and laid out here, `decode.decode_layout`; a no-op for weights laid out already); prompt_BxP
    left-padded (host or addressable device arrays). compact=False keeps the first grid throughout
    (finished rows still decoded, masked): the reference for compaction."""
    params = laid_out(params, cfg)
    tokens = np.asarray(prompt_BxP).astype(np.int32)
    mask = np.asarray(prompt_mask_BxP).astype(bool)
    pids, sids = np.asarray(prompt_ids_B, np.int32), np.asarray(sample_ids_B, np.int32)
    b, n = tokens.shape[0], sampling.max_new_tokens
    sampling, temperature = traced_temperature(sampling)
    groups = _group_rows(tokens, mask, pids)
    u, r, slot_row = _grid(groups)
    firsts = [g[0] for g in groups]
    firsts += [firsts[0]] * (u - len(groups))
    dead = slot_row < 0
    at = np.where(dead, firsts[0], slot_row)
    slots = min(n, pow2(min(chunk_steps, n), GEN_SLOTS_FLOOR))
    state, prefix = _prefill(params, cfg, tokens[firsts], mask[firsts], key, pids[at], sids[at], dead,
                             rows_per_prompt=r, slots=slots)
    out_tokens = np.full((b, n), sampling.pad_token, np.int32)
    out_logp, out_model_logp = np.zeros((b, n), np.float32), np.zeros((b, n), np.float32)
    out_mask = np.zeros((b, n), bool)
    step = 0
    while step < n:
        steps = min(chunk_steps, n - step)
        need = min(n, pow2(step + steps, GEN_SLOTS_FLOOR))
        if need > slots:  # grow the generated cache (same rows)
            slots = need
            state, prefix = _relayout(state, prefix, np.arange(u * r), np.arange(u), np.zeros(u * r, bool),
                                      slots=slots)
        state, out = _chunk(params, cfg, sampling, state, prefix, np.int32(step), temperature, steps=steps,
                            rows_per_prompt=r)
        out, done = jax.device_get((out, state.done_B))
        held = slot_row >= 0
        rows, cols = slot_row[held], slice(step, step + steps)
        out_tokens[rows, cols], out_logp[rows, cols] = out.tokens_BxN[held], out.logprobs_BxN[held]
        out_model_logp[rows, cols], out_mask[rows, cols] = out.model_logprobs_BxN[held], out.mask_BxN[held]
        step += steps
        if done.all() or step >= n:
            break
        if compact:
            live = np.flatnonzero(~done & held)
            regroup = [list(live[live // r == j]) for j in np.unique(live // r)]
            u2, r2, new_slot = _grid(regroup)
            if u2 * r2 < u * r:
                prompt_sel = np.asarray([g[0] // r for g in regroup] + [regroup[0][0] // r] * (u2 - len(regroup)))
                slot_sel = np.where(new_slot < 0, live[0], new_slot)
                state, prefix = _relayout(state, prefix, slot_sel, prompt_sel, new_slot < 0, slots=slots)
                slot_row = np.where(new_slot < 0, -1, slot_row[slot_sel])
                u, r = u2, r2
    lengths = out_mask.sum(axis=1).astype(np.int32)
    last = out_tokens[np.arange(b), np.maximum(lengths - 1, 0)]
    finished = (lengths > 0) & np.isin(last, np.asarray(sampling.stop_tokens, np.int32))
    return Rollout(jnp.asarray(out_tokens), jnp.asarray(out_logp), jnp.asarray(out_model_logp),
                   jnp.asarray(out_mask), jnp.asarray(lengths), jnp.asarray(finished))


def generate_cascade_per_process(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP,
                                 prompt_mask_BxP, key: jax.Array, prompt_ids_B, sample_ids_B) -> Rollout:
    """`generate_cascade` under several processes: this process decodes its own rows, those of the
    batch's shards on its devices (every row when the batch is not a row-sharded global array:
    host arrays, each process's copy of the whole batch), with the weights gathered into one full
    copy on its first local device (a collective: every process calls this with the same weights).
    Returns global arrays sharded like `prompt_BxP`'s rows (local arrays for an unsharded batch)."""
    device = jax.local_devices()[0]
    params = jax.device_put(_gather(laid_out(params, cfg)), device)  # cast before the gather
    if isinstance(key, jax.Array) and not key.is_fully_addressable:
        key = key.addressable_data(0)  # the same key on every process (replicated)
    sharding = getattr(prompt_BxP, "sharding", None)
    if isinstance(prompt_BxP, jax.Array) and not prompt_BxP.is_fully_addressable and isinstance(
            sharding, NamedSharding):
        rows = _process_rows(prompt_BxP)
        mask, pids, sids = (_rows_of(x, rows, sharding) for x in (prompt_mask_BxP, prompt_ids_B, sample_ids_B))
        local = generate_cascade(params, cfg, sampling, _rows_of(prompt_BxP, rows, sharding), mask, key, pids, sids)
        by_rows = NamedSharding(sharding.mesh, P(*sharding.spec[:1]))
        return Rollout(*(_global(np.asarray(x), rows, prompt_BxP.shape[0], by_rows) for x in local))
    return generate_cascade(params, cfg, sampling, *_gather((prompt_BxP, prompt_mask_BxP)), key,
                            *_gather((prompt_ids_B, sample_ids_B)))



def _gather(tree: Any) -> Any:
    """The global value of every array of `tree` on this process (numpy for arrays sharded over
    processes, an all-gather; the local array itself otherwise)."""
    def get(x):
        if not isinstance(x, jax.Array) or x.is_fully_addressable:
            return x
        if x.is_fully_replicated:
            return x.addressable_data(0)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    return jax.tree.map(get, tree)


def _process_rows(x_BxP: jax.Array) -> np.ndarray:
    """The (sorted) rows of a row-sharded global array that this process's devices hold."""
    b = x_BxP.shape[0]
    return np.unique(np.concatenate([np.arange(b)[shard.index[0]] for shard in x_BxP.addressable_shards]))


def _rows_of(x, rows: np.ndarray, sharding: NamedSharding) -> np.ndarray:
    """Rows `rows` of `x` (numpy): from this process's shards of a global array sharded like the
    batch (`sharding`), else from its global value (`_gather`: an all-gather when sharded otherwise;
    the choice depends on the shardings only, so every process makes the same)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.sharding != sharding:
        return np.asarray(_gather(x))[rows]
    b = x.shape[0]
    out = np.zeros((len(rows), *x.shape[1:]), x.dtype)
    for shard in x.addressable_shards:
        held = np.arange(b)[shard.index[0]]
        out[np.searchsorted(rows, held)] = np.asarray(shard.data)
    return out


def _global(local_B: np.ndarray, rows: np.ndarray, b: int, sharding: NamedSharding) -> jax.Array:
    """The global B x ... array whose rows `rows` are `local_B` (each process supplies its own)."""
    return jax.make_array_from_callback(
        (b, *local_B.shape[1:]), sharding,
        lambda index: local_B[np.searchsorted(rows, np.arange(b)[index[0]])][(slice(None), *index[1:])])
