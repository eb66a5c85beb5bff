"""Token log-probabilities and entropies of π_τ = softmax(h·wᵀ / τ) over a large vocabulary, in
chunks, with a backward pass of their own.

Shapes: N positions (B·T flattened), D hidden size, V vocabulary, C entries of a chunk.

Autodiff of a chunked loop that closes over the output projection w gives every chunk a full
V x D gradient of w, summed into a carry, and keeps a compute-dtype copy of w for the loop. Here
the backward pass recomputes each chunk's logits from what the forward pass kept per position (the
log-sum-exp and the entropy) and forms ∂z = g_logp·(onehot(y) − p) − g_H·p·(log p + H) itself.
Two ways to cut the logits:

- "vocab": slices of C vocabulary entries for all N positions. The forward pass keeps a running
  max, Σ exp and Σ exp·z per position (an online log-sum-exp, as flash attention does over keys);
  the backward pass writes each slice's rows of ∂w into one buffer (no V x D sum) and accumulates
  ∂h. For a projection that is whole on each device.
- "positions": chunks of C positions against the whole vocabulary; the backward pass accumulates
  ∂w over the chunks. For a projection split over devices along the vocabulary (FSDP): each device
  forms its own columns of every chunk, where slicing the vocabulary would gather the projection.
- "whole" (chosen by itself when N·V fits `WHOLE_LOGITS_ELEMENTS` and no chunk is asked for): the
  N x V logits are formed once and kept as the backward pass's residual, which then forms ∂z from
  them instead of a fourth product of the output projection (1.3 s of a 9.5-s RL step at a
  Qwen2.5-0.5B shape, docs/llm-scale.md), at N·V·4 bytes — what PyTorch keeps too.

A trained entropy adds its term to ∂z; a logged one (`entropy_grad=False`) adds nothing.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from catsim.errors import CatsimError

# Largest logits slice formed at once, in float32 elements (128 MiB).
LOGIT_CHUNK_ELEMENTS = 1 << 25
# Whole logits up to this many float32 elements (1 GiB): formed once and kept for the backward pass
# (as PyTorch keeps them), which then needs no second product of the output projection. Beyond
# it, "vocab" slices (or position chunks) as above.
WHOLE_LOGITS_ELEMENTS = 1 << 28


def chunk_size(rows: int, vocab: int, over: str, budget: int = LOGIT_CHUNK_ELEMENTS) -> int:
    """Entries per chunk of `tempered_logps`: vocabulary entries ("vocab", for `rows` positions)
    or positions ("positions", of the whole vocabulary) fitting `budget` float32 elements (≥ 1)."""
    if over == "vocab":
        return int(min(vocab, max(1, budget // max(rows, 1))))
    return int(min(rows, max(1, budget // max(vocab, 1))))


def tempered_logps(h_BxTxD, w, targets_BxT, temperature=1.0, *, vocab_axis: int = 0, entropy: bool = True,
                   entropy_grad: bool = True, over: str = "vocab", chunk: int | None = None,
                   whole_budget: int = WHOLE_LOGITS_ELEMENTS):
    """(log π_τ(target), entropy of π_τ or None), both B x T float32, of π_τ = softmax(z / τ) with
    logits z = h · wᵀ (w cast to h's dtype, float32 products, as `transformer.output_logits`),
    without forming B x T x V logits.

    w: the output projection, V x D (vocab_axis 0, a tied embedding) or D x V (vocab_axis 1), in
    its storage dtype (float32 masters under bf16 compute: ∂w comes back float32, summed in
    float32). over: "vocab" or "positions" (module docstring); chunk: its entries per chunk
    (default `chunk_size`). With neither `chunk` nor "positions" given, logits of at most
    `whole_budget` float32 elements are formed whole and kept for the backward pass ("whole": one
    product of the output projection fewer, at B·T·V·4 bytes). Gradients flow to h, w and τ;
    `entropy_grad=False` returns the entropy as a value only (logged, not trained: its cotangent is
    taken as zero and the backward pass skips its B·T·V term).
    """
    if over not in ("vocab", "positions"):
        raise CatsimError(f"over must be 'vocab' or 'positions', got {over!r}")
    b, t, d = h_BxTxD.shape
    limit = w.shape[vocab_axis] if over == "vocab" else b * t
    c = min(chunk or chunk_size(b * t, w.shape[vocab_axis], over), limit)
    if over == "vocab" and chunk is None and b * t * w.shape[vocab_axis] <= whole_budget:
        over = "whole"
    temperature = jnp.asarray(temperature, jnp.float32)
    mode = (True if entropy_grad else "value") if entropy else False  # static: how the entropy is returned
    logp_N, ent_N = _tempered_logps(h_BxTxD.reshape(b * t, d), w, targets_BxT.reshape(b * t), temperature,
                                    vocab_axis, c, mode, over)
    return logp_N.reshape(b, t), None if ent_N is None else ent_N.reshape(b, t)


def _logits(h_NxD, w_cast, vocab_axis: int, temperature):
    """z / τ, N x V' float32, for w_cast V' x D (vocab_axis 0) or D x V' (1), in h's dtype."""
    spec = "nd,vd->nv" if vocab_axis == 0 else "nd,dv->nv"
    return jnp.einsum(spec, h_NxD, w_cast, preferred_element_type=jnp.float32) / temperature


def _dlogits(z_NxC, hit_NxC, lse_N, ent_N, g_logp_N, g_ent_N):
    """∂loss/∂z of the columns z: ∂logp_y/∂z = onehot(y) − p; ∂H/∂z = −p (log p + H)."""
    logp_NxC = z_NxC - lse_N[:, None]
    p_NxC = jnp.exp(logp_NxC)
    dz_NxC = g_logp_N[:, None] * (hit_NxC - p_NxC)
    if ent_N is not None:
        dz_NxC = dz_NxC - g_ent_N[:, None] * p_NxC * (logp_NxC + ent_N[:, None])
    return dz_NxC


# ----------------------------------------------------------------------------- vocabulary slices
def _slices(vocab: int, chunk: int):
    """(index i, first column) of each vocabulary slice: slice i starts at min(i·chunk, V − chunk),
    so every slice has `chunk` columns and the last one may overlap its predecessor; its columns
    below i·chunk (already counted) are masked."""
    index = jnp.arange(-(-vocab // chunk), dtype=jnp.int32)
    return index, jnp.minimum(index * chunk, vocab - chunk)


def _vocab_fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy):
    def body(carry, slice_):
        m_N, s_N, u_N, zy_N = carry  # max, Σ exp(z − m), Σ exp(z − m)(z − m), target logit
        i, start = slice_
        w_slice = jax.lax.dynamic_slice_in_dim(w, start, chunk, axis=vocab_axis).astype(h_NxD.dtype)
        z_NxC = _logits(h_NxD, w_slice, vocab_axis, temperature)
        col_C = start + jnp.arange(chunk, dtype=jnp.int32)
        fresh_C = col_C >= i * chunk
        m_new = jnp.maximum(m_N, jnp.max(jnp.where(fresh_C, z_NxC, -jnp.inf), axis=1))
        shift_N = jnp.where(s_N > 0, m_N - m_new, 0.0)  # 0 before the first slice (m = −inf)
        scale_N = jnp.exp(shift_N) * (s_N > 0)
        e_NxC = jnp.where(fresh_C, jnp.exp(z_NxC - m_new[:, None]), 0.0)
        if entropy:
            u_N = scale_N * (u_N + s_N * shift_N) + jnp.sum(e_NxC * (z_NxC - m_new[:, None]), axis=1)
        s_N = s_N * scale_N + jnp.sum(e_NxC, axis=1)
        zy_N = zy_N + jnp.sum(jnp.where((col_C == targets_N[:, None]) & fresh_C, z_NxC, 0.0), axis=1)
        return (m_new, s_N, u_N, zy_N), None

    zeros = jnp.zeros(h_NxD.shape[:1], jnp.float32)
    init = (jnp.full(h_NxD.shape[:1], -jnp.inf, jnp.float32), zeros, zeros, zeros)
    (m_N, s_N, u_N, zy_N), _ = jax.lax.scan(body, init, _slices(w.shape[vocab_axis], chunk))
    log_s_N = jnp.log(s_N)
    lse_N = m_N + log_s_N
    return zy_N - lse_N, lse_N, (log_s_N - u_N / s_N if entropy else None)


def _vocab_bwd(h_NxD, w, targets_N, temperature, lse_N, ent_N, g_logp_N, g_ent_N, vocab_axis, chunk):
    def body(carry, slice_):
        dh_NxD, dw, dtau = carry
        i, start = slice_
        w_slice = jax.lax.dynamic_slice_in_dim(w, start, chunk, axis=vocab_axis).astype(h_NxD.dtype)
        z_NxC = _logits(h_NxD, w_slice, vocab_axis, temperature)
        col_C = start + jnp.arange(chunk, dtype=jnp.int32)
        dz_NxC = _dlogits(z_NxC, col_C == targets_N[:, None], lse_N, ent_N, g_logp_N, g_ent_N)
        dz_NxC = jnp.where(col_C >= i * chunk, dz_NxC, 0.0)
        dtau = dtau - jnp.sum(dz_NxC * z_NxC)  # z = raw / τ: ∂z/∂τ = −z / τ
        dz_NxC = dz_NxC / temperature
        dh_NxD = dh_NxD + jnp.einsum("nc,cd->nd" if vocab_axis == 0 else "nc,dc->nd", dz_NxC, w_slice,
                                     preferred_element_type=jnp.float32)
        dw_slice = jnp.einsum("nc,nd->cd" if vocab_axis == 0 else "nc,nd->dc", dz_NxC, h_NxD,
                              preferred_element_type=jnp.float32)
        before = jax.lax.dynamic_slice_in_dim(dw, start, chunk, axis=vocab_axis)
        dw = jax.lax.dynamic_update_slice_in_dim(dw, (before + dw_slice).astype(dw.dtype), start, vocab_axis)
        return (dh_NxD, dw, dtau), None

    init = (jnp.zeros(h_NxD.shape, jnp.float32), jnp.zeros(w.shape, w.dtype), jnp.zeros((), jnp.float32))
    (dh_NxD, dw, dtau), _ = jax.lax.scan(body, init, _slices(w.shape[vocab_axis], chunk))
    return dh_NxD, dw, dtau


# ----------------------------------------------------------------------------- position chunks
def _rows(a, chunk: int):
    """N x ... -> n x chunk x ..., the last chunk zero-padded."""
    n = -(-a.shape[0] // chunk)
    return jnp.pad(a, [(0, n * chunk - a.shape[0])] + [(0, 0)] * (a.ndim - 1)).reshape(n, chunk, *a.shape[1:])


def _positions_fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy):
    w_cast = w.astype(h_NxD.dtype)

    def body(_, xs):
        h_CxD, y_C = xs
        z_CxV = _logits(h_CxD, w_cast, vocab_axis, temperature)
        lse_C = jax.nn.logsumexp(z_CxV, axis=1)
        zy_C = jnp.take_along_axis(z_CxV, y_C[:, None], axis=1)[:, 0]
        logp_CxV = z_CxV - lse_C[:, None]
        ent_C = -jnp.sum(jnp.exp(logp_CxV) * logp_CxV, axis=1) if entropy else jnp.zeros_like(lse_C)
        return None, (zy_C - lse_C, lse_C, ent_C)

    n = h_NxD.shape[0]
    _, outs = jax.lax.scan(body, None, (_rows(h_NxD, chunk), _rows(targets_N, chunk)))
    logp_N, lse_N, ent_N = (a.reshape(-1)[:n] for a in outs)
    return logp_N, lse_N, (ent_N if entropy else None)


def _positions_bwd(h_NxD, w, targets_N, temperature, lse_N, ent_N, g_logp_N, g_ent_N, vocab_axis, chunk):
    w_cast = w.astype(h_NxD.dtype)
    vocab_V = jnp.arange(w.shape[vocab_axis], dtype=jnp.int32)

    def body(carry, xs):
        dw, dtau = carry
        h_CxD, y_C, lse_C, ent_C, g_logp_C, g_ent_C = xs
        z_CxV = _logits(h_CxD, w_cast, vocab_axis, temperature)
        dz_CxV = _dlogits(z_CxV, vocab_V == y_C[:, None], lse_C, ent_C, g_logp_C, g_ent_C)
        dtau = dtau - jnp.sum(dz_CxV * z_CxV)
        dz_CxV = dz_CxV / temperature
        dh_CxD = jnp.einsum("cv,vd->cd" if vocab_axis == 0 else "cv,dv->cd", dz_CxV, w_cast,
                            preferred_element_type=jnp.float32)
        dw = dw + jnp.einsum("cv,cd->vd" if vocab_axis == 0 else "cv,cd->dv", dz_CxV, h_CxD,
                             preferred_element_type=jnp.float32)
        return (dw, dtau), dh_CxD

    xs = (h_NxD, targets_N, lse_N, ent_N, g_logp_N, g_ent_N)
    xs = tuple(None if a is None else _rows(a, chunk) for a in xs)  # padded rows: zero cotangents
    (dw, dtau), dh = jax.lax.scan(body, (jnp.zeros(w.shape, jnp.float32), jnp.zeros((), jnp.float32)), xs)
    return dh.reshape(-1, h_NxD.shape[1])[:h_NxD.shape[0]], dw.astype(w.dtype), dtau


# ----------------------------------------------------------------------------- whole logits
def _whole_fwd(h_NxD, w, targets_N, temperature, vocab_axis, entropy):
    z_NxV = _logits(h_NxD, w.astype(h_NxD.dtype), vocab_axis, temperature)
    lse_N = jax.nn.logsumexp(z_NxV, axis=1)
    logp_N = jnp.take_along_axis(z_NxV, targets_N[:, None], axis=1)[:, 0] - lse_N
    ent_N = None
    if entropy:
        logp_NxV = z_NxV - lse_N[:, None]
        ent_N = -jnp.sum(jnp.exp(logp_NxV) * logp_NxV, axis=1)
    return logp_N, lse_N, ent_N, z_NxV


def _whole_bwd(h_NxD, w, targets_N, temperature, lse_N, ent_N, g_logp_N, g_ent_N, vocab_axis, z_NxV):
    """∂z of the kept logits at once, then its two products (XLA writes ∂z over the dying z)."""
    w_cast = w.astype(h_NxD.dtype)
    hit_NxV = jnp.arange(z_NxV.shape[1], dtype=jnp.int32) == targets_N[:, None]
    dz_NxV = _dlogits(z_NxV, hit_NxV, lse_N, ent_N, g_logp_N, g_ent_N)
    dtau = -jnp.sum(dz_NxV * z_NxV)
    dz_NxV = dz_NxV / temperature
    dh_NxD = jnp.einsum("nv,vd->nd" if vocab_axis == 0 else "nv,dv->nd", dz_NxV, w_cast,
                        preferred_element_type=jnp.float32)
    dw = jnp.einsum("nv,nd->vd" if vocab_axis == 0 else "nv,nd->dv", dz_NxV, h_NxD,
                    preferred_element_type=jnp.float32)
    return dh_NxD, dw.astype(w.dtype), dtau


# ----------------------------------------------------------------------------- the custom VJP
@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _tempered_logps(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy, over):
    return _tempered_logps_fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy, over)[0]


def _tempered_logps_fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy, over):
    if over == "whole":
        logp_N, lse_N, ent_N, z_NxV = _whole_fwd(h_NxD, w, targets_N, temperature, vocab_axis, entropy)
        return (logp_N, ent_N), (h_NxD, w, targets_N, temperature, lse_N, ent_N, z_NxV)
    fwd = _vocab_fwd if over == "vocab" else _positions_fwd
    logp_N, lse_N, ent_N = fwd(h_NxD, w, targets_N, temperature, vocab_axis, chunk, entropy)
    return (logp_N, ent_N), (h_NxD, w, targets_N, temperature, lse_N, ent_N, None)


def _tempered_logps_bwd(vocab_axis, chunk, entropy, over, residuals, cotangents):
    h_NxD, w, targets_N, temperature, lse_N, ent_N, z_NxV = residuals
    g_logp_N, g_ent_N = cotangents
    if entropy is not True:  # none, or a value only ("value"): no entropy term in ∂z
        ent_N, g_ent_N = None, None
    if over == "whole":
        dh_NxD, dw, dtau = _whole_bwd(h_NxD, w, targets_N, temperature, lse_N, ent_N, g_logp_N, g_ent_N,
                                      vocab_axis, z_NxV)
    else:
        bwd = _vocab_bwd if over == "vocab" else _positions_bwd
        dh_NxD, dw, dtau = bwd(h_NxD, w, targets_N, temperature, lse_N, ent_N, g_logp_N, g_ent_N, vocab_axis,
                               chunk)
    return dh_NxD.astype(h_NxD.dtype), dw, None, (dtau / temperature).astype(temperature.dtype)


_tempered_logps.defvjp(_tempered_logps_fwd, _tempered_logps_bwd)
