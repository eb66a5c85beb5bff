"""Model configuration: a frozen, hashable description of a decoder-only transformer.

`ModelConfig.from_hf_dict` reads a Hugging Face `config.json` of the supported families and
`ModelConfig.to_hf_dict` writes one back that `transformers` loads again:

| `architectures[0]`  | `model_type` | family specifics                                   |
|---------------------|--------------|----------------------------------------------------|
| `LlamaForCausalLM`  | `llama`      | optional q/k/v/o bias (`attention_bias`), `mlp_bias` |
| `Qwen2ForCausalLM`  | `qwen2`      | q/k/v bias always on, no o bias                    |
| `Qwen3ForCausalLM`  | `qwen3`      | RMSNorm on each query/key head (q/k norm)          |

All three share RMSNorm, rotary position embeddings (RoPE, optionally scaled: `linear` or `llama3`),
grouped-query attention and a SwiGLU MLP. Anything else (sliding windows, YaRN, MoE, other
architectures) is rejected with a `CatsimError` rather than silently computed wrongly.

The config is hashable, so it can be a static argument of `jax.jit`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from catsim.errors import CatsimError

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
SUPPORTED_DTYPES = ("float32", "bfloat16")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
ATTENTION_IMPLEMENTATIONS = ("auto", "reference", "blockwise", "dot_product", "cudnn")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling (Hugging Face `rope_scaling` / `rope_parameters`)."""

    rope_type: str  # "linear" (divide all frequencies by factor) or "llama3" (Llama-3.1 smooth band)
    factor: float  # context-extension factor
    low_freq_factor: float = 1.0  # llama3 only: wavelengths above original_max/low_freq_factor are scaled
    high_freq_factor: float = 4.0  # llama3 only: wavelengths below original_max/high_freq_factor are kept
    original_max_position_embeddings: int = 8192  # llama3 only: pre-training context length


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a decoder-only transformer (Llama-3 / Qwen2 / Qwen2.5 / Qwen3)."""

    vocab_size: int  # V: number of token ids
    hidden_size: int  # D: residual stream width
    intermediate_size: int  # F: SwiGLU hidden width
    num_layers: int  # L: transformer blocks
    num_heads: int  # H: query heads
    num_kv_heads: int  # K: key/value heads (grouped-query attention; H % K == 0)
    head_dim: int  # E: width of one head (may differ from D / H, e.g. Qwen3)
    rms_norm_eps: float = 1e-6  # epsilon inside every RMSNorm
    rope_theta: float = 10000.0  # RoPE base wavelength
    rope_scaling: RopeScaling | None = None  # optional RoPE frequency scaling
    qkv_bias: bool = False  # bias on the q/k/v projections (Qwen2: always; Llama/Qwen3: attention_bias)
    o_bias: bool = False  # bias on the output projection (Llama/Qwen3: attention_bias)
    mlp_bias: bool = False  # biases on gate/up/down projections (Llama mlp_bias)
    qk_norm: bool = False  # RMSNorm over each query/key head before RoPE (Qwen3)
    tie_word_embeddings: bool = False  # unembedding is the transposed token embedding
    max_position_embeddings: int = 4096  # longest context the checkpoint claims to support
    architecture: str = "LlamaForCausalLM"  # Hugging Face class name written back on save
    bos_token_id: int | None = None  # begin-of-sequence id from config.json (informational)
    eos_token_ids: tuple[int, ...] = ()  # end-of-sequence ids from config.json (default stop tokens)
    pad_token_id: int | None = None  # padding id from config.json, if any
    dtype: str = "float32"  # compute dtype (activations, matmul inputs): "float32" or "bfloat16"
    remat: bool = False  # recompute each block's activations in the backward pass (transformer.remat_scan)
    weight_dtype: str | None = None  # storage dtype of the parameters; None: the compute dtype
    attention: str = "auto"  # implementation: see catsim.llm.model.attention.IMPLEMENTATIONS
    attention_block: int = 512  # query/key block length of the blockwise implementation

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise CatsimError(f"model config: {name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise CatsimError(
                f"model config: num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise CatsimError(f"model config: head_dim must be even for RoPE, got {self.head_dim}")
        if self.dtype not in SUPPORTED_DTYPES:
            raise CatsimError(f"model config: dtype must be one of {SUPPORTED_DTYPES}, got {self.dtype!r}")
        if self.weight_dtype is not None and self.weight_dtype not in SUPPORTED_DTYPES:
            raise CatsimError(f"model config: weight_dtype must be one of {SUPPORTED_DTYPES}, "
                              f"got {self.weight_dtype!r}")
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise CatsimError(f"model config: attention must be one of {ATTENTION_IMPLEMENTATIONS}, "
                              f"got {self.attention!r}")
        if isinstance(self.attention_block, bool) or not isinstance(self.attention_block, int) \
                or self.attention_block < 1:
            raise CatsimError(f"model config: attention_block must be a positive integer, "
                              f"got {self.attention_block!r}")
        if self.architecture not in SUPPORTED_ARCHITECTURES:
            raise CatsimError(_unsupported_architecture_message(self.architecture))
        if not self.rms_norm_eps > 0 or not self.rope_theta > 0:
            raise CatsimError("model config: rms_norm_eps and rope_theta must be positive")

    @property
    def param_dtype(self) -> str:
        """Dtype the parameters are stored (and optimised) in: `weight_dtype`, else `dtype`."""
        return self.weight_dtype or self.dtype

    @property
    def family(self) -> str:
        """Hugging Face `model_type`: "llama", "qwen2" or "qwen3"."""
        return SUPPORTED_ARCHITECTURES[self.architecture]

    @property
    def num_params(self) -> int:
        """Number of scalar parameters (tied embeddings counted once)."""
        d, f, v, e = self.hidden_size, self.intermediate_size, self.vocab_size, self.head_dim
        q, kv = self.num_heads * e, self.num_kv_heads * e
        per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * f
        per_layer += (q + 2 * kv) * self.qkv_bias + d * self.o_bias + (2 * f + d) * self.mlp_bias
        per_layer += 2 * e * self.qk_norm
        return v * d * (1 if self.tie_word_embeddings else 2) + d + self.num_layers * per_layer

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (e.g. `cfg.replace(dtype="bfloat16", remat=True)`)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ Hugging Face config.json
    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], *, dtype: str | None = None) -> ModelConfig:
        """Parse a Hugging Face `config.json` dict; `dtype=None` keeps the checkpoint's dtype.

        Raises `CatsimError` naming the offending key for unsupported architectures or features,
        and for a size or constant that is not a number.
        """
        _check_numbers(hf)
        archs = hf.get("architectures") or []
        model_type = hf.get("model_type")
        if not archs:
            arch = {v: k for k, v in SUPPORTED_ARCHITECTURES.items()}.get(model_type)
            if arch is None:
                raise CatsimError(
                    f"config.json: no 'architectures' and unsupported model_type {model_type!r}; "
                    f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
        else:
            arch = archs[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise CatsimError(_unsupported_architecture_message(arch))
        if model_type is not None and model_type != SUPPORTED_ARCHITECTURES[arch]:
            raise CatsimError(
                f"config.json: model_type {model_type!r} does not match architecture {arch} "
                f"(expected {SUPPORTED_ARCHITECTURES[arch]!r})")
        family = SUPPORTED_ARCHITECTURES[arch]

        def need(key: str) -> Any:
            if key not in hf or hf[key] is None:
                raise CatsimError(f"config.json: missing required key {key!r}")
            return hf[key]

        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise CatsimError(f"config.json: hidden_act {act!r} is not supported (only 'silu')")
        if hf.get("use_sliding_window"):
            raise CatsimError("config.json: use_sliding_window=true is not supported (full attention only)")
        layer_types = hf.get("layer_types")
        if layer_types and any(t != "full_attention" for t in layer_types):
            raise CatsimError("config.json: layer_types other than 'full_attention' are not supported")
        if hf.get("pretraining_tp", 1) not in (1, None):
            raise CatsimError("config.json: pretraining_tp != 1 is not supported")
        if float(hf.get("partial_rotary_factor", 1.0) or 1.0) != 1.0:
            raise CatsimError("config.json: partial_rotary_factor != 1 is not supported")

        hidden, heads = int(need("hidden_size")), int(need("num_attention_heads"))
        head_dim = hf.get("head_dim") or hidden // heads
        rope_theta, rope_scaling = _parse_rope(hf)
        attention_bias = bool(hf.get("attention_bias", False))
        eos = hf.get("eos_token_id")
        eos_ids = tuple(int(i) for i in (eos if isinstance(eos, list) else [eos] if eos is not None else []))
        if dtype is None:
            dtype = str(hf.get("dtype") or hf.get("torch_dtype") or "float32")
            if dtype not in SUPPORTED_DTYPES:  # e.g. float16 checkpoints: compute in float32
                dtype = "float32"
        return cls(
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(need("intermediate_size")),
            num_layers=int(need("num_hidden_layers")),
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            qkv_bias=True if family == "qwen2" else attention_bias,
            o_bias=False if family == "qwen2" else attention_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)) if family == "llama" else False,
            qk_norm=family == "qwen3",
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
            architecture=arch,
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
            pad_token_id=hf.get("pad_token_id"),
            dtype=dtype,
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """A Hugging Face `config.json` dict that `transformers` (4.x and 5.x) loads as this model."""
        family = self.family
        if family == "qwen2" and (not self.qkv_bias or self.o_bias):
            raise CatsimError("Qwen2 checkpoints always have q/k/v bias and no o bias")
        if family != "llama" and self.mlp_bias:
            raise CatsimError(f"{self.architecture} has no mlp_bias option")
        if family == "llama" and self.qkv_bias != self.o_bias:
            raise CatsimError("Llama's attention_bias sets q/k/v and o biases together")
        if (family == "qwen3") != self.qk_norm:
            raise CatsimError("q/k norm is exactly the Qwen3 architecture")
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling is not None:
            rope = {**dataclasses.asdict(self.rope_scaling), "rope_theta": self.rope_theta}
            if self.rope_scaling.rope_type == "linear":
                rope = {"rope_type": "linear", "factor": self.rope_scaling.factor,
                        "rope_theta": self.rope_theta}
        legacy_scaling = None if self.rope_scaling is None else {
            k: v for k, v in rope.items() if k != "rope_theta"}
        eos: int | list[int] | None = (
            None if not self.eos_token_ids else
            self.eos_token_ids[0] if len(self.eos_token_ids) == 1 else list(self.eos_token_ids))
        hf: dict[str, Any] = {
            "architectures": [self.architecture],
            "model_type": family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": legacy_scaling,
            "rope_parameters": rope,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos,
            "pad_token_id": self.pad_token_id,
            "dtype": self.param_dtype,
            "torch_dtype": self.param_dtype,
            "use_cache": True,
        }
        if family == "llama":
            hf.update(attention_bias=self.qkv_bias, mlp_bias=self.mlp_bias)
        elif family == "qwen3":
            hf.update(attention_bias=self.qkv_bias, use_sliding_window=False)
        else:
            hf.update(use_sliding_window=False)
        return hf

    @classmethod
    def from_json_file(cls, path: str | Path, *, dtype: str | None = None) -> ModelConfig:
        """Read a `config.json` file (see `from_hf_dict`)."""
        path = Path(path)
        if not path.is_file():
            raise CatsimError(f"model config not found: {path}")
        try:
            hf = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise CatsimError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(hf, dict):
            raise CatsimError(f"{path}: expected a JSON object")
        return cls.from_hf_dict(hf, dtype=dtype)


# config.json values read as numbers: whole numbers, and real ones (strings that parse are accepted)
_WHOLE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings")
_REAL_KEYS = ("rms_norm_eps", "rope_theta", "partial_rotary_factor")


def _check_numbers(hf: dict[str, Any]) -> None:
    for key in _WHOLE_KEYS + _REAL_KEYS:
        value = hf.get(key)
        if value is None:
            continue
        try:
            number = None if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            number = None
        whole = key in _WHOLE_KEYS
        if number is None or number != number or (whole and not number.is_integer()):
            raise CatsimError(f"config.json: {key} must be a {'whole number' if whole else 'number'}, "
                              f"got {value!r}")


def _unsupported_architecture_message(arch: Any) -> str:
    return (f"config.json: unsupported architecture {arch!r}; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}")


def _parse_rope(hf: dict[str, Any]) -> tuple[float, RopeScaling | None]:
    """Read RoPE theta and scaling from either the 4.x keys (`rope_theta`, `rope_scaling`) or the
    5.x key (`rope_parameters`)."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        raise CatsimError("config.json: per-layer-type rope_parameters are not supported")
    scaling = params if isinstance(params, dict) else hf.get("rope_scaling")
    theta = hf.get("rope_theta")
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        theta = params["rope_theta"]
    theta = float(theta if theta is not None else 10000.0)
    if not scaling:
        return theta, None
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise CatsimError(
            f"config.json: rope scaling type {rope_type!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)})")
    if rope_type == "default":
        return theta, None
    if "factor" not in scaling:
        raise CatsimError(f"config.json: rope scaling {rope_type!r} needs a 'factor'")
    if rope_type == "linear":
        return theta, RopeScaling("linear", float(scaling["factor"]))
    try:
        return theta, RopeScaling(
            "llama3",
            factor=float(scaling["factor"]),
            low_freq_factor=float(scaling["low_freq_factor"]),
            high_freq_factor=float(scaling["high_freq_factor"]),
            original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        )
    except KeyError as err:
        raise CatsimError(f"config.json: llama3 rope scaling is missing {err.args[0]!r}") from None
