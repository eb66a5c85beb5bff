"""Multi-process options shared by `catsim llm rl/sft/eval/sample/pipeline` (not a command itself).

    add_distributed_options(parser)       # --mesh, --distributed, --coordinator, --num-processes, --process-id
    check_distributed_args(args)          # bad values: one-line CatsimError, before any work
    initialize_from_args(args)            # jax.distributed.initialize() when --distributed
    mesh = mesh_from_args(args)           # the global device mesh (None: one device)
    say = writer_print()                  # print on process 0, nothing elsewhere

Every process runs the same command; see docs/llm-rl.md ("Sharding and multiple hosts").
"""

from __future__ import annotations

import argparse
import re

from catsim.errors import CatsimError

_MESH = re.compile(r"(\d+)x(\d+)")
_LAYOUT = ("coordinator", "num_processes", "process_id")


def add_distributed_options(parser: argparse.ArgumentParser, *, mesh: bool = True) -> None:
    """The device-mesh option (`mesh=True`) and the four multi-process options, in one group."""
    group = parser.add_argument_group("devices and processes")
    if mesh:
        group.add_argument("--mesh", default="auto", metavar="auto|none|DxF",
                           help="device mesh: auto (every device of every process on the FSDP axis when "
                                "there are several), none or DATAxFSDP such as 2x4 (default auto)")
    group.add_argument("--distributed", action="store_true",
                       help="call jax.distributed.initialize() first (multi-host; see docs/llm-rl.md); on "
                            "SLURM / Open MPI the process layout is detected, otherwise give the three below "
                            "(default: off, one process)")
    group.add_argument("--coordinator", metavar="HOST:PORT",
                       help="with --distributed: HOST:PORT of process 0's coordinator (default: detected)")
    group.add_argument("--num-processes", type=int, metavar="P", help="with --distributed: number of processes (default: detected)")
    group.add_argument("--process-id", type=int, metavar="I",
                       help="with --distributed: this process's index, 0 .. P-1; 0 writes every file "
                            "(default: detected)")


def check_distributed_args(args: argparse.Namespace) -> None:
    """Raise CatsimError for a malformed --mesh or process layout (pure: touches no device)."""
    text = getattr(args, "mesh", None)
    if text not in (None, "auto", "none"):
        m = _MESH.fullmatch(text)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise CatsimError(f"--mesh must be auto, none or DATAxFSDP (e.g. 2x4), got {text!r}")
    given = [name for name in _LAYOUT if getattr(args, name, None) is not None]
    if given and not args.distributed:
        raise CatsimError("--coordinator, --num-processes and --process-id need --distributed")
    if args.coordinator is not None:
        host, _, port = args.coordinator.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CatsimError(f"--coordinator must be HOST:PORT, got {args.coordinator!r}")
    if args.num_processes is not None and args.num_processes < 1:
        raise CatsimError(f"--num-processes must be positive, got {args.num_processes}")
    if args.process_id is not None:
        if args.process_id < 0:
            raise CatsimError(f"--process-id must be >= 0, got {args.process_id}")
        if args.num_processes is not None and args.process_id >= args.num_processes:
            raise CatsimError(f"--process-id must be below --num-processes = {args.num_processes}, "
                              f"got {args.process_id}")


def initialize_from_args(args: argparse.Namespace) -> None:
    """Check the options, then join the multi-process job when --distributed (before any other
    use of JAX's devices)."""
    check_distributed_args(args)
    if not args.distributed:
        return
    from catsim.llm.model.sharding import initialize_distributed

    layout = {"coordinator_address": args.coordinator, "num_processes": args.num_processes,
              "process_id": args.process_id}
    try:
        initialize_distributed(**{k: v for k, v in layout.items() if v is not None})
    except ValueError as err:  # an incomplete layout outside SLURM / Open MPI
        raise CatsimError(f"--distributed: {err}".splitlines()[0]) from None


def make_mesh_from_arg(text: str | None):
    """"auto" (every device of every process on the fsdp axis when there are several), "none",
    or "DxF"; None = one device, no mesh."""
    import jax

    from catsim.llm.model.sharding import make_mesh

    if text in (None, "none"):
        return None
    if text == "auto":
        return make_mesh() if len(jax.devices()) > 1 else None
    m = _MESH.fullmatch(text)
    if not m:
        raise CatsimError(f"--mesh must be auto, none or DATAxFSDP (e.g. 2x4), got {text!r}")
    return make_mesh(data=int(m.group(1)), fsdp=int(m.group(2)))


def mesh_from_args(args: argparse.Namespace):
    """The mesh of --mesh over all processes' devices (call after `initialize_from_args`)."""
    return make_mesh_from_arg(getattr(args, "mesh", None))


def writer_print():
    """`print` on the process that writes (process 0, or the only one), a no-op on the others, so
    a multi-process command's output appears once."""
    from catsim.llm.model.sharding import is_primary

    if is_primary():
        return print
    return lambda *args, **kwargs: None
