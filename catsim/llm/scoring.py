"""The one teacher-forced path: per-token log-probabilities and entropies of given sequences, and
what is built on them (length-normalised sequence NLL, the probability of enumerated answers).

RL (behaviour/reference log-probs and the loss), evaluation (ΔNLL_rare, answer mass) and the tasks'
answer-mass reader all score through `token_logps`: position t predicts token t+1, so every array
here is B x (T−1), aligned with the targets tokens[:, 1:].

Memory: B x T x V logits exist only within `chunked_logps.WHOLE_LOGITS_ELEMENTS` (1 GiB of float32,
kept for the backward pass, as PyTorch keeps them); beyond it log-probs and entropies are formed
chunk by chunk by `chunked_logps.tempered_logps`, which has its own backward pass (slices of the
vocabulary, or chunks of positions on an FSDP mesh: `logits_chunking`); other readers of the logits (asym-GRPO's
confidence) go through `over_logit_chunks`, chunks of positions under `jax.checkpoint`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm.chunked_logps import LOGIT_CHUNK_ELEMENTS, chunk_size, tempered_logps
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.sharding import FSDP
from catsim.llm.model.transformer import (
    KVCache,
    Params,
    default_positions,
    forward_cached,
    hidden_states,
    init_cache,
    output_logits,
    output_projection,
)

# Models of at most this many layers run the shared-prompt training pass with the layer loop
# unrolled (`forward_cached(unroll=True)`): on the CPU the backward pass of the rolled loop spends
# most of a small model's time copying per-layer residuals in and out of stacked buffers (the
# maze model's update: about 2x faster unrolled); deeper models keep one compiled block.
UNROLL_MAX_LAYERS = 8


def chunk_positions(batch: int, positions: int, vocab: int, budget: int = LOGIT_CHUNK_ELEMENTS) -> int:
    """Positions per logits chunk of `over_logit_chunks`: as many as fit `budget` float32 elements
    for B rows (at least 1; a 0.5B-shape vocabulary of 151,936 at B = 1: 220 positions), the rule
    of `chunked_logps.chunk_size` with B rows of the vocabulary per position."""
    return chunk_size(positions, batch * vocab, "positions", budget)


def over_logit_chunks(params: Params, model_cfg: ModelConfig, h_BxTxD, per_chunk, xs_BxT=(),
                      chunk: int | None = None):
    """`per_chunk(logits_BxCxV, *xs_BxC)` (a pytree of B x C arrays) over chunks of C positions of
    the final hidden states, stitched back to B x T.

    Each chunk's float32 logits are formed from `h_BxTxD` and the output projection, used and
    dropped; under `jax.checkpoint` the backward pass forms them again chunk by chunk, so at most
    one chunk of logits is alive in the forward and backward passes. chunk: positions per chunk
    (default `chunk_positions`); one chunk is a plain call.
    """
    b, t, _ = h_BxTxD.shape
    c = chunk or chunk_positions(b, t, model_cfg.vocab_size)
    if c >= t:
        return per_chunk(output_logits(params, model_cfg, h_BxTxD), *xs_BxT)
    n = -(-t // c)

    def split(a):  # B x T x ... -> n x B x C x ... (the last chunk zero-padded)
        a = jnp.pad(a, [(0, 0), (0, n * c - t)] + [(0, 0)] * (a.ndim - 2))
        return jnp.moveaxis(a.reshape(b, n, c, *a.shape[2:]), 1, 0)

    @jax.checkpoint
    def one(args):
        h_BxCxD, xs = args
        return per_chunk(output_logits(params, model_cfg, h_BxCxD), *xs)

    out = jax.lax.map(one, (split(h_BxTxD), tuple(split(x) for x in xs_BxT)))
    return jax.tree.map(lambda a: jnp.moveaxis(a, 0, 1).reshape(b, n * c, *a.shape[3:])[:, :t], out)


def logits_chunking(activation_sharding) -> str:
    """How `chunked_logps.tempered_logps` cuts the logits: "positions" on a mesh with an FSDP axis
    (which splits the output projection along its vocabulary; slicing the vocabulary would gather
    it on every device), "vocab" otherwise (one float32 V x D gradient buffer, no V x D sums)."""
    mesh = getattr(activation_sharding, "mesh", None)
    return "positions" if mesh is not None and dict(mesh.shape).get(FSDP, 1) > 1 else "vocab"


def token_logps(params: Params, model_cfg: ModelConfig, tokens_BxT, real_BxT, activation_sharding=None, *,
                temperature=1.0, entropy: bool = True, entropy_grad: bool = True, chunk: int | None = None):
    """(log π_τ(token_t+1 | ≤ t), entropy of π_τ at t or None), both B x (T−1), float32.

    π_τ = softmax(logits / τ): `temperature` τ (a traced scalar is fine) is the one the rollouts
    were sampled at when the importance ratio must describe that distribution (verl divides the
    logits the same way); τ = 1 is the model itself. entropy: False skips it. Logits are formed
    chunk by chunk (`chunked_logps.tempered_logps`; `chunk`: its entries per chunk, vocabulary
    entries or positions as `logits_chunking(activation_sharding)` says) or, within
    `chunked_logps.WHOLE_LOGITS_ELEMENTS`, whole. entropy_grad: False returns the entropy as a value
    only (no gradient through it).
    """
    h_BxTxD = hidden_states(params, model_cfg, tokens_BxT, mask_BxT=real_BxT,
                            activation_sharding=activation_sharding)[:, :-1]
    w, vocab_axis = output_projection(params, model_cfg)
    return tempered_logps(h_BxTxD, w, tokens_BxT[:, 1:], temperature, vocab_axis=vocab_axis, entropy=entropy,
                          entropy_grad=entropy_grad, over=logits_chunking(activation_sharding), chunk=chunk)


def grouped_token_logps(params: Params, model_cfg: ModelConfig, prompt_PxW, prompt_real_PxW, tokens_BxM,
                        real_BxM, activation_sharding=None, *, temperature=1.0, entropy: bool = True,
                        entropy_grad: bool = True, chunk: int | None = None):
    """`token_logps` of the completions of groups that share their prompt, each prompt run once.

    Row b (of B = P·n, prompt-major) is prompt row b // n of `prompt_PxW` (left-padded) followed
    by completion row b of `tokens_BxM` (`real_BxM` marks its tokens). The prompts go through the
    model once each, their keys and values are handed to all n completions of the group (a KV
    cache), and the completions go through attending to them: the same numbers as `token_logps`
    of the concatenated rows at the completion targets (up to float rounding), for P·W + B·(M−1)
    positions instead of B·(W+M), and gradients flow through the shared prompt pass.

    Returns (log-probs, entropies or None), B x M: entry j scores completion token j.
    """
    p, w = prompt_PxW.shape
    b, m = tokens_BxM.shape
    n = b // p
    prompt_real_PxW = prompt_real_PxW.astype(bool)
    unroll = model_cfg.num_layers <= UNROLL_MAX_LAYERS
    cache = init_cache(model_cfg, p, w + m - 1)
    h_last_Px1xD, cache = forward_cached(params, model_cfg, prompt_PxW, default_positions(prompt_real_PxW),
                                         prompt_real_PxW, cache, last_only=True, hidden=True, unroll=unroll,
                                         activation_sharding=activation_sharding)
    h_BxMxD = jnp.repeat(h_last_Px1xD, n, axis=0)
    if m > 1:
        cache = KVCache(jnp.repeat(cache.k_LxBxSxKxE, n, axis=1), jnp.repeat(cache.v_LxBxSxKxE, n, axis=1),
                        jnp.repeat(cache.valid_BxS, n, axis=0), cache.index)
        start_B = jnp.repeat(jnp.sum(prompt_real_PxW, axis=1, dtype=jnp.int32), n)
        positions_BxM = start_B[:, None] + jnp.arange(m - 1, dtype=jnp.int32)[None]
        h_comp, _ = forward_cached(params, model_cfg, tokens_BxM[:, :-1], positions_BxM, real_BxM[:, :-1],
                                   cache, hidden=True, unroll=unroll, activation_sharding=activation_sharding)
        h_BxMxD = jnp.concatenate([h_BxMxD, h_comp], axis=1)
    w, vocab_axis = output_projection(params, model_cfg)
    return tempered_logps(h_BxMxD, w, tokens_BxM, temperature, vocab_axis=vocab_axis, entropy=entropy,
                          entropy_grad=entropy_grad, over=logits_chunking(activation_sharding), chunk=chunk)


@functools.lru_cache(maxsize=8)
def logp_fn(model_cfg: ModelConfig):
    """Jitted (params, tokens_BxT, real_BxT) -> token log-probs B x (T−1) (one compilation per model)."""

    @jax.jit
    def fn(params, tokens, real):
        return token_logps(params, model_cfg, tokens, real, entropy=False)[0]

    return fn


def sequence_nll(params: Params, model_cfg: ModelConfig, prompt_tokens, prompt_mask, tokens, mask,
                 batch_size: int = 256) -> np.ndarray:
    """Length-normalised NLL −(1/|o|)Σ_t log π(o_t | x, o_<t) of each completion at temperature 1: [B].

    prompt_tokens/prompt_mask: [B, W] left-padded prompts; tokens/mask: [B, M] completions. Rows go
    through in batches of `batch_size` (the last one padded to full size, so one shape compiles).
    """
    fn = logp_fn(model_cfg)
    full = np.concatenate([prompt_tokens, tokens], axis=1).astype(np.int32)
    real = np.concatenate([prompt_mask, mask], axis=1)
    w = prompt_tokens.shape[1]
    out = []
    for s in range(0, full.shape[0], batch_size):
        rows = full[s:s + batch_size]
        pad = batch_size - rows.shape[0] if full.shape[0] > batch_size else 0
        r_real = real[s:s + batch_size]
        if pad:
            rows = np.concatenate([rows, np.repeat(rows[-1:], pad, 0)])
            r_real = np.concatenate([r_real, np.repeat(r_real[-1:], pad, 0)])
        lp = np.asarray(fn(params, jnp.asarray(rows), jnp.asarray(r_real)))[:, w - 1:]
        m = r_real[:, w:].astype(np.float64)
        nll = -(lp * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1)
        out.append(nll[: rows.shape[0] - pad])
    return np.concatenate(out)


def answer_logprob_fn(params: Params, model_cfg: ModelConfig, row_multiple: int = 8, width_multiple: int = 32):
    """A `tasks.answer_mass.LogProbFn`: Σ_t log π(completion_t | prompt, completion_<t) per completion.

    Rows and sequence width are padded to multiples, so prompts of varying length share a few
    compiled shapes; the padding is masked and, the model being causal, cannot change the real
    positions.
    """
    fn = logp_fn(model_cfg)

    def logprob_fn(prompt_ids: Sequence[int], completions: Sequence[Sequence[int]]) -> np.ndarray:
        if not completions:
            return np.zeros((0,), np.float64)
        p = len(prompt_ids)
        need = p + max(len(c) for c in completions)
        width = max(need, min(-(-need // width_multiple) * width_multiple, model_cfg.max_position_embeddings))
        rows = -(-len(completions) // row_multiple) * row_multiple
        tokens = np.zeros((rows, width), np.int32)
        real = np.zeros((rows, width), bool)
        target = np.zeros((rows, width - 1), bool)
        for i in range(rows):
            comp = completions[min(i, len(completions) - 1)]
            seq = list(prompt_ids) + list(comp)
            tokens[i, : len(seq)] = seq
            real[i, : len(seq)] = True
            target[i, p - 1 : len(seq) - 1] = True
        lp = np.asarray(fn(params, jnp.asarray(tokens), jnp.asarray(real)), np.float64)
        return (lp * target).sum(axis=1)[: len(completions)]

    return logprob_fn
