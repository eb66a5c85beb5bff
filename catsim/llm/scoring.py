"""The one teacher-forced path: per-token log-probabilities and entropies of given sequences, and
what is built on them (length-normalised sequence NLL, the probability of enumerated answers).

RL (behaviour/reference log-probs and the loss), evaluation (ΔNLL_rare, answer mass) and the tasks'
answer-mass reader all score through `token_logps`: position t predicts token t+1, so every array
here is B x (T−1), aligned with the targets tokens[:, 1:].

Memory: the output projection's logits are never formed for the whole vocabulary at once.
`tempered_logps` walks the vocabulary in slices (an online log-sum-exp, as flash attention does
over keys) and has its own backward pass that walks them again: it writes each slice's rows of the
projection's float32 gradient into one V x D buffer and accumulates the gradient of the hidden
states, so autodiff's per-chunk gradients of the closed-over projection (each a full V x D array
summed into a carry) and a compute-dtype copy of the whole projection never exist.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import (
    KVCache,
    Params,
    default_positions,
    forward_cached,
    hidden_states,
    init_cache,
    output_logits,
)

# Largest logits slice formed at once, in float32 elements (128 MiB): positions are scored in
# chunks of ⌊LOGIT_CHUNK_ELEMENTS / (B·V)⌋ so that B x T x V logits never exist (a 0.5B-shape
# vocabulary of 151,936 at B = 1 scores 220 positions per chunk; the maze model's whole batch at once).
LOGIT_CHUNK_ELEMENTS = 1 << 25

# Models of at most this many layers run the shared-prompt training pass with the layer loop
# unrolled (`forward_cached(unroll=True)`): on the CPU the backward pass of the rolled loop spends
# most of a small model's time copying per-layer residuals in and out of stacked buffers (the
# maze model's update: about 2x faster unrolled); deeper models keep one compiled block.
UNROLL_MAX_LAYERS = 8


def chunk_positions(batch: int, positions: int, vocab: int, budget: int = LOGIT_CHUNK_ELEMENTS) -> int:
    """Positions per logits chunk: as many as fit `budget` float32 elements (at least 1)."""
    return int(min(positions, max(1, budget // max(batch * vocab, 1))))


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


def vocab_chunk(rows: int, vocab: int, budget: int = LOGIT_CHUNK_ELEMENTS) -> int:
    """Vocabulary entries per logits slice of `tempered_logps`: as many as fit `budget` float32
    elements for `rows` positions (at least 1, at most the vocabulary)."""
    return int(min(vocab, max(1, budget // max(rows, 1))))


def output_projection(params: Params, model_cfg: ModelConfig) -> tuple[jax.Array, int]:
    """(weight, its vocabulary axis) of the output projection `output_logits` applies: the tied
    embedding V x D (axis 0) or `unembed` D x V (axis 1), in its storage dtype."""
    if model_cfg.tie_word_embeddings:
        return params["embed"], 0
    return params["unembed"], 1


def tempered_logps(h_BxTxD, w, targets_BxT, temperature=1.0, *, vocab_axis: int = 0, entropy: bool = True,
                   chunk: int | None = None):
    """(log π_τ(target), entropy of π_τ or None), both B x T float32, of π_τ = softmax(z / τ) with
    logits z = h · wᵀ (`output_logits`: w cast to h's dtype, float32 products), without forming
    B x T x V logits.

    w: the output projection, V x D (vocab_axis 0, a tied embedding) or D x V (vocab_axis 1).
    The vocabulary is walked in slices of `chunk` entries (default `vocab_chunk`): the forward pass
    keeps a running max, Σ exp and (for the entropy) Σ exp·z per position; the backward pass (its
    own, not autodiff's) recomputes each slice's logits from them and writes that slice's rows of
    ∂w (dtype of w) in place, accumulating ∂h in float32. Gradients flow to h, w and τ.
    """
    b, t, d = h_BxTxD.shape
    vocab = w.shape[vocab_axis]
    c = min(chunk or vocab_chunk(b * t, vocab), vocab)
    temperature = jnp.asarray(temperature, jnp.float32)
    logp_N, ent_N = _tempered_logps(h_BxTxD.reshape(b * t, d), w, targets_BxT.reshape(b * t), temperature,
                                    vocab_axis, c, entropy)
    return logp_N.reshape(b, t), None if ent_N is None else ent_N.reshape(b, t)


def _slices(vocab: int, chunk: int):
    """(index i, first column) of each vocabulary slice: slice i starts at min(i·chunk, V − chunk),
    so every slice has `chunk` columns and the last one may overlap its predecessor; its columns
    below i·chunk (already counted) are masked."""
    n = -(-vocab // chunk)
    return jnp.arange(n, dtype=jnp.int32), jnp.minimum(jnp.arange(n, dtype=jnp.int32) * chunk, vocab - chunk)


def _slice_logits(h_NxD, w, start, chunk: int, vocab_axis: int, temperature):
    """(z / τ for the slice's columns, N x C float32; the slice of w in h's dtype)."""
    w_slice = jax.lax.dynamic_slice_in_dim(w, start, chunk, axis=vocab_axis).astype(h_NxD.dtype)
    spec = "nd,cd->nc" if vocab_axis == 0 else "nd,dc->nc"
    return jnp.einsum(spec, h_NxD, w_slice, preferred_element_type=jnp.float32) / temperature, w_slice


def _tempered_logps_fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy):
    n_rows = h_NxD.shape[0]
    index, starts = _slices(w.shape[vocab_axis], chunk)

    def body(carry, slice_):
        m_N, s_N, u_N, zy_N = carry  # max, Σ exp(z − m), Σ exp(z − m)(z − m), target logit
        i, start = slice_
        z_NxC, _ = _slice_logits(h_NxD, w, start, chunk, vocab_axis, temperature)
        col_C = start + jnp.arange(chunk, dtype=jnp.int32)
        fresh_C = col_C >= i * chunk
        m_new = jnp.maximum(m_N, jnp.max(jnp.where(fresh_C, z_NxC, -jnp.inf), axis=1))
        shift_N = jnp.where(s_N > 0, m_N - m_new, 0.0)  # 0 before the first slice (m = −inf)
        e_NxC = jnp.where(fresh_C, jnp.exp(z_NxC - m_new[:, None]), 0.0)
        scale_N = jnp.exp(shift_N) * (s_N > 0)
        if entropy:
            u_N = scale_N * (u_N + s_N * shift_N) + jnp.sum(e_NxC * (z_NxC - m_new[:, None]), axis=1)
        s_N = s_N * scale_N + jnp.sum(e_NxC, axis=1)
        hit_NxC = (col_C == targets_N[:, None]) & fresh_C
        zy_N = zy_N + jnp.sum(jnp.where(hit_NxC, z_NxC, 0.0), axis=1)
        return (m_new, s_N, u_N, zy_N), None

    zeros = jnp.zeros((n_rows,), jnp.float32)
    init = (jnp.full((n_rows,), -jnp.inf, jnp.float32), zeros, zeros, zeros)
    (m_N, s_N, u_N, zy_N), _ = jax.lax.scan(body, init, (index, starts))
    log_s_N = jnp.log(s_N)
    lse_N = m_N + log_s_N
    ent_N = log_s_N - u_N / s_N if entropy else None
    return (zy_N - lse_N, ent_N), (h_NxD, w, targets_N, temperature, lse_N, ent_N)


def _tempered_logps_bwd(vocab_axis, chunk, entropy, residuals, cotangents):
    h_NxD, w, targets_N, temperature, lse_N, ent_N = residuals
    g_logp_N, g_ent_N = cotangents
    index, starts = _slices(w.shape[vocab_axis], chunk)
    w_spec = "nc,cd->nd" if vocab_axis == 0 else "nc,dc->nd"
    dw_spec = "nc,nd->cd" if vocab_axis == 0 else "nc,nd->dc"

    def body(carry, slice_):
        dh_NxD, dw, dtau = carry
        i, start = slice_
        z_NxC, w_slice = _slice_logits(h_NxD, w, start, chunk, vocab_axis, temperature)
        col_C = start + jnp.arange(chunk, dtype=jnp.int32)
        logp_NxC = z_NxC - lse_N[:, None]
        p_NxC = jnp.exp(logp_NxC)
        # ∂logp_y/∂z = onehot(y) − p;  ∂H/∂z = −p (log p + H)
        dz_NxC = g_logp_N[:, None] * ((col_C == targets_N[:, None]) - p_NxC)
        if entropy:
            dz_NxC = dz_NxC - g_ent_N[:, None] * p_NxC * (logp_NxC + ent_N[:, None])
        dz_NxC = jnp.where(col_C >= i * chunk, dz_NxC, 0.0)
        dtau = dtau - jnp.sum(dz_NxC * z_NxC)  # z = raw / τ: ∂z/∂τ = −z / τ
        dz_NxC = dz_NxC / temperature
        dh_NxD = dh_NxD + jnp.einsum(w_spec, dz_NxC, w_slice, preferred_element_type=jnp.float32)
        dw_slice = jnp.einsum(dw_spec, dz_NxC, h_NxD, preferred_element_type=jnp.float32)
        before = jax.lax.dynamic_slice_in_dim(dw, start, chunk, axis=vocab_axis)
        dw = jax.lax.dynamic_update_slice_in_dim(dw, (before + dw_slice).astype(dw.dtype), start, vocab_axis)
        return (dh_NxD, dw, dtau), None

    init = (jnp.zeros(h_NxD.shape, jnp.float32), jnp.zeros(w.shape, w.dtype), jnp.zeros((), jnp.float32))
    (dh_NxD, dw, dtau), _ = jax.lax.scan(body, init, (index, starts))
    dtau = (dtau / temperature).astype(temperature.dtype)
    return dh_NxD.astype(h_NxD.dtype), dw, None, dtau


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _tempered_logps(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy):
    return _tempered_logps_fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy)[0]


_tempered_logps.defvjp(_tempered_logps_fwd, _tempered_logps_bwd)


def token_logps(params: Params, model_cfg: ModelConfig, tokens_BxT, real_BxT, activation_sharding=None, *,
                temperature=1.0, entropy: bool = True, chunk: int | None = None):
    """(log π_τ(token_t+1 | ≤ t), entropy of π_τ at t or None), both B x (T−1), float32.

    π_τ = softmax(logits / τ): `temperature` τ (a traced scalar is fine) is the one the rollouts
    were sampled at when the importance ratio must describe that distribution (verl divides the
    logits the same way); τ = 1 is the model itself. entropy: False skips it. Logits are formed
    in slices of `chunk` vocabulary entries (`tempered_logps`), never for the whole vocabulary.
    """
    h_BxTxD = hidden_states(params, model_cfg, tokens_BxT, mask_BxT=real_BxT,
                            activation_sharding=activation_sharding)[:, :-1]
    w, vocab_axis = output_projection(params, model_cfg)
    return tempered_logps(h_BxTxD, w, tokens_BxT[:, 1:], temperature, vocab_axis=vocab_axis, entropy=entropy,
                          chunk=chunk)


def grouped_token_logps(params: Params, model_cfg: ModelConfig, prompt_PxW, prompt_real_PxW, tokens_BxM,
                        real_BxM, activation_sharding=None, *, temperature=1.0, entropy: bool = True,
                        chunk: int | None = None):
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
                          chunk=chunk)


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
