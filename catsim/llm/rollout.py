"""Batched sampling with a KV cache: one prefill over the (left-padded) prompts, then a jitted
`lax.while_loop` of single-token decode steps that stops early once every sequence has finished.

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

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, default_positions, forward_cached, init_cache


@dataclass(frozen=True)
class SamplingConfig:
    """How completions are drawn (hashable: a static argument of the jitted `generate`)."""

    max_new_tokens: int  # N: completion length cap (the stop token, if drawn, is included)
    temperature: float = 1.0  # softmax temperature; 0 means greedy (argmax) decoding
    top_p: float = 1.0  # nucleus sampling: smallest set of tokens with mass >= top_p; 1 disables
    top_k: int = 0  # keep the k most likely tokens; 0 disables
    stop_tokens: tuple[int, ...] = ()  # a sequence ends after emitting any of these ids
    pad_token: int = 0  # id written after a sequence has ended (masked out anyway)

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise CatsimError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            raise CatsimError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise CatsimError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise CatsimError(f"top_k must be a non-negative integer, got {self.top_k!r}")
        object.__setattr__(self, "stop_tokens", tuple(int(t) for t in self.stop_tokens))


class Rollout(NamedTuple):
    """Completions of a batch; position n < lengths_B[b] of row b is a generated token."""

    tokens_BxN: jax.Array  # int32 generated ids (pad_token after the end)
    logprobs_BxN: jax.Array  # float32 log-prob under the sampling distribution (0 where masked)
    model_logprobs_BxN: jax.Array  # float32 log-softmax of the raw logits at the chosen id
    mask_BxN: jax.Array  # bool: token belongs to the completion (stop token included)
    lengths_B: jax.Array  # int32 number of generated tokens
    finished_B: jax.Array  # bool: ended with a stop token (False: hit max_new_tokens)


def sampling_logits(logits_V: jax.Array, sampling: SamplingConfig) -> jax.Array:
    """Logits of the distribution actually sampled: logits / temperature with tokens outside the
    top-k and the top-p nucleus set to -inf (ties at the cut-off are kept, as in `transformers`)."""
    scaled_V = logits_V / sampling.temperature
    vocab = scaled_V.shape[-1]
    if 0 < sampling.top_k < vocab:
        kth = jax.lax.top_k(scaled_V, sampling.top_k)[0][-1]
        scaled_V = jnp.where(scaled_V < kth, -jnp.inf, scaled_V)
    if sampling.top_p < 1.0:
        sorted_V = jnp.sort(scaled_V)[::-1]
        probs_V = jax.nn.softmax(sorted_V)
        mass_before_V = jnp.cumsum(probs_V) - probs_V
        keep = jnp.maximum(jnp.sum(mass_before_V < sampling.top_p), 1)
        cutoff = sorted_V[keep - 1]
        scaled_V = jnp.where(scaled_V < cutoff, -jnp.inf, scaled_V)
    return scaled_V


def _sample_one(logits_V: jax.Array, key: jax.Array,
                sampling: SamplingConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(token, log pi_sample(token), log pi_model(token)) for one sequence."""
    model_logp_V = jax.nn.log_softmax(logits_V)
    if sampling.temperature == 0:
        token = jnp.argmax(logits_V)
        return token, jnp.zeros((), jnp.float32), model_logp_V[token]
    policy_logp_V = jax.nn.log_softmax(sampling_logits(logits_V, sampling))
    # Inverse-CDF sampling: one uniform per row instead of V Gumbel variates (much cheaper for large
    # V). u lies in (0, 1], so the first index whose CDF reaches u * total always has positive mass.
    cdf_V = jnp.cumsum(jnp.exp(policy_logp_V))
    u = 1.0 - jax.random.uniform(key, (), jnp.float32)
    token = jnp.minimum(jnp.sum(cdf_V < u * cdf_V[-1]), logits_V.shape[-1] - 1)
    return token, policy_logp_V[token], model_logp_V[token]


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


@functools.partial(jax.jit, static_argnames=("cfg", "sampling", "activation_sharding"))
def generate(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP: jax.Array,
             prompt_mask_BxP: jax.Array, key: jax.Array, prompt_ids_B: jax.Array | None = None,
             sample_ids_B: jax.Array | None = None, *, activation_sharding: Any = None) -> Rollout:
    """Sample up to `sampling.max_new_tokens` tokens after each prompt.

    prompt_BxP: int32 ids, LEFT-padded so every row's last column is a real token.
    prompt_mask_BxP: 1 for real tokens. prompt_ids_B / sample_ids_B: int ids that, with `key`,
    determine each row's randomness (default: row index and 0).
    """
    b, p = prompt_BxP.shape
    n = sampling.max_new_tokens
    if prompt_ids_B is None:
        prompt_ids_B = jnp.arange(b, dtype=jnp.int32)
    if sample_ids_B is None:
        sample_ids_B = jnp.zeros((b,), jnp.int32)
    row_keys_B = jax.vmap(lambda pid, sid: jax.random.fold_in(jax.random.fold_in(key, pid), sid))(
        prompt_ids_B, sample_ids_B)
    stop_S = jnp.asarray(sampling.stop_tokens or (-1,), jnp.int32)

    prompt_mask_BxP = prompt_mask_BxP.astype(bool)
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
    if not prompts or any(len(p) == 0 for p in prompts):
        raise CatsimError("every prompt must have at least one token")
    width = max(len(p) for p in prompts) if length is None else length
    if width < max(len(p) for p in prompts):
        raise CatsimError(f"prompt longer than the padded length {width}")
    tokens = [[pad_token] * (width - len(p)) + list(p) for p in prompts]
    mask = [[False] * (width - len(p)) + [True] * len(p) for p in prompts]
    return jnp.asarray(tokens, jnp.int32), jnp.asarray(mask, bool)


@dataclass(frozen=True)
class Completion:
    """One sampled completion of one prompt (host-side, for printing and logging)."""

    prompt_id: int  # index of the prompt in the request
    sample_id: int  # index of the sample among the prompt's n samples
    text: str  # decoded completion (special tokens kept)
    tokens: tuple[int, ...]  # generated ids, stop token included
    logprob: float  # sum of log pi_sample over the completion
    finished: bool  # ended with a stop token


def _bucket(length: int, floor: int = 16) -> int:
    """Round a prompt width or batch size up to a power of two (>= floor), so that a few compiled
    programs serve all requests."""
    return max(floor, 1 << (length - 1).bit_length())


def sample_texts(params: Params, cfg: ModelConfig, tokenizer: Any, prompts: list[str], n: int,
                 sampling: SamplingConfig, key: jax.Array, *, chat: bool | None = None,
                 prompt_ids: list[int] | None = None) -> list[Completion]:
    """Draw `n` completions of each prompt string in one batched `generate` call.

    chat: wrap each prompt as a user message in the tokenizer's chat template (None: when the
    tokenizer has one). prompt_ids: stable ids for the randomness (default 0..len(prompts)-1), so a
    prompt's samples do not change when other prompts are added to the request.
    """
    if n < 1:
        raise CatsimError(f"n must be a positive integer, got {n}")
    if not prompts:
        raise CatsimError("no prompts given")
    prompt_ids = list(range(len(prompts))) if prompt_ids is None else list(prompt_ids)
    if len(prompt_ids) != len(prompts):
        raise CatsimError("prompt_ids must have one id per prompt")
    chat = tokenizer.chat_template is not None if chat is None else chat
    encoded = []
    for text in prompts:
        if chat:  # the template writes BOS itself
            ids = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": text}]))
        else:  # raw text gets the tokenizer's own BOS/EOS post-processing, as `transformers` does
            ids = tokenizer.encode(text, add_special_tokens=True)
        if not ids:
            raise CatsimError(f"prompt {text!r} encodes to no tokens")
        if max(ids) >= cfg.vocab_size:
            raise CatsimError(f"tokenizer id {max(ids)} is outside the model's vocabulary ({cfg.vocab_size})")
        encoded.append(ids)
    rows = [(pi, si, ids) for pi, ids in zip(prompt_ids, encoded) for si in range(n)]
    # Pad the batch with copies of the first row (results dropped) to a bucketed size as well.
    batch = rows + [rows[0]] * (_bucket(len(rows), floor=8) - len(rows))
    tokens, mask = left_pad([ids for _, _, ids in batch], sampling.pad_token,
                            _bucket(max(len(ids) for ids in encoded)))
    out = generate(params, cfg, sampling, tokens, mask, key,
                   jnp.asarray([r[0] for r in batch], jnp.int32), jnp.asarray([r[1] for r in batch], jnp.int32))
    out = jax.device_get(out)
    completions = []
    for row, (pi, si, _) in enumerate(rows):
        length = int(out.lengths_B[row])
        ids = tuple(int(t) for t in out.tokens_BxN[row, :length])
        finished = bool(out.finished_B[row])
        text_ids = ids[:-1] if finished else ids  # the stop token ends the text; `tokens` keeps it
        completions.append(Completion(pi, si, tokenizer.decode(text_ids), ids,
                                      float(out.logprobs_BxN[row, :length].sum()), finished))
    return completions
