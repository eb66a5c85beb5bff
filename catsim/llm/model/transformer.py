"""Decoder-only transformer (Llama-3, Qwen2/2.5, Qwen3) as pure JAX functions over a dict of arrays.

Shape legend (nanodo style; a tensor's name ends in its shape):
    B batch, T query positions, S key positions (cache slots), D hidden size, F MLP width,
    V vocabulary, H query heads, K key/value heads, G = H / K query heads per KV head,
    E head width, L layers.

Parameters (`init_params`, `checkpoint.load_model`) are a plain pytree; per-layer weights are stacked
along a leading L axis so the blocks run under one `lax.scan` (compile time independent of depth):

    params["embed"]            V x D      token embedding (also the unembedding when tied)
    params["final_norm"]       D          final RMSNorm weight
    params["unembed"]          D x V      only when cfg.tie_word_embeddings is False
    params["layers"][...]:
        attn_norm, mlp_norm    L x D      RMSNorm weights before attention / MLP
        wq                     L x D x HE query projection (HE = H * E)
        wk, wv                 L x D x KE key / value projections (KE = K * E)
        wo                     L x HE x D output projection
        bq / bk, bv            L x HE / L x KE   when cfg.qkv_bias (Qwen2; Llama/Qwen3 attention_bias)
        bo                     L x D      when cfg.o_bias
        q_norm, k_norm         L x E      when cfg.qk_norm (Qwen3)
        w_gate, w_up           L x D x F  SwiGLU: down(silu(x @ gate) * (x @ up))
        w_down                 L x F x D
        b_gate, b_up / b_down  L x F / L x D   when cfg.mlp_bias

Matrices are stored input-major (x @ W), i.e. transposed relative to PyTorch's nn.Linear.

Numerics follow the Hugging Face reference: RMSNorm in float32 then cast, RoPE tables in float32,
attention scores and softmax in float32, logits returned in float32 whatever cfg.dtype is.

Mixed precision: parameters are stored in `cfg.param_dtype` (e.g. float32 master weights) and each
block casts its weights to the compute dtype `cfg.dtype` (e.g. bfloat16) where it uses them, so
activations are in `cfg.dtype` while gradients with respect to the stored parameters come out in
the storage dtype. Attention goes through `catsim.llm.model.attention.attention` with the
implementation `cfg.attention`.

Entry points:
    forward(params, cfg, tokens_BxT, positions_BxT=None, mask_BxT=None) -> logits_BxTxV
    hidden_states(same arguments) -> h_BxTxD; output_logits(params, cfg, h_BxTxD) -> logits_BxTxV
(all three are jitted with the config static; calling them inside another jit simply inlines them)
    init_cache(cfg, batch, max_len) -> KVCache
    forward_cached(params, cfg, tokens_BxT, positions_BxT, mask_BxT, cache) -> (logits, cache)

Decode building blocks (public: `forward_cached`, `model.cascade.decode_step` and the rollout
engines are written with them; `layer` is one layer's weights cast to the compute dtype):
    embed(params, cfg, tokens_BxT) -> x_BxTxD
    apply_layers(block, carry, params["layers"], *per_layer_xs) -> carry   (scan, or split layers)
        per block: qkv(cfg, layer, x_BxTxD, cos_BxTxE, sin_BxTxE) -> (q_BxTxHxE, k_BxTxKxE, v_BxTxKxE)
                   write_kv(...) into a cache, any attention, then
                   attn_out_and_mlp(cfg, layer, x_BxTxD, attn_BxTxHxE) -> x_BxTxD
    final_logits(params, cfg, x_BxTxD) -> float32 logits_BxTxV   (= output_logits(final_norm(x)))
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.llm.model.attention import attention
from catsim.llm.model.config import ModelConfig

Params = dict[str, Any]


def param_shapes(cfg: ModelConfig) -> Params:
    """The shape of every parameter, as a pytree mirroring `init_params(cfg, key)`."""
    d, f, v, e, n = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.head_dim, cfg.num_layers
    he, ke = cfg.num_heads * e, cfg.num_kv_heads * e
    layers: dict[str, tuple[int, ...]] = {
        "attn_norm": (n, d), "wq": (n, d, he), "wk": (n, d, ke), "wv": (n, d, ke), "wo": (n, he, d),
        "mlp_norm": (n, d), "w_gate": (n, d, f), "w_up": (n, d, f), "w_down": (n, f, d),
    }
    if cfg.qkv_bias:
        layers.update(bq=(n, he), bk=(n, ke), bv=(n, ke))
    if cfg.o_bias:
        layers["bo"] = (n, d)
    if cfg.qk_norm:
        layers.update(q_norm=(n, e), k_norm=(n, e))
    if cfg.mlp_bias:
        layers.update(b_gate=(n, f), b_up=(n, f), b_down=(n, d))
    shapes: Params = {"embed": (v, d), "layers": layers, "final_norm": (d,)}
    if not cfg.tie_word_embeddings:
        shapes["unembed"] = (d, v)
    return shapes


@functools.partial(jax.jit, static_argnames=("cfg", "init_std"))
def init_params(cfg: ModelConfig, key: jax.Array, init_std: float = 0.02) -> Params:
    """Random parameters as Hugging Face initialises them: N(0, init_std) matrices, unit norms,
    zero biases; dtype `cfg.param_dtype`. Meant for small models trained from scratch and tests:
    the noise for all matrices is drawn at once (float32), so peak memory is about twice the
    model's size."""
    dtype = jnp.dtype(cfg.param_dtype)
    shapes = param_shapes(cfg)
    flat, treedef = jax.tree.flatten_with_path(shapes, is_leaf=lambda x: isinstance(x, tuple))
    # One normal draw sliced into matrices: a single PRNG call compiles far faster than one per leaf.
    sizes = [math.prod(shape) for _, shape in flat]
    noise = init_std * jax.random.normal(key, (sum(sizes),), jnp.float32)
    leaves, offset = [], 0
    for (path, shape), size in zip(flat, sizes):
        name = path[-1].key
        if "norm" in name:
            leaves.append(jnp.ones(shape, dtype))
        elif name.startswith("b"):
            leaves.append(jnp.zeros(shape, dtype))
        else:
            leaves.append(noise[offset:offset + size].reshape(shape).astype(dtype))
        offset += size
    return jax.tree.unflatten(treedef, leaves)


def rms_norm(x_BxTxD: jax.Array, weight_D: jax.Array, eps: float) -> jax.Array:
    """y = w * x / sqrt(mean(x^2) + eps), normalised in float32 then cast back (as HF does)."""
    x32 = x_BxTxD.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight_D * normed.astype(x_BxTxD.dtype)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """Inverse frequencies theta^(-2i/E), i < E/2, with optional linear or Llama-3.1 scaling.

    Computed in float32 with NumPy exactly as `transformers.modeling_rope_utils` does it.
    """
    e = cfg.head_dim
    exponent = np.arange(0, e, 2, dtype=np.int64).astype(np.float32) / np.float32(e)
    inv_freq = (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exponent)).astype(np.float32)
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return (inv_freq / np.float32(scaling.factor)).astype(np.float32)
    if scaling.rope_type != "llama3":
        raise CatsimError(f"unsupported rope scaling {scaling.rope_type!r}")
    factor, lo, hi = scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor
    old_len = scaling.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_len / lo, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / hi) & ~(wavelen > old_len / lo)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_tables(cfg: ModelConfig, positions_BxT: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables, each B x T x E (the E/2 frequencies repeated twice), float32."""
    inv_freq = jnp.asarray(rope_inv_freq(cfg))
    angles_BxTxE2 = positions_BxT.astype(jnp.float32)[..., None] * inv_freq
    angles_BxTxE = jnp.concatenate([angles_BxTxE2, angles_BxTxE2], axis=-1)
    return jnp.cos(angles_BxTxE), jnp.sin(angles_BxTxE)


def apply_rope(x_BxTxNxE: jax.Array, cos_BxTxE: jax.Array, sin_BxTxE: jax.Array) -> jax.Array:
    """Rotary embedding, "rotate half" convention (HF Llama/Qwen): x cos + rot(x) sin."""
    cos = cos_BxTxE[:, :, None, :].astype(x_BxTxNxE.dtype)
    sin = sin_BxTxE[:, :, None, :].astype(x_BxTxNxE.dtype)
    half = x_BxTxNxE.shape[-1] // 2
    rotated = jnp.concatenate([-x_BxTxNxE[..., half:], x_BxTxNxE[..., :half]], axis=-1)
    return x_BxTxNxE * cos + rotated * sin


def _linear(x: jax.Array, w: jax.Array, b: jax.Array | None) -> jax.Array:
    # as one 2-D matmul over all positions: XLA's CPU backend emits the weight gradient of a
    # B x T x D @ D x F product several times slower than that of (B·T) x D @ D x F
    y = (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[-1])
    return y if b is None else y + b


def qkv(cfg: ModelConfig, layer: Params, x_BxTxD: jax.Array, cos_BxTxE: jax.Array,
        sin_BxTxE: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A block's first half: the residual stream x_BxTxD normalised (attention RMSNorm) and
    projected to rotated queries q_BxTxHxE, rotated keys k_BxTxKxE and values v_BxTxKxE.
    `layer`: one layer's weights in the compute dtype; cos/sin: `rope_tables` of the positions."""
    b, t, _ = x_BxTxD.shape
    e = cfg.head_dim
    h_BxTxD = rms_norm(x_BxTxD, layer["attn_norm"], cfg.rms_norm_eps)
    q_BxTxHxE = _linear(h_BxTxD, layer["wq"], layer.get("bq")).reshape(b, t, cfg.num_heads, e)
    k_BxTxKxE = _linear(h_BxTxD, layer["wk"], layer.get("bk")).reshape(b, t, cfg.num_kv_heads, e)
    v_BxTxKxE = _linear(h_BxTxD, layer["wv"], layer.get("bv")).reshape(b, t, cfg.num_kv_heads, e)
    if cfg.qk_norm:
        q_BxTxHxE = rms_norm(q_BxTxHxE, layer["q_norm"], cfg.rms_norm_eps)
        k_BxTxKxE = rms_norm(k_BxTxKxE, layer["k_norm"], cfg.rms_norm_eps)
    return (apply_rope(q_BxTxHxE, cos_BxTxE, sin_BxTxE), apply_rope(k_BxTxKxE, cos_BxTxE, sin_BxTxE),
            v_BxTxKxE)


def attn_out_and_mlp(cfg: ModelConfig, layer: Params, x_BxTxD: jax.Array,
                     attn_BxTxHxE: jax.Array, mlp=None) -> jax.Array:
    """A block's second half: the residual stream x_BxTxD plus the output projection of the
    attention result attn_BxTxHxE, then plus the SwiGLU MLP of its RMSNorm (`mlp(h)`; default the
    layer's own weights, cast to the compute dtype). Returns the block's output B x T x D."""
    b, t, _ = x_BxTxD.shape
    x_BxTxD = x_BxTxD + _linear(attn_BxTxHxE.reshape(b, t, -1), layer["wo"], layer.get("bo"))
    h_BxTxD = rms_norm(x_BxTxD, layer["mlp_norm"], cfg.rms_norm_eps)
    return x_BxTxD + (mlp or functools.partial(_mlp, cfg, layer))(h_BxTxD)


def _mlp(cfg: ModelConfig, layer: Params, h_BxTxD: jax.Array) -> jax.Array:
    """SwiGLU: down(silu(h @ gate) * (h @ up)), the weights cast to the compute dtype."""
    layer = cast_params({k: layer[k] for k in _MLP_WEIGHTS if k in layer}, cfg.dtype)
    gate_BxTxF = _linear(h_BxTxD, layer["w_gate"], layer.get("b_gate"))
    up_BxTxF = _linear(h_BxTxD, layer["w_up"], layer.get("b_up"))
    return _linear(jax.nn.silu(gate_BxTxF) * up_BxTxF, layer["w_down"], layer.get("b_down"))


_MLP_WEIGHTS = ("w_gate", "w_up", "w_down", "b_gate", "b_up", "b_down")

# Under remat the MLP runs over tiles of positions of at most this many B x positions x F elements
# (`_tiled_mlp`), so that its B x T x F activations and their gradients, the largest arrays of a
# block's backward pass at long sequences, exist one tile at a time.
MLP_TILE_ELEMENTS = 1 << 24


def _tiled_mlp(cfg: ModelConfig, layer: Params, h_BxTxD: jax.Array) -> jax.Array:
    """`_mlp` applied to tiles of consecutive positions (all B rows each, so a batch-sharded h
    stays sharded) in turn, each tile recomputed in the backward pass (`jax.checkpoint`; the tiled
    MLP of long-sequence training, ALST: Bekman et al. 2025). `layer` holds the weights in their
    storage dtype: each tile casts them itself, so their gradients are summed over the tiles in
    that dtype (float32 masters: float32 sums)."""
    b, t, d = h_BxTxD.shape
    n = min(t, -(-b * t * cfg.intermediate_size // MLP_TILE_ELEMENTS))
    if n <= 1:
        return _mlp(cfg, layer, h_BxTxD)
    c = -(-t // n)
    n = -(-t // c)
    h_NxBxCxD = jnp.moveaxis(jnp.pad(h_BxTxD, ((0, 0), (0, n * c - t), (0, 0))).reshape(b, n, c, d), 1, 0)
    weights = {k: layer[k] for k in _MLP_WEIGHTS if k in layer}
    out_NxBxCxD = jax.lax.map(jax.checkpoint(functools.partial(_mlp, cfg, weights)), h_NxBxCxD)
    return jnp.moveaxis(out_NxBxCxD, 0, 1).reshape(b, n * c, d)[:, :t]


def embed(params: Params, cfg: ModelConfig, tokens_BxT: jax.Array) -> jax.Array:
    """The residual stream's input: token embeddings B x T x D in the compute dtype."""
    return jnp.take(params["embed"], tokens_BxT, axis=0).astype(cfg.dtype)


def final_norm(params: Params, cfg: ModelConfig, x_BxTxD: jax.Array) -> jax.Array:
    """The final RMSNorm of the last block's output: the hidden states (`hidden_states`)."""
    return rms_norm(x_BxTxD, params["final_norm"].astype(cfg.dtype), cfg.rms_norm_eps)


def final_logits(params: Params, cfg: ModelConfig, x_BxTxD: jax.Array) -> jax.Array:
    """Float32 logits B x T x V of the last block's output: `output_logits` of `final_norm`."""
    return output_logits(params, cfg, final_norm(params, cfg, x_BxTxD))


def apply_layers(block, carry: Any, layers: Params | list, *per_layer: jax.Array, unroll: int | bool = 1) -> Any:
    """`carry = block(carry, (layer, *xs, i))[0]` for each layer i in turn, where `xs` are the
    i-th entries (leading axis L) of `per_layer`: a `lax.scan` over stacked L x ... weights, or
    straight-line code over the per-layer dicts of `split_layers`. The decode loops of
    `forward_cached` and `catsim.llm.model.cascade.decode_step`; `block` returns (carry, None)."""
    if isinstance(layers, (list, tuple)):  # `split_layers`: one block per layer
        for i, layer in enumerate(layers):
            carry, _ = block(carry, (layer, *(x[i] for x in per_layer), i))
        return carry
    return jax.lax.scan(block, carry, (layers, *per_layer, jnp.arange(jax.tree.leaves(layers)[0].shape[0])),
                        unroll=unroll)[0]


def _check_tokens(tokens_BxT: jax.Array) -> None:
    if tokens_BxT.ndim != 2:
        raise CatsimError(f"tokens must be a B x T array of ids, got shape {tokens_BxT.shape}")


def default_positions(mask_BxT: jax.Array) -> jax.Array:
    """Position ids that skip padding: position of a real token = number of real tokens before it."""
    return jnp.maximum(jnp.cumsum(mask_BxT.astype(jnp.int32), axis=1) - 1, 0)


@functools.partial(jax.jit, static_argnames=("cfg", "activation_sharding"))
def forward(params: Params, cfg: ModelConfig, tokens_BxT: jax.Array,
            positions_BxT: jax.Array | None = None, mask_BxT: jax.Array | None = None,
            *, activation_sharding: Any = None) -> jax.Array:
    """Causal language-model logits, float32 B x T x V: `output_logits` of `hidden_states` (same
    arguments)."""
    h_BxTxD = hidden_states(params, cfg, tokens_BxT, positions_BxT, mask_BxT,
                            activation_sharding=activation_sharding)
    return output_logits(params, cfg, h_BxTxD)


def output_projection(params: Params, cfg: ModelConfig) -> tuple[jax.Array, int]:
    """(weight, its vocabulary axis) of the output projection: the tied embedding V x D (axis 0)
    or `unembed` D x V (axis 1), in its storage dtype."""
    if cfg.tie_word_embeddings:
        return params["embed"], 0
    return params["unembed"], 1


def output_logits(params: Params, cfg: ModelConfig, h_BxTxD: jax.Array) -> jax.Array:
    """Float32 logits B x T x V of final hidden states (`hidden_states`): the output projection
    (`output_projection`). Callers that must not hold B x T x V at once apply it to slices of the
    positions (`catsim.llm.scoring`)."""
    w, vocab_axis = output_projection(params, cfg)  # cast to the compute dtype (float32 masters under bf16)
    return jnp.einsum("btd,vd->btv" if vocab_axis == 0 else "btd,dv->btv", h_BxTxD, w.astype(cfg.dtype),
                      preferred_element_type=jnp.float32)


def hidden_states(params: Params, cfg: ModelConfig, tokens_BxT: jax.Array,
                  positions_BxT: jax.Array | None = None, mask_BxT: jax.Array | None = None,
                  *, activation_sharding: Any = None) -> jax.Array:
    """Final hidden states B x T x D (after the final RMSNorm, dtype cfg.dtype), before the output
    projection.

    tokens_BxT: int token ids. mask_BxT: 1 for real tokens, 0 for padding (padding may sit
    anywhere, e.g. on the left of prompts); padded keys are never attended to and logits at padded
    queries are meaningless. positions_BxT: RoPE positions; default counts real tokens only
    (`default_positions`). activation_sharding: optional `NamedSharding` for the B x T x D residual
    stream (see `catsim.llm.model.sharding`).
    """
    _check_tokens(tokens_BxT)
    b, t = tokens_BxT.shape
    valid_BxT = None if mask_BxT is None else mask_BxT.astype(bool)
    if positions_BxT is None:
        positions_BxT = default_positions(jnp.ones((b, t), bool) if valid_BxT is None else valid_BxT)
    cos_BxTxE, sin_BxTxE = rope_tables(cfg, positions_BxT)

    def constrain(x):
        return x if activation_sharding is None else jax.lax.with_sharding_constraint(
            x, activation_sharding)

    def block(x_BxTxD, stored, tables):
        cos_BxTxE, sin_BxTxE, valid_BxT = tables
        layer = cast_params(stored, cfg.dtype)
        q_BxTxHxE, k_BxTxKxE, v_BxTxKxE = qkv(cfg, layer, x_BxTxD, cos_BxTxE, sin_BxTxE)
        attn_BxTxHxE = attention(q_BxTxHxE, k_BxTxKxE, v_BxTxKxE, valid_BxT,
                                 implementation=cfg.attention, block_size=cfg.attention_block)
        mlp = functools.partial(_tiled_mlp, cfg, stored) if cfg.remat else None
        return constrain(attn_out_and_mlp(cfg, layer, x_BxTxD, attn_BxTxHxE, mlp))

    x_BxTxD = constrain(embed(params, cfg, tokens_BxT))
    tables = (cos_BxTxE, sin_BxTxE, valid_BxT)
    if cfg.remat:
        x_BxTxD = remat_scan(block, x_BxTxD, params["layers"], tables)
    else:
        x_BxTxD, _ = jax.lax.scan(lambda x, layer: (block(x, layer, tables), None), x_BxTxD, params["layers"])
    return final_norm(params, cfg, x_BxTxD)


def remat_scan(block, x_BxTxD: jax.Array, layers: Params, consts: Any) -> jax.Array:
    """`block(x, layer, consts) -> x` applied for each layer of the stacked `layers` in turn (a
    `lax.scan`), differentiated by recomputing each block from its input in the backward pass —
    what `jax.checkpoint` of the block does — with the L saved inputs kept as raw bits.

    Why the bits: XLA's CPU compiler runs dynamic slices of bfloat16 arrays in float32, so the
    saved bf16 residual stream of all layers (L x B x T x D) would be held converted to float32,
    twice its size; the same bytes seen as uint16 are sliced as they are (an accelerator sees no
    difference). `consts` (arrays every block reads, no gradient flows to them) and `block` must
    not close over traced arrays.
    """
    return _remat_scan(block, x_BxTxD, layers, consts)


def _as_bits(x: jax.Array) -> jax.Array:
    half = jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize == 2
    return jax.lax.bitcast_convert_type(x, jnp.uint16) if half else x


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _remat_scan(block, x_BxTxD, layers, consts):
    return jax.lax.scan(lambda x, layer: (block(x, layer, consts), None), x_BxTxD, layers)[0]


def _remat_scan_fwd(block, x_BxTxD, layers, consts):
    x_out, saved_L = jax.lax.scan(lambda x, layer: (block(x, layer, consts), _as_bits(x)), x_BxTxD, layers)
    return x_out, (saved_L, layers, consts)


def _remat_scan_bwd(block, residuals, g_BxTxD):
    saved_L, layers, consts = residuals

    def step(g, saved_and_layer):
        saved, layer = saved_and_layer
        x = saved if saved.dtype == g.dtype else jax.lax.bitcast_convert_type(saved, g.dtype)
        _, vjp = jax.vjp(lambda x, layer: block(x, layer, consts), x, layer)
        g_x, g_layer = vjp(g)
        return g_x, g_layer

    g_x, g_layers = jax.lax.scan(step, g_BxTxD, (saved_L, layers), reverse=True)
    return g_x, g_layers, None


_remat_scan.defvjp(_remat_scan_fwd, _remat_scan_bwd)


class KVCache(NamedTuple):
    """Keys/values of all layers for S cache slots, filled left to right.

    k_LxBxSxKxE, v_LxBxSxKxE: rotated keys and values. valid_BxS: slot holds a real (non-padding)
    token. index: int32 scalar, the next slot to write (slots >= index are empty).
    """

    k_LxBxSxKxE: jax.Array
    v_LxBxSxKxE: jax.Array
    valid_BxS: jax.Array
    index: jax.Array


def init_cache(cfg: ModelConfig, batch: int, max_len: int) -> KVCache:
    """An empty cache for `batch` sequences of at most `max_len` tokens (prompt + generation)."""
    shape = (cfg.num_layers, batch, max_len, cfg.num_kv_heads, cfg.head_dim)
    return KVCache(jnp.zeros(shape, cfg.dtype), jnp.zeros(shape, cfg.dtype),
                   jnp.zeros((batch, max_len), bool), jnp.zeros((), jnp.int32))


def write_kv(k_LxBxSxKxE: jax.Array, v_LxBxSxKxE: jax.Array, k_BxTxKxE: jax.Array, v_BxTxKxE: jax.Array,
             layer: int | jax.Array, slot: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The caches with layer `layer`'s T new keys/values written at slots [slot, slot + T) (in place
    when the caches are a loop carry)."""
    at = (layer, 0, slot, 0, 0)
    return (jax.lax.dynamic_update_slice(k_LxBxSxKxE, k_BxTxKxE.astype(k_LxBxSxKxE.dtype)[None], at),
            jax.lax.dynamic_update_slice(v_LxBxSxKxE, v_BxTxKxE.astype(v_LxBxSxKxE.dtype)[None], at))


@functools.partial(jax.jit, static_argnames=("cfg", "last_only", "hidden", "unroll", "activation_sharding"))
def forward_cached(params: Params, cfg: ModelConfig, tokens_BxT: jax.Array, positions_BxT: jax.Array,
                   mask_BxT: jax.Array, cache: KVCache, *, last_only: bool = False, hidden: bool = False,
                   unroll: int | bool = 1, activation_sharding: Any = None) -> tuple[jax.Array, KVCache]:
    """Run T new tokens per sequence against the cache; write their keys/values into slots
    [cache.index, cache.index + T). Use it for the prefill (T = prompt length) and for each decode
    step (T = 1). Query slot i attends to filled, valid slots <= i.

    Returns (logits float32, B x T x V — or B x 1 x V for the last position when `last_only`;
    the updated cache). hidden: the final hidden states B x T x D (`hidden_states`) instead of
    the logits. unroll: `lax.scan`'s unroll of the layer loop (True: straight-line code, which
    spares a small model's backward pass the stacking of per-layer residuals; compile time grows
    with depth). The caller must keep cache.index + T <= S.
    """
    _check_tokens(tokens_BxT)
    t = tokens_BxT.shape[1]
    start = cache.index
    valid_BxS = jax.lax.dynamic_update_slice(cache.valid_BxS, mask_BxT.astype(bool), (0, start))
    cos_BxTxE, sin_BxTxE = rope_tables(cfg, positions_BxT)

    def constrain(x):
        return x if activation_sharding is None else jax.lax.with_sharding_constraint(
            x, activation_sharding)

    # The whole cache rides in the scan carry and each layer writes its new keys/values in place
    # (dynamic_update_slice on a loop carry), so a decode step reads the cache once and copies
    # nothing else.
    def block(carry, layer_and_index):
        x_BxTxD, k_LxBxSxKxE, v_LxBxSxKxE = carry
        layer, i = layer_and_index
        layer = cast_params(layer, cfg.dtype)
        q_BxTxHxE, k_BxTxKxE, v_BxTxKxE = qkv(cfg, layer, x_BxTxD, cos_BxTxE, sin_BxTxE)
        k_LxBxSxKxE, v_LxBxSxKxE = write_kv(k_LxBxSxKxE, v_LxBxSxKxE, k_BxTxKxE, v_BxTxKxE, i, start)
        attn_BxTxHxE = attention(q_BxTxHxE, k_LxBxSxKxE[i], v_LxBxSxKxE[i], valid_BxS, start,
                                 implementation=cfg.attention, block_size=cfg.attention_block)
        x_BxTxD = constrain(attn_out_and_mlp(cfg, layer, x_BxTxD, attn_BxTxHxE))
        return (x_BxTxD, k_LxBxSxKxE, v_LxBxSxKxE), None

    carry = (constrain(embed(params, cfg, tokens_BxT)), cache.k_LxBxSxKxE, cache.v_LxBxSxKxE)
    x_BxTxD, k_LxBxSxKxE, v_LxBxSxKxE = apply_layers(block, carry, params["layers"], unroll=unroll)
    if last_only:
        x_BxTxD = x_BxTxD[:, -1:]
    cache = KVCache(k_LxBxSxKxE, v_LxBxSxKxE, valid_BxS, start + t)
    if hidden:
        return final_norm(params, cfg, x_BxTxD), cache
    return final_logits(params, cfg, x_BxTxD), cache


def split_layers(params: Params, *, release: bool = False) -> Params:
    """`params` with the stacked L x ... layer weights as a list of L per-layer dicts (a copy),
    which `forward_cached` runs as L blocks of straight-line code. XLA's CPU backend copies a
    slice of a stacked weight before the matmul that reads it, in every decode step (a scan's
    dynamic slice and an unrolled static slice alike); separate arrays are read in place.

    Already split parameters are returned as they are. `release` (concrete arrays only, not
    under `jit`): delete each stacked array once its layers are copied out, so that at most one
    weight exists twice at a time; the caller must hold no other reference to them."""
    layers = params["layers"]
    if isinstance(layers, (list, tuple)):
        return params
    leaves, treedef = jax.tree.flatten(layers)
    count = leaves[0].shape[0]
    per_leaf = []
    for leaf in leaves:
        per_leaf.append([leaf[i] for i in range(count)])
        if release:
            leaf.delete()
    return {**params, "layers": [treedef.unflatten([parts[i] for parts in per_leaf]) for i in range(count)]}


def cast_params(params: Params, dtype: str) -> Params:
    """All parameters cast to `dtype` ("float32" or "bfloat16")."""
    return jax.tree.map(lambda p: p.astype(dtype), params)
