"""Will an RL run fit? The memory of the real RL training step, from its compiled program.

`plan_rl_step` builds the RL step exactly as `catsim llm rl` does (`catsim.llm.rl.step.make_functions`)
and compiles it ahead of time on abstract arrays (`jax.ShapeDtypeStruct`s with the run's shardings;
no weights are read or allocated):

- the token log-prob pass (behaviour policy, and the reference policy when one is kept), and
- the update: gradient of the policy loss (micro-batched as configured) and the optimizer step.

XLA's memory analysis of each compiled program gives its arguments, outputs, aliased (donated)
buffers and temporaries per device; what stays resident between them (parameters, optimizer state,
reference parameters) comes from the abstract arrays' shards. Peak per device:

    logp pass:  resident + batch in + log-probs out + temporaries
    update:     resident − (params + optimizer state) + update arguments + outputs − aliased + temporaries

`per_device_bytes` is the larger of the two. The rollout's key/value cache (`rollout_kv_bytes`: P
prompts × N samples × prompt and completion lengths, both engines) is reported beside it, not in it.
The numbers are those of the backend compiled for (the CPU here: a GPU compilation fuses
differently), so they estimate a GPU's need, they do not measure it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.rl.config import RLConfig

GIB = 2**30


@dataclass(frozen=True)
class Plan:
    """The memory of one RL training step (bytes per device unless named total)."""

    params: int  # number of parameters (tied embeddings once)
    param_dtype: str  # dtype the parameters are held in
    compute_dtype: str  # the model config's dtype
    batch: int  # sequences per update (mini-batch)
    seq: int  # tokens per sequence
    micro_batch: int  # sequences per gradient micro-batch
    remat: bool  # block activations recomputed in the backward pass
    devices: int  # devices of the mesh (1 without one)
    mesh: str  # "DATAxFSDP" or "none"
    reference: bool  # a frozen reference policy is kept and evaluated
    param_bytes: int  # all parameters, total
    optimizer_bytes: int  # all optimizer state, total
    param_bytes_per_device: int  # this device's parameter shards
    optimizer_bytes_per_device: int  # this device's optimizer-state shards
    reference_bytes_per_device: int  # this device's reference-parameter shards (0 without a reference)
    batch_bytes_per_device: int  # this device's share of the update's batch arrays
    logp_temp_bytes: int  # XLA temporaries of the log-prob pass
    update_temp_bytes: int  # XLA temporaries of the update
    xla_temp_bytes: int  # the step's working memory: the larger of the two
    logp_peak_bytes: int  # peak of the log-prob pass (formula in the module docstring)
    update_peak_bytes: int  # peak of the update
    per_device_bytes: int  # the step's peak per device
    device_memory_bytes: int | None  # the memory the step must fit in (None: not asked)
    fits: bool | None  # per_device_bytes <= device_memory_bytes (None: not asked)
    backend: str  # the platform the programs were compiled for
    compile_seconds: float  # time spent compiling
    rollout: str | None = None  # "P x N x (prompt + new)" the rollout's KV cache is sized for (None: not asked)
    rollout_kv_bytes_per_device: int | None = None  # cascade engine (prompt stored once), at full length
    rollout_kv_static_bytes_per_device: int | None = None  # the static engine (prompt stored per row)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------- abstract arrays
def _shard_bytes(x) -> int:
    """Bytes of the shard of abstract array `x` on one device (the whole array if unsharded)."""
    sharding = getattr(x, "sharding", None)
    shape = sharding.shard_shape(x.shape) if sharding is not None else x.shape
    return int(math.prod(shape)) * np.dtype(x.dtype).itemsize


def _total_bytes(tree) -> int:
    return sum(int(math.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def _per_device_bytes(tree) -> int:
    return sum(_shard_bytes(x) for x in jax.tree.leaves(tree))


def abstract_params(model_cfg: ModelConfig, mesh=None):
    """The parameters a run holds, as ShapeDtypeStructs (shardings of `param_shardings` on a mesh):
    the shapes and dtypes `init_params` produces, without allocating them."""
    from catsim.llm.model.transformer import init_params

    shapes = jax.eval_shape(functools.partial(init_params, model_cfg), jax.random.key(0))
    if mesh is None:
        return shapes
    from catsim.llm.model.sharding import param_shardings

    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes,
                        param_shardings(model_cfg, mesh))


def abstract_optimizer_state(optimizer, params, mesh=None):
    """The optimizer state a run holds for abstract `params`, as ShapeDtypeStructs with the
    shardings the run gives it: `optimizer.init` on real arrays keeps each parameter's sharding in
    the parameter-shaped parts (Adam's moments), and the run replicates the rest (step counters)
    over the mesh (`sharding.place_on_mesh`)."""
    state = jax.eval_shape(optimizer.init, params)
    if mesh is None:
        return state
    from jax.sharding import NamedSharding, PartitionSpec

    params_def = jax.tree.structure(params)
    replicated = NamedSharding(mesh, PartitionSpec())

    def place(node):
        if jax.tree.structure(node) == params_def:  # a parameter-shaped tree: the params' shardings
            return jax.tree.map(lambda s, p: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=p.sharding),
                                node, params)
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=replicated), node)

    return jax.tree.map(place, state, is_leaf=lambda node: jax.tree.structure(node) == params_def
                        or isinstance(node, jax.ShapeDtypeStruct))


def _memory(compiled) -> dict[str, int]:
    analysis = compiled.memory_analysis()
    if analysis is None:
        raise CatsimError(f"XLA gives no memory analysis on the {jax.default_backend()} backend")
    return {k: int(getattr(analysis, f"{k}_size_in_bytes")) for k in ("argument", "output", "alias", "temp")}


# ----------------------------------------------------------------------------- the plan
def plan_rl_step(model_cfg: ModelConfig, rl_cfg: RLConfig, *, seq: int, mesh=None,
                 device_memory_gib: float | None = None) -> Plan:
    """Compile the RL step of `rl_cfg` (one mini-batch of `rl_cfg.mini_batch` sequences of `seq`
    tokens) for `model_cfg` on abstract arrays and report its memory (see the module docstring)."""
    from catsim.llm.rl.loop import needs_reference
    from catsim.llm.rl.step import make_functions

    if seq < 2:
        raise CatsimError(f"--seq must be at least 2 tokens, got {seq}")
    batch = rl_cfg.mini_batch
    devices = 1 if mesh is None else int(mesh.devices.size)
    if mesh is not None and (batch % devices or rl_cfg.micro_batch % devices):
        raise CatsimError(f"batch ({batch}) and micro-batch ({rl_cfg.micro_batch}) must be divisible by "
                          f"the {devices} devices of the mesh")
    t0 = time.perf_counter()
    activation = None
    if mesh is not None:
        from catsim.llm.model.sharding import activation_sharding, batch_sharding

        activation, row_sharding = activation_sharding(mesh), batch_sharding(mesh)
    fns = make_functions(model_cfg, rl_cfg, activation)
    params = abstract_params(model_cfg, mesh)
    opt_state = abstract_optimizer_state(fns.optimizer, params, mesh)

    def rows(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=row_sharding if mesh is not None else None)

    tokens, real = rows((batch, seq), jnp.int32), rows((batch, seq), jnp.bool_)
    logp_out = jax.eval_shape(fns.logp, params, tokens, real)
    logp_shape = jax.tree.leaves(logp_out)[0]
    per_token = rows(logp_shape.shape, logp_shape.dtype)
    update_batch = {"tokens": tokens, "real": real, "loss_mask": rows(per_token.shape, jnp.float32),
                    "adv": rows(per_token.shape, jnp.float32), "old_logp": per_token}
    reference = bool(needs_reference(rl_cfg))
    if reference:
        update_batch["ref_logp"] = per_token

    logp_mem = _memory(fns.logp.lower(params, tokens, real).compile())
    update_mem = _memory(fns.update.lower(params, opt_state, update_batch).compile())
    compile_seconds = time.perf_counter() - t0

    p_dev, o_dev = _per_device_bytes(params), _per_device_bytes(opt_state)
    ref_dev = p_dev if reference else 0
    resident = p_dev + o_dev + ref_dev
    logp_peak = resident + logp_mem["argument"] - p_dev + logp_mem["output"] + logp_mem["temp"]
    update_peak = (ref_dev + update_mem["argument"] + update_mem["output"] - update_mem["alias"]
                   + update_mem["temp"])
    peak = max(logp_peak, update_peak)
    limit = None if device_memory_gib is None else int(device_memory_gib * GIB)
    param_dtypes = sorted({str(x.dtype) for x in jax.tree.leaves(params)})
    return Plan(
        params=sum(int(math.prod(x.shape)) for x in jax.tree.leaves(params)),
        param_dtype="/".join(param_dtypes), compute_dtype=model_cfg.dtype, batch=batch, seq=seq,
        micro_batch=rl_cfg.micro_batch, remat=model_cfg.remat, devices=devices,
        mesh="none" if mesh is None else f"{mesh.shape['data']}x{mesh.shape['fsdp']}", reference=reference,
        param_bytes=_total_bytes(params), optimizer_bytes=_total_bytes(opt_state),
        param_bytes_per_device=p_dev, optimizer_bytes_per_device=o_dev, reference_bytes_per_device=ref_dev,
        batch_bytes_per_device=_per_device_bytes(update_batch),
        logp_temp_bytes=logp_mem["temp"], update_temp_bytes=update_mem["temp"],
        xla_temp_bytes=max(logp_mem["temp"], update_mem["temp"]),
        logp_peak_bytes=logp_peak, update_peak_bytes=update_peak, per_device_bytes=peak,
        device_memory_bytes=limit, fits=None if limit is None else peak <= limit,
        backend=jax.default_backend(), compile_seconds=round(compile_seconds, 2))


def rollout_kv_bytes(model_cfg: ModelConfig, prompts: int, samples: int, prompt_len: int,
                     new_tokens: int) -> dict[str, int]:
    """Key/value cache bytes (total over devices) of a rollout of `prompts` × `samples` rows with
    prompts of `prompt_len` tokens and up to `new_tokens` new ones, in the compute dtype:
    "static" stores every row's prompt and completion (B·(T + M) slots); "cascade" each prompt once
    and every row's completion (U·T + U·R·M slots, the grid U x R rounded up to powers of two as
    `catsim.llm.rollout.cascade` does), its size once the longest row reaches M."""
    from catsim.llm.rollout.decode import pow2

    for name, value in (("prompts", prompts), ("samples", samples), ("prompt length", prompt_len),
                        ("new tokens", new_tokens)):
        if value < 1:
            raise CatsimError(f"rollout {name} must be at least 1, got {value}")
    per_slot = 2 * model_cfg.num_layers * model_cfg.num_kv_heads * model_cfg.head_dim * jnp.dtype(model_cfg.dtype).itemsize
    u, r = pow2(prompts), pow2(samples)
    return {"static": per_slot * prompts * samples * (prompt_len + new_tokens),
            "cascade": per_slot * (u * prompt_len + u * r * new_tokens)}


def with_rollout(plan: Plan, model_cfg: ModelConfig, prompts: int, samples: int, prompt_len: int,
                 new_tokens: int) -> Plan:
    """`plan` with the rollout's KV-cache bytes per device (rows split evenly over the devices)."""
    kv = rollout_kv_bytes(model_cfg, prompts, samples, prompt_len, new_tokens)
    return dataclasses.replace(plan, rollout=f"{prompts} x {samples} x ({prompt_len} + {new_tokens})",
                               rollout_kv_bytes_per_device=-(-kv["cascade"] // plan.devices),
                               rollout_kv_static_bytes_per_device=-(-kv["static"] // plan.devices))


def read_model_config(path: str | Path, *, dtype: str | None = None, remat: bool = False) -> ModelConfig:
    """The ModelConfig of a model directory or of a bare `config.json` (no weights needed)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise CatsimError(f"{path}: no config.json (give a model directory or its config.json)")
    # `llm rl` keeps float32 master weights whatever the compute dtype (mixed precision)
    cfg = ModelConfig.from_json_file(file, dtype=dtype).replace(weight_dtype="float32")
    return cfg.replace(remat=True) if remat else cfg


def parse_mesh(text: str | None):
    """A ("data", "fsdp") mesh from "DATAxFSDP" (None / "none": no mesh)."""
    import re

    if text is None or text == "none":
        return None
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if not m:
        raise CatsimError(f"--mesh must be none or DATAxFSDP (e.g. 1x8), got {text!r}")
    data, fsdp = int(m.group(1)), int(m.group(2))
    if data * fsdp > len(jax.devices()):
        raise CatsimError(f"--mesh {text} needs {data * fsdp} devices, this process has {len(jax.devices())} "
                          f"(on a CPU: XLA_FLAGS=--xla_force_host_platform_device_count={data * fsdp})")
    from catsim.llm.model.sharding import make_mesh

    return make_mesh(data=data, fsdp=fsdp, devices=jax.devices()[:data * fsdp])


# ----------------------------------------------------------------------------- reporting
def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:,.2f} GiB"


def format_plan(plan: Plan) -> str:
    """A two-column table of the plan."""
    rows = [
        ("parameters", f"{plan.params:,} ({plan.param_dtype}; compute {plan.compute_dtype})"),
        ("step", f"{plan.batch} x {plan.seq} tokens, micro-batch {plan.micro_batch}, "
                 f"remat {'on' if plan.remat else 'off'}, reference {'kept' if plan.reference else 'none'}"),
        ("mesh", f"{plan.mesh} ({plan.devices} device{'s' if plan.devices > 1 else ''}, {plan.backend})"),
        ("param_bytes (total)", _gib(plan.param_bytes)),
        ("optimizer_bytes (total)", _gib(plan.optimizer_bytes)),
        ("params per device", _gib(plan.param_bytes_per_device)),
        ("optimizer per device", _gib(plan.optimizer_bytes_per_device)),
        ("reference per device", _gib(plan.reference_bytes_per_device)),
        ("batch per device", _gib(plan.batch_bytes_per_device)),
        ("xla_temp_bytes (log-probs)", _gib(plan.logp_temp_bytes)),
        ("xla_temp_bytes (update)", _gib(plan.update_temp_bytes)),
        ("per_device_bytes (peak)", _gib(plan.per_device_bytes)),
    ]
    if plan.rollout is not None:
        rows += [("rollout", f"{plan.rollout} tokens (prompts x samples x lengths)"),
                 ("rollout KV cache per device", f"{_gib(plan.rollout_kv_bytes_per_device)} (cascade: prompt "
                                                 f"stored once; static engine {_gib(plan.rollout_kv_static_bytes_per_device)})")]
    if plan.device_memory_bytes is not None:
        rows.append(("fits", f"{'yes' if plan.fits else 'NO'} (in {_gib(plan.device_memory_bytes)})"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def plan_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2)
