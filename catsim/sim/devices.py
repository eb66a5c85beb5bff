"""How a cell's runs are laid out: over the local devices (`run_sharding`, `use_cpu_cores`) and,
inside a device, vmapped as one batch or run one after another (`over_runs`).

The engine's per-run functions take the run axis R first; `over_runs` turns the per-run chunk into
the batched one the engine compiles.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np

from catsim.errors import CatsimError

# Run a device's runs one after another (`jax.lax.map`) instead of as one vmapped batch? None:
# on the CPU backend when each device has about one core (the runs are split over devices, or
# there is one core). A step streams ≈ 10 V-long arrays per run (logits, π, Adam's moments, the
# gradient, softmax's exponentials); vmapped, each pass covers every run of the device (4 runs ×
# 512 KB at V = 128,000) and the step's working set is several times the core's cache; one run
# at a time it is one run's. Measured (Intel Xeon, AVX-512, 2 cores, 8 runs, steady ms per step,
# vmapped → one by one): 2 devices, N = 2 1.25 → 0.99, 1024 1.58 → 1.38, 4096 2.40 → 1.69,
# 16384 3.2 → 2.7, 65536 6.7 → 5.6, 131072 11.7 → 10.8; one device on one core, N = 2
# 2.65 → 1.85, 4096 3.9 → 3.1. One device with both cores is the exception (N = 2 1.6 → 2.4):
# XLA splits each pass over the cores, and one run's pass is too short to split well. The
# per-run program fuses its reductions differently from the batched one (and, in the last bits,
# from itself on one device), so results move in the last float32 bits (docs/simulator.md,
# docs/reproducibility.md). An accelerator gets the batch, which is what it runs in parallel
# (not measured here).
RUNS_ONE_BY_ONE: bool | None = None


def runs_one_by_one(sharding=None) -> bool:
    """`RUNS_ONE_BY_ONE`, resolved for the default backend and the runs' `sharding`."""
    if RUNS_ONE_BY_ONE is not None:
        return bool(RUNS_ONE_BY_ONE)
    if jax.default_backend() != "cpu":
        return False
    return sharding is not None or len(os.sched_getaffinity(0)) == 1


def over_runs(fn, in_axes, sharding=None):
    """`fn` (one run) over a leading run axis: `jax.vmap(fn, in_axes)`, or where `runs_one_by_one`
    a `jax.lax.map` over the runs, inside `jax.shard_map` when `sharding` (`run_sharding`) splits
    them over devices, so that each device maps over its own runs. in_axes: 0 (batched) or None
    (shared) per positional argument; every output has the run axis first."""
    if not runs_one_by_one(sharding):
        return jax.vmap(fn, in_axes=in_axes)

    batched = [i for i, axis in enumerate(in_axes) if axis == 0]

    @functools.wraps(fn)
    def mapped(*args):
        def one(per_run):
            full = list(args)
            for i, value in zip(batched, per_run):
                full[i] = value
            return fn(*full)

        return jax.lax.map(one, tuple(args[i] for i in batched))

    if sharding is None:
        return mapped
    runs, shared = sharding.spec, jax.sharding.PartitionSpec()
    specs = tuple(runs if axis == 0 else shared for axis in in_axes)
    # check_vma off: the per-run scan's carry starts from values the type system calls
    # device-invariant (constants) and becomes per-device; the runs are independent anyway.
    return jax.shard_map(mapped, mesh=sharding.mesh, in_specs=specs, out_specs=runs,
                         check_vma=False)


def run_sharding(num_runs: int):
    """The sharding that splits a leading run axis of `num_runs` over all local devices, or None
    with one device or when `num_runs` is not divisible by the device count. Local: in a
    multi-process job (`jax.distributed`) each process splits its own cells' runs over its own
    devices."""
    devices = jax.local_devices()
    if len(devices) == 1 or num_runs % len(devices):
        return None
    mesh = jax.sharding.Mesh(np.array(devices), ("runs",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))


def use_cpu_cores(count: int | None = None) -> int:
    """Expose `count` CPU cores (default: all of them) as JAX host devices, so that runs split by
    `run_sharding` keep every core busy (XLA's CPU backend runs one program on about one core).

    Call it before JAX's first operation (the CLI's `sweep` and `simulate` do). It changes
    nothing when JAX is already running, when the user already set the host device count
    (XLA_FLAGS or `jax_num_cpu_devices`), or when `count` is 1. Returns the number of devices JAX will use.
    A count below 1 is refused (CatsimError), not read as one device.
    """
    if count is not None and (isinstance(count, bool) or int(count) != count or count < 1):
        raise CatsimError(f"the CPU device count must be a whole number >= 1, got {count!r}")
    count = (os.cpu_count() or 1) if count is None else count
    flags = os.environ.get("XLA_FLAGS", "")
    user_set = jax.config.jax_num_cpu_devices > 0 or "xla_force_host_platform_device_count" in flags
    if count > 1 and not user_set:
        try:
            jax.config.update("jax_num_cpu_devices", int(count))
        except RuntimeError:  # backends already initialised: keep what JAX has
            pass
    return len(jax.local_devices())
