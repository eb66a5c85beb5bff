"""Causal grouped-query softmax attention, one entry point with several implementations.

Shape legend as in `catsim.llm.model.transformer`: B batch, T query positions, S key slots,
H query heads, K key/value heads, G = H / K, E head width.

    attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS, q_offset, implementation=...)

Query t sits at slot `q_offset + t` and may attend to key slot s when s <= q_offset + t and
`valid_BxS[b, s]` (None: every key is real). The full forward uses q_offset = 0 and S = T; a
KV-cache step uses the cache's fill index. Scores and softmax are computed in float32; the result
has the dtype of `v`. A query with no key to attend to (a padding position) gets a meaningless
but finite output.

Implementations (`ModelConfig.attention`):
    "reference"    einsum scores B x K x G x T x S and a B x T x S mask: the definition
    "blockwise"    online softmax over key blocks inside query blocks: working memory
                   O(B·H·block²) per step, no T x S array anywhere, gradient by recomputation
                   (sequences that fit in one block run the reference computation)
    "dot_product"  `jax.nn.dot_product_attention` with XLA's implementation
    "cudnn"        `jax.nn.dot_product_attention(implementation="cudnn")`: cuDNN flash attention
                   (NVIDIA GPU, bfloat16/float16 only)
    "auto"         on a GPU with bfloat16/float16 activations "cudnn" for full causal passes
                   (when cuDNN accepts the shapes), otherwise (KV-cache steps, CPU, float32)
                   "blockwise"

Decoding against a prompt shared by several rows (a group of samples of one prompt) runs
`cascade_attention`: the shared prompt's keys U x S x K x E stored once per prompt, each row's own
generated keys in its own cache, the two partial softmaxes merged exactly by their float32
log-sum-exp (cascade / "Hydragen" attention, Juravsky et al. 2024). It equals `attention` over the
row's concatenated cache (tested against `reference_attention`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.llm.model.config import ATTENTION_IMPLEMENTATIONS as IMPLEMENTATIONS

_MASKED = -1e30  # finite "minus infinity": fully masked rows give a uniform softmax, never NaN


def resolve(implementation: str, dtype) -> str:
    """The concrete implementation "auto" stands for on the default backend and `dtype`."""
    if implementation not in IMPLEMENTATIONS:
        raise CatsimError(f"attention must be one of {IMPLEMENTATIONS}, got {implementation!r}")
    if implementation != "auto":
        return implementation
    half = jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return "cudnn" if jax.default_backend() == "gpu" and half else "blockwise"


def attention(q_BxTxHxE: jax.Array, k_BxSxKxE: jax.Array, v_BxSxKxE: jax.Array,
              valid_BxS: jax.Array | None = None, q_offset: int | jax.Array = 0, *,
              implementation: str = "reference", block_size: int = 512) -> jax.Array:
    """Causal grouped-query attention (see the module docstring). Returns B x T x H x E."""
    impl = resolve(implementation, q_BxTxHxE.dtype)
    if impl == "cudnn" and implementation == "auto":
        # cuDNN for full causal passes (training, scoring); KV-cache steps, and shapes cuDNN turns
        # down while tracing (head width, GPU generation), take the blockwise path
        full = isinstance(q_offset, int) and q_offset == 0 and q_BxTxHxE.shape[1] == k_BxSxKxE.shape[1]
        if full:
            try:
                return dot_product_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS, cudnn=True)
            except (NotImplementedError, ValueError, RuntimeError):
                pass
        impl = "blockwise"
    if impl == "reference":
        return reference_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS, q_offset)
    if impl == "blockwise":
        return blockwise_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS, q_offset,
                                   block_size=block_size)
    return dot_product_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS, q_offset,
                                 cudnn=impl == "cudnn")


def _allowed(q_slot_T: jax.Array, k_slot_S: jax.Array, valid_BxS: jax.Array | None) -> jax.Array:
    """B x T x S (or 1 x T x S) boolean: key slot <= query slot and key valid."""
    causal_1xTxS = (k_slot_S[None, :] <= q_slot_T[:, None])[None]
    return causal_1xTxS if valid_BxS is None else causal_1xTxS & valid_BxS[:, None, :]


def reference_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS=None, q_offset=0) -> jax.Array:
    """The definition: full float32 score matrix, masked, softmax, weighted sum of values."""
    b, t, h, e = q_BxTxHxE.shape
    s, kv_heads = k_BxSxKxE.shape[1], k_BxSxKxE.shape[2]
    allowed_BxTxS = _allowed(q_offset + jnp.arange(t), jnp.arange(s), valid_BxS)
    q_BxTxKxGxE = q_BxTxHxE.reshape(b, t, kv_heads, h // kv_heads, e)
    scores_BxKxGxTxS = jnp.einsum("btkge,bske->bkgts", q_BxTxKxGxE, k_BxSxKxE,
                                  preferred_element_type=jnp.float32) / math.sqrt(e)
    scores_BxKxGxTxS = jnp.where(allowed_BxTxS[:, None, None], scores_BxKxGxTxS, _MASKED)
    probs_BxKxGxTxS = jax.nn.softmax(scores_BxKxGxTxS, axis=-1).astype(v_BxSxKxE.dtype)
    out_BxTxKxGxE = jnp.einsum("bkgts,bske->btkge", probs_BxKxGxTxS, v_BxSxKxE)
    return out_BxTxKxGxE.reshape(b, t, h, e)


def _pad_axis(x: jax.Array, axis: int, size: int, value=0) -> jax.Array:
    extra = size - x.shape[axis]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def blockwise_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS=None, q_offset=0, *,
                        block_size: int = 512) -> jax.Array:
    """Memory-efficient attention (Rabe & Staats 2021; the online softmax of FlashAttention).

    Queries are processed in blocks of `block_size` (a `lax.scan`); inside each, a scan over key
    blocks keeps the running maximum m, normaliser l and weighted sum acc of every query:
        m' = max(m, max_s score),  l' = l·exp(m − m') + Σ_s exp(score − m'),
        acc' = acc·exp(m − m') + Σ_s exp(score − m')·v_s,   output = acc / l.
    Only one Tq x Sk block of scores exists at a time, and both loop bodies are rematerialised
    (`jax.checkpoint`), so the backward pass stores O(T) values instead of the T x S probabilities.
    Key blocks entirely in a query block's future are computed and masked (not skipped). When
    queries and keys each fit in one block (short sequences, one decoded token against a short
    cache) this is exactly the reference computation, which then runs without the loops.
    """
    if block_size < 1:
        raise CatsimError(f"attention block size must be positive, got {block_size}")
    b, t, h, e = q_BxTxHxE.shape
    s, kv_heads = k_BxSxKxE.shape[1], k_BxSxKxE.shape[2]
    if t <= block_size and s <= block_size:
        return reference_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS, q_offset)
    g = h // kv_heads
    tq, sk = min(block_size, t), min(block_size, s)
    nq, nk = -(-t // tq), -(-s // sk)
    scale = 1.0 / math.sqrt(e)
    valid_BxS = jnp.ones((b, s), bool) if valid_BxS is None else valid_BxS.astype(bool)
    # pad to whole blocks: padded keys are invalid, padded queries are dropped at the end
    q = _pad_axis(q_BxTxHxE, 1, nq * tq).reshape(b, nq, tq, kv_heads, g, e)
    q_NqxBxTqxKxGxE = jnp.moveaxis(q, 1, 0)
    k_NkxBxSkxKxE = jnp.moveaxis(_pad_axis(k_BxSxKxE, 1, nk * sk).reshape(b, nk, sk, kv_heads, e), 1, 0)
    v_NkxBxSkxKxE = jnp.moveaxis(_pad_axis(v_BxSxKxE, 1, nk * sk).reshape(b, nk, sk, kv_heads, e), 1, 0)
    valid_NkxBxSk = jnp.moveaxis(_pad_axis(valid_BxS, 1, nk * sk, False).reshape(b, nk, sk), 1, 0)
    q_slot_NqxTq = q_offset + jnp.arange(nq * tq).reshape(nq, tq)
    k_slot_NkxSk = jnp.arange(nk * sk).reshape(nk, sk)

    @jax.checkpoint
    def query_block(q_BxTqxKxGxE, q_slot_Tq):
        def key_step(carry, key_block):
            m_BxKxGxTq, l_BxKxGxTq, acc_BxKxGxTqxE = carry
            k_BxSkxKxE, v_BxSkxKxE, valid_BxSk, k_slot_Sk = key_block
            scores = jnp.einsum("btkge,bske->bkgts", q_BxTqxKxGxE, k_BxSkxKxE,
                                preferred_element_type=jnp.float32) * scale
            allowed_BxTqxSk = ((k_slot_Sk[None, :] <= q_slot_Tq[:, None])[None]
                               & valid_BxSk[:, None, :])
            scores = jnp.where(allowed_BxTqxSk[:, None, None], scores, _MASKED)
            m_new = jnp.maximum(m_BxKxGxTq, jnp.max(scores, axis=-1))
            correction = jnp.exp(m_BxKxGxTq - m_new)
            p = jnp.exp(scores - m_new[..., None])
            l_new = l_BxKxGxTq * correction + jnp.sum(p, axis=-1)
            pv = jnp.einsum("bkgts,bske->bkgte", p.astype(v_BxSkxKxE.dtype), v_BxSkxKxE,
                            preferred_element_type=jnp.float32)
            return (m_new, l_new, acc_BxKxGxTqxE * correction[..., None] + pv), None

        stats = (b, kv_heads, g, tq)
        init = (jnp.full(stats, _MASKED, jnp.float32), jnp.zeros(stats, jnp.float32),
                jnp.zeros((*stats, e), jnp.float32))
        (_, l, acc), _ = jax.lax.scan(
            jax.checkpoint(key_step), init,
            (k_NkxBxSkxKxE, v_NkxBxSkxKxE, valid_NkxBxSk, k_slot_NkxSk))
        out_BxKxGxTqxE = acc / l[..., None]
        return jnp.einsum("bkgte->btkge", out_BxKxGxTqxE).astype(v_BxSxKxE.dtype)

    out_NqxBxTqxKxGxE = jax.lax.map(lambda xs: query_block(*xs), (q_NqxBxTqxKxGxE, q_slot_NqxTq))
    out = jnp.moveaxis(out_NqxBxTqxKxGxE, 0, 1).reshape(b, nq * tq, h, e)
    return out[:, :t]


def dot_product_attention(q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, valid_BxS=None, q_offset=0, *,
                          cudnn: bool = False) -> jax.Array:
    """`jax.nn.dot_product_attention`, XLA's or cuDNN's implementation.

    With q_offset == 0 and T == S (a full forward) the causal mask is the library's own
    (`is_causal`, which cuDNN evaluates without any mask array); padding keys add a B x 1 x T x S
    boolean mask (cuDNN turns it into a bias). A KV-cache step (any other offset) passes the
    causal-and-valid mask B x 1 x T x S, which is B x 1 x 1 x S for one decoded token.
    """
    t, s = q_BxTxHxE.shape[1], k_BxSxKxE.shape[1]
    full = isinstance(q_offset, int) and q_offset == 0 and t == s
    if full:
        mask = None if valid_BxS is None else jnp.broadcast_to(
            valid_BxS.astype(bool)[:, None, None, :], (valid_BxS.shape[0], 1, t, s))
    else:
        mask = _allowed(q_offset + jnp.arange(t), jnp.arange(s), valid_BxS)[:, None]
    out = jax.nn.dot_product_attention(
        q_BxTxHxE, k_BxSxKxE, v_BxSxKxE, mask=mask, is_causal=full,
        implementation="cudnn" if cudnn else "xla")
    return out.astype(v_BxSxKxE.dtype)


def _partial_attention(q_BxTxKxGxE, k_BxSxKxE, v_BxSxKxE, allowed_BxTxS):
    """Softmax attention over one part of the keys: (float32 output B x T x K x G x E normalised
    within the part, float32 log-sum-exp of its scores B x T x K x G). A query with no allowed key
    gets a log-sum-exp near `_MASKED`, so it weighs nothing in `merge_attention`."""
    e = q_BxTxKxGxE.shape[-1]
    scores = jnp.einsum("btkge,bske->btkgs", q_BxTxKxGxE, k_BxSxKxE,
                        preferred_element_type=jnp.float32) / math.sqrt(e)
    scores = jnp.where(allowed_BxTxS[:, :, None, None, :], scores, _MASKED)
    m = jnp.max(scores, axis=-1, keepdims=True)
    p = jnp.exp(scores - m)
    total = jnp.sum(p, axis=-1)
    out = jnp.einsum("btkgs,bske->btkge", p.astype(v_BxSxKxE.dtype), v_BxSxKxE,
                     preferred_element_type=jnp.float32) / total[..., None]
    return out, m[..., 0] + jnp.log(total)


def merge_attention(out_a, lse_a, out_b, lse_b) -> jax.Array:
    """Exact softmax attention over the union of two disjoint key sets from each part's normalised
    output and log-sum-exp (all float32): weights exp(lse_part − lse_union)."""
    lse = jnp.logaddexp(lse_a, lse_b)
    return out_a * jnp.exp(lse_a - lse)[..., None] + out_b * jnp.exp(lse_b - lse)[..., None]


def cascade_attention(q_UxRxTxHxE: jax.Array, prefix_k_UxSxKxE: jax.Array, prefix_v_UxSxKxE: jax.Array,
                      prefix_valid_UxS: jax.Array, gen_k_UxRxNxKxE: jax.Array, gen_v_UxRxNxKxE: jax.Array,
                      gen_valid_UxRxN: jax.Array, gen_offset: int | jax.Array) -> jax.Array:
    """Attention of R rows per shared prefix: U prefixes (prompts) of S slots, each followed, per row,
    by that row's own N generated slots. Query t of row (u, r) sits at generated slot
    `gen_offset + t` and attends to every valid prefix slot of prompt u and to the row's valid
    generated slots <= its own. The prefix part is one batched matmul per prompt over all its
    rows' queries (R·T·G query rows against S keys, read once), the generated part per row; the two
    are merged by `merge_attention`. Returns U x R x T x H x E in the dtype of the values."""
    u, r, t, h, e = q_UxRxTxHxE.shape
    kv_heads, n = prefix_k_UxSxKxE.shape[2], gen_k_UxRxNxKxE.shape[2]
    g = h // kv_heads
    q = q_UxRxTxHxE.reshape(u, r * t, kv_heads, g, e)
    allowed_prefix = jnp.broadcast_to(prefix_valid_UxS.astype(bool)[:, None, :], (u, r * t, prefix_k_UxSxKxE.shape[1]))
    out_p, lse_p = _partial_attention(q, prefix_k_UxSxKxE, prefix_v_UxSxKxE, allowed_prefix)
    out_p, lse_p = out_p.reshape(u * r, t, kv_heads, g, e), lse_p.reshape(u * r, t, kv_heads, g)
    allowed_gen = _allowed(gen_offset + jnp.arange(t), jnp.arange(n), gen_valid_UxRxN.reshape(u * r, n))
    out_g, lse_g = _partial_attention(q.reshape(u * r, t, kv_heads, g, e), gen_k_UxRxNxKxE.reshape(u * r, n, kv_heads, e),
                                      gen_v_UxRxNxKxE.reshape(u * r, n, kv_heads, e), allowed_gen)
    out = merge_attention(out_p, lse_p, out_g, lse_g)
    return out.reshape(u, r, t, h, e).astype(gen_v_UxRxNxKxE.dtype)
