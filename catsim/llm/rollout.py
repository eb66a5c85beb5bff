"""The one sampling path: encode prompts, generate with the KV cache, n samples per prompt, stop
and pad, decode, score with the task's verifier. RL, evaluation, the warm-up's evaluation, the
safeguards and `catsim llm sample` all draw completions through `sample_groups`.

`generate` draws the completions of a batch of (left-padded) prompts with one of two engines:
"cascade" (the default, `catsim.llm.engine`): one prefill per distinct prompt, its keys/values
stored once and shared by the prompt's rows, decode in jitted chunks between which finished rows
are dropped; "static" (the reference): one prefill over all rows, then a jitted `lax.while_loop`
of single-token decode steps over the whole batch until every sequence has finished.

    sampling = SamplingConfig(max_new_tokens=256, temperature=1.0, top_p=1.0, stop_tokens=(eos,))
    out = generate(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key,
                   prompt_ids_B=prompt_ids, sample_ids_B=sample_ids)
    out.tokens_BxN, out.logprobs_BxN, out.mask_BxN

Sampling draws one uniform per row and step and inverts the CDF of the sampling distribution
(far cheaper than V Gumbel variates). Reproducibility: the randomness of sample b at decode step n is
`fold_in(fold_in(fold_in(key, prompt_ids_B[b]), sample_ids_B[b]), n)`, so a completion depends only
on (key, prompt id, sample index, prompt tokens) — not on where the sample sits in the batch, on
the batch size, on the padding width or on the number of devices (up to float rounding of logits).

Log-probabilities: `logprobs_BxN` is log pi_sample(token), the distribution actually sampled from
(temperature, top-k, top-p applied; 0 for greedy decoding); `model_logprobs_BxN` is the model's
plain log-softmax at temperature 1, which is what a trainer compares against.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import (
    Params,
    cast_params,
    default_positions,
    forward_cached,
    init_cache,
    split_layers,
)
from catsim.llm.sampling import (  # noqa: F401  (re-exported: the rollout's public names)
    Rollout,
    SamplingConfig,
    _first_max_index,
    _sample_one,
    sampling_logits,
)
from catsim.llm.tasks.base import score_batch

# Decode with per-layer weight arrays (`split_layers`)? None: on the CPU backend only, and only
# when the copy takes at most half of the host memory available. On the CPU a slice of the
# stacked L x ... weights is copied before each matmul of every decode step (0.5B shape, 4 layers,
# float32, 4 rows: 44.9 -> 33.6 ms per step); the split costs one copy of the layer weights while
# `generate` runs. Accelerators keep the scan (not measured: no accelerator was available).
DECODE_SPLIT_LAYERS: bool | None = None


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


def _split_layers_for_decode(layer_bytes: int) -> bool:
    if DECODE_SPLIT_LAYERS is not None:
        return DECODE_SPLIT_LAYERS
    if jax.default_backend() != "cpu" or jax.process_count() > 1:
        return False  # several processes must trace one program: no decision on local memory
    available = _available_host_bytes()
    return available is not None and layer_bytes <= available // 2


def _layer_bytes(params: Params) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params["layers"]))


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
    if not _split_layers_for_decode(max(x.size * x.dtype.itemsize for x in jax.tree.leaves(params["layers"]))):
        return params
    return split_layers(params, release=True)


class _LoopState(NamedTuple):
    step: jax.Array
    logits_BxV: jax.Array
    cache: Any
    positions_B: jax.Array
    done_B: jax.Array
    tokens_BxN: jax.Array
    logprobs_BxN: jax.Array
    model_logprobs_BxN: jax.Array
    mask_BxN: jax.Array


# The engine `generate` runs: "cascade" (`catsim.llm.engine`: one prefill per prompt, a shared
# prompt cache, chunks with compaction) or "static" (one batch decoded until its longest row ends:
# the reference the cascade engine is tested against).
ENGINES = ("cascade", "static")
ROLLOUT_ENGINE = "cascade"


def generate(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP: jax.Array,
             prompt_mask_BxP: jax.Array, key: jax.Array, prompt_ids_B: jax.Array | None = None,
             sample_ids_B: jax.Array | None = None, *, activation_sharding: Any = None,
             engine: str | None = None) -> Rollout:
    """Sample up to `sampling.max_new_tokens` tokens after each prompt.

    prompt_BxP: int32 ids, LEFT-padded so every row's last column is a real token.
    prompt_mask_BxP: 1 for real tokens. prompt_ids_B / sample_ids_B: int ids that, with `key`,
    determine each row's randomness (default: row index and 0). engine: `ENGINES` (default
    `ROLLOUT_ENGINE`); several processes run the static engine (the cascade engine's host loop
    reads every row).
    """
    engine = ROLLOUT_ENGINE if engine is None else engine
    if engine not in ENGINES:
        raise CatsimError(f"rollout engine must be one of {ENGINES}, got {engine!r}")
    b = prompt_BxP.shape[0]
    if prompt_ids_B is None:
        prompt_ids_B = np.arange(b, dtype=np.int32)
    if sample_ids_B is None:
        sample_ids_B = np.zeros((b,), np.int32)
    if engine == "static" or jax.process_count() > 1:
        return _generate_static(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key, prompt_ids_B,
                                sample_ids_B, activation_sharding=activation_sharding)
    from catsim.llm.engine import generate_cascade

    params = cast_params(params, cfg.dtype)  # once, not in every decode step (float32 masters)
    if _split_layers_for_decode(_layer_bytes(params)):
        params = split_layers(params)  # as they are when `decode_params` split them already
    return generate_cascade(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key, prompt_ids_B, sample_ids_B)


@functools.partial(jax.jit, static_argnames=("cfg", "sampling", "activation_sharding"))
def _generate_static(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP: jax.Array,
                     prompt_mask_BxP: jax.Array, key: jax.Array, prompt_ids_B: jax.Array,
                     sample_ids_B: jax.Array, *, activation_sharding: Any = None) -> Rollout:
    """The static engine: all rows decoded together until the longest one stops."""
    b, p = prompt_BxP.shape
    n = sampling.max_new_tokens
    row_keys_B = jax.vmap(lambda pid, sid: jax.random.fold_in(jax.random.fold_in(key, pid), sid))(
        prompt_ids_B, sample_ids_B)
    stop_S = jnp.asarray(sampling.stop_tokens or (-1,), jnp.int32)

    prompt_mask_BxP = prompt_mask_BxP.astype(bool)
    params = cast_params(params, cfg.dtype)  # once, not in every decode step (float32 masters)
    if _split_layers_for_decode(_layer_bytes(params)):
        params = split_layers(params)  # as they are when `decode_params` split them already
    cache = init_cache(cfg, b, p + n)
    logits_Bx1xV, cache = forward_cached(
        params, cfg, prompt_BxP, default_positions(prompt_mask_BxP), prompt_mask_BxP, cache,
        last_only=True, activation_sharding=activation_sharding)

    def body(state: _LoopState) -> _LoopState:
        step_keys_B = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys_B, state.step)
        token_B, logp_B, model_logp_B = jax.vmap(_sample_one, in_axes=(0, 0, None))(
            state.logits_BxV, step_keys_B, sampling)
        live_B = ~state.done_B
        token_B = jnp.where(live_B, token_B, sampling.pad_token).astype(jnp.int32)
        done_B = state.done_B | (live_B & jnp.isin(token_B, stop_S))
        at = state.step
        tokens_BxN = state.tokens_BxN.at[:, at].set(token_B)
        logprobs_BxN = state.logprobs_BxN.at[:, at].set(jnp.where(live_B, logp_B, 0.0))
        model_logprobs_BxN = state.model_logprobs_BxN.at[:, at].set(jnp.where(live_B, model_logp_B, 0.0))
        mask_BxN = state.mask_BxN.at[:, at].set(live_B)
        logits_Bx1xV, cache = forward_cached(
            params, cfg, token_B[:, None], state.positions_B[:, None], live_B[:, None], state.cache,
            activation_sharding=activation_sharding)
        return _LoopState(at + 1, logits_Bx1xV[:, 0], cache, state.positions_B + 1, done_B,
                          tokens_BxN, logprobs_BxN, model_logprobs_BxN, mask_BxN)

    def cond(state: _LoopState) -> jax.Array:
        return (state.step < n) & ~jnp.all(state.done_B)

    init = _LoopState(
        step=jnp.zeros((), jnp.int32),
        logits_BxV=logits_Bx1xV[:, 0],
        cache=cache,
        positions_B=jnp.sum(prompt_mask_BxP, axis=1).astype(jnp.int32),
        done_B=jnp.zeros((b,), bool),
        tokens_BxN=jnp.full((b, n), sampling.pad_token, jnp.int32),
        logprobs_BxN=jnp.zeros((b, n), jnp.float32),
        model_logprobs_BxN=jnp.zeros((b, n), jnp.float32),
        mask_BxN=jnp.zeros((b, n), bool),
    )
    final = jax.lax.while_loop(cond, body, init)
    return Rollout(final.tokens_BxN, final.logprobs_BxN, final.model_logprobs_BxN, final.mask_BxN,
                   jnp.sum(final.mask_BxN, axis=1).astype(jnp.int32), final.done_B)


def left_pad(prompts: list[list[int]], pad_token: int = 0,
             length: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Left-pad token lists into (prompt_BxP int32, mask_BxP bool); `length` fixes P."""
    tokens, mask = _left_pad(prompts, pad_token, length)
    return jnp.asarray(tokens), jnp.asarray(mask)


def _left_pad(prompts: list[list[int]], pad_token: int = 0,
              length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`left_pad` as numpy arrays (host-side batch assembly: no device ops)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise CatsimError("every prompt must have at least one token")
    width = max(len(p) for p in prompts) if length is None else length
    if width < max(len(p) for p in prompts):
        raise CatsimError(f"prompt longer than the padded length {width}")
    tokens = np.full((len(prompts), width), pad_token, np.int32)
    mask = np.zeros((len(prompts), width), bool)
    for row, p in enumerate(prompts):
        tokens[row, width - len(p):] = p
        mask[row, width - len(p):] = True
    return tokens, mask


def bucket(length: int, floor: int = 16) -> int:
    """Round a prompt width or batch size up to a power of two (>= floor), so that a few compiled
    programs serve all requests."""
    return max(floor, 1 << (length - 1).bit_length())


def stop_and_pad(model_cfg: ModelConfig, tokenizer) -> tuple[tuple[int, ...], int]:
    """(stop ids, pad id) of a model: config.json's eos ids (else the tokenizer's <eos>), and the
    tokenizer's pad id (else the first stop id)."""
    stops = tuple(model_cfg.eos_token_ids) or (
        (tokenizer.eos_token_id,) if tokenizer.eos_token_id is not None else ())
    if not stops:
        raise CatsimError("the model has no end-of-sequence token (config.json eos_token_id)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    return stops, int(pad)


def encode_prompt(tokenizer, text: str, chat_template: bool = False) -> list[int]:
    """Prompt ids: the tokenizer's own special-token rule (the character tokenizer adds <bos>);
    with `chat_template`, the text is wrapped as one user turn with the generation prompt (the
    template writes <bos> itself)."""
    if chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text, add_special_tokens=True))


def encode_answer(tokenizer, text: str) -> list[int]:
    """Answer ids, no special tokens (the caller appends the stop token)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass
class Groups:
    """Rollouts of P prompts × N samples (numpy, rows ordered prompt-major)."""

    prompt_indices: np.ndarray  # [P] the prompts' indices in their split
    prompt_tokens: np.ndarray  # [P·N, W] left-padded prompt ids
    prompt_mask: np.ndarray  # [P·N, W] bool
    tokens: np.ndarray  # [P·N, M] generated ids (stop token included)
    mask: np.ndarray  # [P·N, M] bool, response tokens
    scores: np.ndarray  # [P, N] verifier scores (0 without a task)
    texts: list  # P·N decoded completions (stop token dropped, special tokens skipped)
    finished: np.ndarray  # [P·N] bool: ended with a stop token
    logprob: np.ndarray  # [P·N] Σ log π_sample over each completion

    def take(self, groups: np.ndarray, n: int) -> Groups:
        rows = (groups[:, None] * n + np.arange(n)[None]).reshape(-1)
        return Groups(self.prompt_indices[groups], self.prompt_tokens[rows], self.prompt_mask[rows],
                      self.tokens[rows], self.mask[rows], self.scores[groups],
                      [self.texts[r] for r in rows], self.finished[rows], self.logprob[rows])

    @staticmethod
    def concat(parts: list[Groups]) -> Groups:
        width = max(p.prompt_tokens.shape[1] for p in parts)

        def pad(a, fill):
            return np.concatenate([np.full((a.shape[0], width - a.shape[1]), fill, a.dtype), a], axis=1)

        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts])

        return Groups(cat("prompt_indices"), np.concatenate([pad(p.prompt_tokens, 0) for p in parts]),
                      np.concatenate([pad(p.prompt_mask, False) for p in parts]), cat("tokens"),
                      cat("mask"), cat("scores"), sum((p.texts for p in parts), []), cat("finished"),
                      cat("logprob"))


def sample_groups(params, model_cfg, tokenizer, task, prompts, n: int, sampling: SamplingConfig, key, *,
                  mesh=None, chat_template: bool = False, batch_size: int = 0, pad_multiple: int = 8,
                  pad_rows: bool = False, width: int | None = None,
                  score_truncated: bool = False, progress=None) -> Groups:
    """n completions of each prompt, decoded and scored (truncated ones score 0 unless
    `score_truncated`).

    prompts: task `Prompt`s (`.text`, `.index`), or plain strings with `task=None` (indices
    0, 1, ...; scores 0). The randomness of row (prompt p, sample s) is (key, p.index, s):
    independent of batch layout. Layout: `batch_size` rows per generate call (0 = all), the last
    call padded to full size with copies of its last row when `pad_rows`; prompts left-padded to a
    multiple of `pad_multiple` (or to `width`). mesh: rows are sharded over it and gathered back
    to every process. progress: an object with `update(rows)` (e.g. tqdm), advanced after each
    generate call.
    """
    from catsim.llm.model.sharding import activation_sharding, shard_batch, to_host

    if n < 1:
        raise CatsimError(f"samples per prompt must be >= 1, got {n}")
    if not prompts:
        raise CatsimError("no prompts given")
    texts_in = [p if isinstance(p, str) else p.text for p in prompts]
    indices = [i if isinstance(p, str) else p.index for i, p in enumerate(prompts)]
    encoded = [encode_prompt(tokenizer, t, chat_template) for t in texts_in]
    for text, ids in zip(texts_in, encoded):
        if not ids:
            raise CatsimError(f"prompt {text!r} encodes to no tokens")
        if max(ids) >= model_cfg.vocab_size:
            raise CatsimError(f"tokenizer id {max(ids)} is outside the model's vocabulary ({model_cfg.vocab_size})")
    longest = max(len(e) for e in encoded)
    if longest + sampling.max_new_tokens > model_cfg.max_position_embeddings:
        raise CatsimError(f"a prompt of {longest} tokens plus max_new_tokens = {sampling.max_new_tokens} exceeds "
                          f"the model's context of {model_cfg.max_position_embeddings} positions")
    if width is None:
        width = -(-longest // pad_multiple) * pad_multiple
    rows = [(i, s) for i in range(len(prompts)) for s in range(n)]
    prompt_tokens, prompt_mask = _left_pad([encoded[i] for i, _ in rows], length=width)
    prompt_ids = np.asarray([indices[i] for i, _ in rows], np.int32)
    sample_ids = np.asarray([s for _, s in rows], np.int32)
    size = batch_size or len(rows)
    act = None if mesh is None else activation_sharding(mesh)
    outs = []
    for start in range(0, len(rows), size):
        sl = np.arange(start, min(start + size, len(rows)))
        real = len(sl)
        if pad_rows and real < size:  # one compiled shape for every call; padded rows dropped
            sl = np.concatenate([sl, np.full(size - real, sl[-1])])
        args = (prompt_tokens[sl], prompt_mask[sl], prompt_ids[sl], sample_ids[sl])
        if mesh is not None:
            args = shard_batch(args, mesh)
        out = generate(params, model_cfg, sampling, args[0], args[1], key, args[2], args[3],
                       activation_sharding=act)
        out = to_host(out)  # all processes get every row (an all-gather when multi-process)
        outs.append(jax.tree.map(lambda a, k=real: np.asarray(a)[:k], out))
        if progress is not None:
            progress.update(real)
    tokens, logps, mask, lengths, finished = (np.concatenate([getattr(o, f) for o in outs]) for f in
                                              ("tokens_BxN", "logprobs_BxN", "mask_BxN", "lengths_B",
                                               "finished_B"))
    scores = np.zeros(len(rows), np.float32)
    texts = []
    for r in range(len(rows)):
        ids = tokens[r, : lengths[r]]
        if finished[r]:
            ids = ids[:-1]  # the stop token ends the text; `tokens` keeps it
        texts.append(tokenizer.decode([int(t) for t in ids], skip_special_tokens=True))
    if task is not None:  # one batch: the verifier may check it in parallel under one time budget
        scored = [r for r in range(len(rows)) if finished[r] or score_truncated]
        scores[scored] = score_batch(task, [prompts[rows[r][0]] for r in scored], [texts[r] for r in scored])
        if jax.process_count() > 1:  # time limits make verdicts timing-dependent: process 0's hold
            from jax.experimental import multihost_utils

            scores = np.asarray(multihost_utils.broadcast_one_to_all(scores), np.float32)
    logprob = np.sum(np.where(mask, logps, 0.0), axis=1)
    return Groups(np.asarray(indices, np.int64), np.asarray(prompt_tokens), np.asarray(prompt_mask),
                  tokens, mask.astype(bool), scores.reshape(len(prompts), n), texts,
                  finished.astype(bool), logprob)
