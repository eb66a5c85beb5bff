"""Hugging Face model directories on local disk: load and save, safetensors only (never unpickle).

A model directory holds
    config.json                          architecture and shapes (`ModelConfig.from_hf_dict`)
    model.safetensors                    all weights, or
    model-0000i-of-0000n.safetensors     shards, listed by model.safetensors.index.json
    tokenizer.json, tokenizer_config.json, chat_template.jinja   (optional; see `catsim.llm.model.tokenizer`)

    cfg, params = load_model("path/to/Qwen2.5-0.5B-Instruct", dtype="bfloat16")
    save_model("out/", cfg, params, tokenizer=tok, max_shard_size="2GB")

`save_model` writes the same layout, which `transformers.AutoModelForCausalLM.from_pretrained`
loads back. Weight names follow the Hugging Face Llama/Qwen layout (`model.layers.{i}.self_attn.q_proj
.weight`, ...); see `hf_weight_names`. Every tensor's shape is checked against config.json before it
is read, and every error (missing file, missing or unexpected tensor, wrong shape) is a one-line
`CatsimError` naming the file and the tensor.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np

from catsim.errors import CatsimError
from catsim.files import replacing, write_text
from catsim.llm.model.config import SUPPORTED_DTYPES, ModelConfig
from catsim.llm.model.transformer import Params, param_shapes

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_IGNORED = re.compile(r"(^|\.)rotary_emb\.inv_freq$")

# catsim layer key -> (Hugging Face suffix under model.layers.{i}., transpose?)
_LAYER_NAMES: dict[str, tuple[str, bool]] = {
    "attn_norm": ("input_layernorm.weight", False),
    "wq": ("self_attn.q_proj.weight", True),
    "wk": ("self_attn.k_proj.weight", True),
    "wv": ("self_attn.v_proj.weight", True),
    "wo": ("self_attn.o_proj.weight", True),
    "bq": ("self_attn.q_proj.bias", False),
    "bk": ("self_attn.k_proj.bias", False),
    "bv": ("self_attn.v_proj.bias", False),
    "bo": ("self_attn.o_proj.bias", False),
    "q_norm": ("self_attn.q_norm.weight", False),
    "k_norm": ("self_attn.k_norm.weight", False),
    "mlp_norm": ("post_attention_layernorm.weight", False),
    "w_gate": ("mlp.gate_proj.weight", True),
    "w_up": ("mlp.up_proj.weight", True),
    "w_down": ("mlp.down_proj.weight", True),
    "b_gate": ("mlp.gate_proj.bias", False),
    "b_up": ("mlp.up_proj.bias", False),
    "b_down": ("mlp.down_proj.bias", False),
}
_TOP_NAMES: dict[str, tuple[str, bool]] = {
    "embed": ("model.embed_tokens.weight", False),
    "final_norm": ("model.norm.weight", False),
    "unembed": ("lm_head.weight", True),
}


def _safetensors():
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy, which safetensors needs)
        import safetensors
        import safetensors.numpy
    except ImportError:
        raise CatsimError("reading checkpoints needs the 'llm' extra: pip install 'catsim[llm]'") from None
    return safetensors


@contextlib.contextmanager
def _open_weights(st, path: Path):
    """`safetensors.safe_open` of one weights file; a damaged file (empty, truncated, not
    safetensors at all) is a one-line `CatsimError` naming it, on opening or on reading."""
    try:
        with st.safe_open(str(path), framework="numpy") as handle:
            yield handle
    except st.SafetensorError as err:
        raise CatsimError(f"{path}: not a readable safetensors file ({err})") from None


def _np_dtype(dtype: str) -> np.dtype:
    if dtype == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype)


def hf_weight_names(cfg: ModelConfig) -> Iterator[tuple[str, str, int | None, tuple[int, ...], bool]]:
    """Yield (hf_name, catsim_key, layer index or None, HF shape, transposed?) for every weight."""
    shapes = param_shapes(cfg)
    for key, shape in shapes.items():
        if key == "layers":
            continue
        hf_name, transpose = _TOP_NAMES[key]
        yield hf_name, key, None, tuple(reversed(shape)) if transpose else shape, transpose
    for key, shape in shapes["layers"].items():
        suffix, transpose = _LAYER_NAMES[key]
        one = shape[1:]
        hf_shape = tuple(reversed(one)) if transpose else one
        for i in range(cfg.num_layers):
            yield f"model.layers.{i}.{suffix}", key, i, hf_shape, transpose


def _weight_files(directory: Path) -> dict[str, Path]:
    """Map each tensor name to the safetensors file holding it."""
    single, index = directory / SINGLE_FILE, directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise CatsimError(f"{index}: not a safetensors index ({err})") from None
        files = {name: directory / fname for name, fname in weight_map.items()}
        for path in sorted(set(files.values())):
            if not path.is_file():
                raise CatsimError(f"{index} lists {path.name}, which is missing")
        return files
    if single.is_file():
        st = _safetensors()
        with _open_weights(st, single) as f:
            return {name: single for name in f.keys()}
    pickles = [p.name for p in directory.glob("*.bin")] + [p.name for p in directory.glob("*.pt")]
    hint = f" (found {', '.join(sorted(pickles))}: pickled weights are not loaded, convert them "\
           "to safetensors)" if pickles else ""
    raise CatsimError(f"{directory}: no {SINGLE_FILE} or {INDEX_FILE}{hint}")


_ST_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}
_READ_CHUNK_BYTES = 64 * 2**20  # tensors are read in row blocks of at most this size
# XLA's CPU client takes a host array aligned to this many bytes as the device buffer itself; a
# NumPy array (16-byte aligned) is copied, which doubled the peak while loading an embedding.
_HOST_ALIGNMENT = 64


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data start at a multiple of `_HOST_ALIGNMENT`."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + _HOST_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _HOST_ALIGNMENT
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def _data_offsets(path: Path) -> dict[str, int]:
    """Byte offset of each tensor's data in a safetensors file, from its header (8-byte
    little-endian header length, then the JSON header whose `data_offsets` count from its end).
    The file was opened and checked by `safetensors` before this is read."""
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    return {name: 8 + length + info["data_offsets"][0]
            for name, info in header.items() if name != "__metadata__"}


def load_model(directory: str | Path, *, dtype: str | None = None, mesh: Any = None,
               weight_dtype: str | None = None, donatable: bool = False) -> tuple[ModelConfig, Params]:
    """Load a Hugging Face model directory: returns (ModelConfig, params).

    dtype: compute dtype, "float32" or "bfloat16"; None keeps the checkpoint's (float16 → float32).
    weight_dtype: dtype the parameters are stored in (e.g. "float32" master weights for training
    in bfloat16); None: the compute dtype.
    mesh: optional `jax.sharding.Mesh`; each parameter is placed with the FSDP sharding of
    `catsim.llm.model.sharding.param_shardings`, and each device reads only its own slice.
    donatable: the parameters will be donated to a training update. On the CPU each parameter is
    read into a host buffer that XLA then uses as is (no copy: the load peaks near the model's
    size); XLA cannot reuse such a buffer for a donating update's result, which then needs a
    second copy of the parameters. donatable=True copies each parameter into memory XLA owns
    as it is read (the load then peaks near the model plus its largest tensor).

    Every tensor's name, shape and dtype are checked before any is read. Tensors are then read one
    at a time from the memory-mapped files (`safetensors.safe_open(...).get_slice`), converted and
    placed on their devices, so host memory peaks near one parameter (one stacked L x ... array,
    or one device's slice of it), not the whole model. A model with a NaN or infinite weight is
    refused (`catsim.llm.safeguards.check_model`: one reduction per parameter on its devices).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CatsimError(f"model directory not found: {directory}")
    cfg = ModelConfig.from_json_file(directory / "config.json", dtype=dtype)
    if weight_dtype is not None:
        cfg = cfg.replace(weight_dtype=weight_dtype)
    st = _safetensors()
    files = _weight_files(directory)
    expected = list(hf_weight_names(cfg))
    expected_names = {name for name, *_ in expected}
    tolerated = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    unexpected = sorted(n for n in files if n not in expected_names and n not in tolerated
                        and not _IGNORED.search(n))
    if unexpected:
        more = f" (+{len(unexpected) - 3} more)" if len(unexpected) > 3 else ""
        raise CatsimError(f"{directory}: unexpected tensors for {cfg.architecture}: "
                          f"{', '.join(unexpected[:3])}{more}")
    target = _np_dtype(cfg.param_dtype)
    shapes = param_shapes(cfg)
    if mesh is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: device, shapes, is_leaf=lambda x: isinstance(x, tuple))
    else:
        from catsim.llm.model.sharding import param_shardings

        shardings = param_shardings(cfg, mesh)
    sources: dict[tuple[str, int | None], tuple[Path, str, bool]] = {}
    hf_shapes: dict[str, tuple[int, ...]] = {}  # each tensor's shape in the file
    same_dtype: set[tuple[str, int | None]] = set()  # stored in the target dtype (read as is)
    with contextlib.ExitStack() as stack:  # check every tensor before reading any
        handles: dict[Path, Any] = {}
        for name, key, layer, hf_shape, transpose in expected:
            if name not in files:
                raise CatsimError(f"{directory}: tensor {name} is missing from the checkpoint")
            path = files[name]
            if path not in handles:
                handles[path] = stack.enter_context(_open_weights(st, path))
            if name not in handles[path].keys():
                raise CatsimError(f"{path.name}: tensor {name} is missing (the index says it is here)")
            view = handles[path].get_slice(name)
            shape = tuple(view.get_shape())
            if shape != hf_shape:
                raise CatsimError(f"{path.name}: tensor {name} has shape {list(shape)}, "
                                  f"config.json implies {list(hf_shape)}")
            if view.get_dtype() not in _ST_DTYPES:
                raise CatsimError(f"{path.name}: tensor {name} has non-float dtype {view.get_dtype()}")
            sources[key, layer] = path, name, transpose
            hf_shapes[key] = shape
            if _np_dtype(_ST_DTYPES[view.get_dtype()]) == target:
                same_dtype.add((key, layer))
    offsets: dict[str, int] = {}  # data offset of each tensor in its file (safetensors is little-endian)
    if sys.byteorder == "little":
        for path in sorted(set(files.values())):
            offsets.update(_data_offsets(path))

    def read_into(out: np.ndarray, key: str, layer: int | None, index: tuple[slice, ...]) -> None:
        """Copy the catsim-layout block `index` of one (unstacked) tensor into `out`. A block of
        whole rows stored in the target dtype and not transposed (the embedding, norms, biases)
        is read from the file straight into `out`. Others are transposed and converted in the
        same pass, in row blocks of at most `_READ_CHUNK_BYTES`; the file is mapped only while
        one block is read, so neither the file's pages nor a full-size temporary add to the
        process's memory beyond one block."""
        path, name, transpose = sources[key, layer]
        hf_index = (index[1], index[0]) if transpose else tuple(index)
        hf_out = out.T if transpose else out
        rows = hf_out.shape[0]
        first = hf_index[0].indices(hf_shapes[key][0])[0]
        whole_rows = all(sl.indices(n)[:2] == (0, n) for sl, n in zip(hf_index[1:], hf_shapes[key][1:]))
        if not transpose and (key, layer) in same_dtype and whole_rows and name in offsets:
            # rows first .. first + rows of the file, straight into `out`: one copy, no temporary
            begin = offsets[name] + first * hf_out[:1].nbytes
            with open(path, "rb") as f:
                f.seek(begin)
                if f.readinto(memoryview(hf_out.reshape(-1).view(np.uint8))) != hf_out.nbytes:
                    raise CatsimError(f"{path.name}: tensor {name} is truncated")
            return
        step = max(1, _READ_CHUNK_BYTES // max(1, hf_out[:1].nbytes))  # bounded temporaries
        for r in range(0, rows, step):
            chunk = (slice(first + r, first + min(r + step, rows)), *hf_index[1:])
            with _open_weights(st, path) as handle:  # unmapped after each block
                np.copyto(hf_out[r:r + step], handle.get_slice(name)[chunk], casting="unsafe")

    def build(key: str, stacked: bool) -> jax.Array:
        shape = shapes["layers"][key] if stacked else shapes[key]
        sharding = shardings["layers"][key] if stacked else shardings[key]
        blocks: dict[tuple, np.ndarray] = {}  # one read per distinct slice (replicas share it)

        def callback(index: tuple[slice, ...]) -> np.ndarray:
            bounds = tuple(sl.indices(n)[:2] for sl, n in zip(index, shape))
            if bounds not in blocks:
                out = _aligned_empty(tuple(b - a for a, b in bounds), target)
                if not stacked:
                    read_into(out, key, None, index)
                else:
                    for j, layer in enumerate(range(*bounds[0])):
                        read_into(out[j], key, layer, index[1:])
                blocks[bounds] = out
            return blocks[bounds]

        array = jax.make_array_from_callback(shape, sharding, callback)
        return jax.device_put(array, sharding, may_alias=False) if donatable else array

    params: Params = {key: build(key, False) for key in shapes if key != "layers"}
    params["layers"] = {key: build(key, True) for key in shapes["layers"]}
    from catsim.llm.safeguards import check_model

    check_model(params, directory)  # NaN weights would give wrong numbers, not an error
    return cfg, params


def _parse_size(size: int | str) -> int:
    if isinstance(size, int):
        value = size
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*", size, re.IGNORECASE)
        if not match:
            raise CatsimError(f"max_shard_size: expected bytes or e.g. '500MB', got {size!r}")
        unit = (match.group(2) or "B").upper()
        scale = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
                 "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}[unit]
        value = int(float(match.group(1)) * scale)
    if value < 1:
        raise CatsimError(f"max_shard_size must be positive, got {size!r}")
    return value


def save_model(directory: str | Path, cfg: ModelConfig, params: Params, tokenizer: Any = None,
               *, max_shard_size: int | str = "5GB", dtype: str | None = None) -> Path:
    """Write a Hugging Face model directory (config.json + safetensors, sharded with an index when
    the weights exceed `max_shard_size`), plus the tokenizer files when `tokenizer` is given
    (a `catsim.llm.model.tokenizer.Tokenizer`). Weights are written in `dtype` ("float32" or
    "bfloat16"; default: the storage dtype `cfg.param_dtype`, so float32 master weights are saved
    losslessly unless `dtype="bfloat16"` asks for half the size). Returns the directory.
    """
    dtype = dtype or cfg.param_dtype
    if dtype not in SUPPORTED_DTYPES:
        raise CatsimError(f"save_model: dtype must be one of {SUPPORTED_DTYPES}, got {dtype!r}")
    cfg = cfg.replace(dtype=dtype, weight_dtype=None)  # what config.json describes: the files
    st = _safetensors()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    limit = _parse_size(max_shard_size)
    expected_shapes = param_shapes(cfg)
    got_shapes = jax.tree.map(lambda p: tuple(p.shape), params)
    if got_shapes != expected_shapes:
        raise CatsimError("save_model: params do not match the config's shapes")
    host = jax.device_get(params)
    dtype = _np_dtype(cfg.dtype)
    tensors: dict[str, np.ndarray] = {}
    for name, key, layer, _, transpose in hf_weight_names(cfg):
        array = np.asarray(host[key] if layer is None else host["layers"][key][layer])
        tensors[name] = np.ascontiguousarray((array.T if transpose else array).astype(dtype))

    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, array in tensors.items():
        if shards[-1] and size + array.nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = array
        size += array.nbytes
    metadata = {"format": "pt"}
    written = []
    if len(shards) == 1:
        written.append(_save_weights(st, shards[0], directory / SINGLE_FILE, metadata))
    else:
        weight_map = {}
        for i, shard in enumerate(shards, start=1):
            fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            written.append(_save_weights(st, shard, directory / fname, metadata))
            weight_map.update({name: fname for name in shard})
        total = sum(a.nbytes for a in tensors.values())
        written.append(write_text(directory / INDEX_FILE, json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n"))
    write_text(directory / "config.json", json.dumps(cfg.to_hf_dict(), indent=2) + "\n")
    for stale in list(directory.glob("model*.safetensors")) + [directory / INDEX_FILE]:
        if stale not in written:  # another layout's files, removed once the new ones are in place
            stale.unlink(missing_ok=True)
    if tokenizer is not None:
        tokenizer.save(directory)
    return directory


def _save_weights(st, tensors: dict[str, np.ndarray], path: Path, metadata: dict[str, str]) -> Path:
    """`safetensors.numpy.save_file` to a temporary file renamed into place, with the permissions
    any other file of the directory gets (safetensors creates its files 0600, which hides a
    shared model from the other users)."""
    with replacing(path) as tmp:
        st.numpy.save_file(tensors, str(tmp), metadata=metadata)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    return path
