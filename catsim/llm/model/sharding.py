"""Data-parallel + FSDP sharding on a `jax.sharding.Mesh` with axes ("data", "fsdp").

- Parameters are split along one dimension over the "fsdp" axis (the largest dimension divisible by
  the axis size, never the stacked-layer axis) and replicated over "data"; XLA all-gathers each
  layer's weights when it is used.
- Activations and batches are split along the batch dimension over both axes ("data", "fsdp").

    mesh = make_mesh(data=2, fsdp=4)
    cfg, params = load_model(path, mesh=mesh)            # weights placed shard by shard
    tokens = jax.device_put(tokens_BxT, batch_sharding(mesh))
    logits = jax.jit(forward, static_argnames=("cfg", "activation_sharding"))(
        params, cfg, tokens, activation_sharding=activation_sharding(mesh))

Multi-host (GPU cluster): start one process per host, call `initialize_distributed()` before
anything else touches JAX, then build the mesh over `jax.devices()` (all hosts' devices); see
docs/llm-rl.md for the launch command. Every process runs the same host loop on the same global
(numpy) batches; `to_host` brings a sharded result back to every process (an all-gather across
processes when its shards live on other hosts), `is_primary` picks the one process that writes
files, and `barrier` makes the others wait for those files.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, param_shapes

DATA, FSDP = "data", "fsdp"
BATCH_AXES = (DATA, FSDP)


def initialize_distributed(**kwargs: Any) -> None:
    """Join a multi-host JAX job (`jax.distributed.initialize`). On SLURM / Open MPI / cloud TPU the
    coordinator, process count and process id are detected from the environment; otherwise pass
    coordinator_address="host:port", num_processes=..., process_id=....

    A process already in a job (several commands run in one Python session) stays in it; asking
    for another process count or id is an error."""
    if jax.distributed.is_initialized():
        now = {"num_processes": jax.process_count(), "process_id": jax.process_index()}
        for name, value in now.items():
            if kwargs.get(name, value) != value:
                raise CatsimError(f"this process already runs as process {now['process_id']} of "
                                  f"{now['num_processes']}; cannot join as {name} = {kwargs[name]}")
        return
    jax.distributed.initialize(**kwargs)


def is_primary() -> bool:
    """True on the process that writes logs, checkpoints and reports (process 0; always in a
    single-process run)."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier `name` (no-op in a single-process run)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def to_host(tree: Any) -> Any:
    """Numpy copies of a pytree's arrays, each with its GLOBAL value on every process.

    Fully addressable arrays are simply fetched; arrays with shards on other processes are
    all-gathered across processes (`multihost_utils.process_allgather`, a collective: every process
    must call `to_host` on the same arrays in the same order). Replicated ones read the local copy.
    """

    def get(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if x.is_fully_replicated:
                return np.asarray(x.addressable_data(0))
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x))

    return jax.tree.map(get, tree)


def make_mesh(data: int | None = None, fsdp: int | None = None, devices: list | None = None) -> Mesh:
    """A 2-D mesh ("data", "fsdp") over `devices` (default: all devices of all hosts).

    With neither size given, everything goes to "fsdp"; with one, the other takes what is left.
    """
    devices = list(jax.devices() if devices is None else devices)
    count = len(devices)
    if data is None and fsdp is None:
        data, fsdp = 1, count
    elif data is None:
        data = count // fsdp if fsdp and count % fsdp == 0 else 0
    elif fsdp is None:
        fsdp = count // data if data and count % data == 0 else 0
    if not data or not fsdp or data < 1 or fsdp < 1 or data * fsdp != count:
        raise CatsimError(f"mesh data={data} x fsdp={fsdp} does not match {count} devices")
    return Mesh(np.asarray(devices, dtype=object).reshape(data, fsdp), (DATA, FSDP))


def _param_spec(shape: tuple[int, ...], fsdp_size: int, stacked: bool) -> P:
    first = 1 if stacked else 0
    candidates = [i for i in range(first, len(shape)) if shape[i] % fsdp_size == 0]
    if fsdp_size == 1 or not candidates:
        return P()
    axis = max(candidates, key=lambda i: (shape[i], -i))
    spec: list[Any] = [None] * len(shape)
    spec[axis] = FSDP
    return P(*spec)


def param_specs(cfg: ModelConfig, mesh: Mesh) -> Params:
    """PartitionSpec of every parameter (pytree mirroring the params)."""
    size = mesh.shape[FSDP]
    shapes = param_shapes(cfg)
    specs = {k: _param_spec(v, size, stacked=False) for k, v in shapes.items() if k != "layers"}
    specs["layers"] = {k: _param_spec(v, size, stacked=True) for k, v in shapes["layers"].items()}
    return specs


def param_shardings(cfg: ModelConfig, mesh: Mesh) -> Params:
    """NamedSharding of every parameter (pytree mirroring the params)."""
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(cfg, mesh),
                        is_leaf=lambda x: isinstance(x, P))


def shard_params(params: Params, cfg: ModelConfig, mesh: Mesh) -> Params:
    """Place existing parameters with `param_shardings`."""
    return jax.tree.map(jax.device_put, params, param_shardings(cfg, mesh))


def place_on_mesh(tree: Any, mesh: Mesh) -> Any:
    """Replicate over `mesh` every array of `tree` not already sharded on it (e.g. optax's step
    counter, created on one local device): jitted functions need all their arguments on the
    mesh's devices, which in a multi-process run span several processes."""

    def put(x):
        sharding = getattr(x, "sharding", None)
        if isinstance(sharding, NamedSharding) and sharding.mesh == mesh:
            return x
        return jax.device_put(np.asarray(x), NamedSharding(mesh, P()))

    return jax.tree.map(put, tree)


def whole_rows(rows: int, mesh: Mesh | None) -> int:
    """The smallest multiple of the mesh's device count that is >= rows (rows itself without a
    mesh): a batch size every device gets whole rows of."""
    if mesh is None:
        return rows
    devices = mesh.devices.size
    return -(-rows // devices) * devices


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding of a B x ... batch array: B split over ("data", "fsdp")."""
    return NamedSharding(mesh, P(BATCH_AXES))


def activation_sharding(mesh: Mesh) -> NamedSharding:
    """Sharding constraint for the B x T x D residual stream inside `forward`."""
    return NamedSharding(mesh, P(BATCH_AXES, None, None))


def shard_batch(x: Any, mesh: Mesh) -> Any:
    """device_put each array of a pytree with its leading (batch) dimension split over the mesh."""
    size = mesh.shape[DATA] * mesh.shape[FSDP]

    def put(a):
        if a.shape[0] % size:
            raise CatsimError(f"batch size {a.shape[0]} is not divisible by the {size} mesh devices")
        return jax.device_put(a, batch_sharding(mesh))

    return jax.tree.map(put, x)
