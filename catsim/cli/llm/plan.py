"""`catsim llm plan`: will an RL run fit? The memory of the real RL training step, per device.

Compiles the RL step of `catsim llm rl` (token log-prob pass, gradient of the policy loss, optimizer
update) ahead of time on abstract arrays of the model in --model (a model directory or just its
config.json; no weights are read) and reports XLA's numbers. Example:

    catsim llm plan --model Qwen2.5-7B/config.json --batch 8 --seq 4096 --remat --dtype bfloat16 \\
        --mesh 1x8 --device-memory 80

A mesh of N devices needs N devices in this process; on a CPU set
XLA_FLAGS=--xla_force_host_platform_device_count=N first. The numbers are those of the backend the
step is compiled for (a GPU compiler fuses differently): an estimate, not a measurement.
"""

from __future__ import annotations

import argparse

from catsim.cli.vocabulary import add_format_argument, alias, write_csv
from catsim.errors import CatsimError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plan", help="estimate the RL training step's memory per device (will it fit?)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory or its config.json")
    parser.add_argument("--batch", type=int, required=True, help="sequences per update (mini-batch)")
    parser.add_argument("--seq", type=int, required=True, help="tokens per sequence (prompt + completion)")
    parser.add_argument("--micro-batch-size", dest="micro_batch", type=int, default=0,
                        help="sequences per gradient micro-batch (default 0 = the whole batch)")
    parser.add_argument("--remat", action="store_true", help="recompute block activations in the backward pass")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="model dtype (default: the checkpoint's)")
    parser.add_argument("--kl-coef", type=float, default=0.0, help="KL coefficient of the run (default 0)")
    parser.add_argument("--method", default="grpo",
                        help="RL method, as llm rl's --method (f-grpo, f-dapo, f-cispo: their focal weight "
                             "costs no memory) (default grpo)")
    parser.add_argument("--mesh", default="none", metavar="none|DxF",
                        help="device mesh DATAxFSDP such as 1x8 (default none: one device)")
    parser.add_argument("--device-memory", type=float, default=None, metavar="GiB",
                        help="memory of one device in GiB: report whether the step fits")
    parser.add_argument("--rollout", default=None, metavar="PxN",
                        help="also report the rollout's KV cache for P prompts x N samples (e.g. 64x8)")
    parser.add_argument("--prompt-len", type=int, default=None,
                        help="rollout prompt tokens, with --rollout (default 512)")
    parser.add_argument("--max-new-tokens", dest="new_tokens", type=int, default=None,
                        help="rollout new tokens at most, with --rollout (default: --seq minus --prompt-len)")
    for old, new in (("--micro-batch", "--micro-batch-size"), ("--new-tokens", "--max-new-tokens")):
        alias(parser, old, new)
    add_format_argument(parser, what="the plan (csv: one row of every number)")
    parser.set_defaults(func=run)


def _flat(record: dict, prefix: str = "") -> dict:
    """A nested dict as one level: {"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def run(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise CatsimError(f"--batch must be at least 1, got {args.batch}")
    if args.seq < 2:
        raise CatsimError(f"--seq must be at least 2 tokens, got {args.seq}")
    if args.micro_batch < 0 or (args.micro_batch and args.batch % args.micro_batch):
        raise CatsimError(f"--micro-batch-size ({args.micro_batch}) must divide --batch ({args.batch})")
    if args.device_memory is not None and not 0 < args.device_memory < float("inf"):
        raise CatsimError(f"--device-memory must be positive and finite (GiB), got {args.device_memory}")

    rollout = None
    lengths = [flag for flag, n in (("--prompt-len", "prompt_len"), ("--max-new-tokens", "new_tokens"))
               if getattr(args, n) is not None]
    if args.rollout is None and lengths:  # they were ignored: the plan has no rollout without it
        raise CatsimError(f"{', '.join(lengths)}: read only with --rollout PROMPTSxSAMPLES (the rollout's KV cache)")
    if args.rollout is not None:
        import re

        m = re.fullmatch(r"(\d+)x(\d+)", args.rollout)
        if args.prompt_len is None:
            args.prompt_len = 512
        new = args.seq - args.prompt_len if args.new_tokens is None else args.new_tokens
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise CatsimError(f"--rollout must be PROMPTSxSAMPLES such as 64x8, got {args.rollout!r}")
        if args.prompt_len < 1 or new < 1:
            raise CatsimError(f"rollout lengths must be positive: --prompt-len {args.prompt_len}, new tokens {new}")
        rollout = (int(m.group(1)), int(m.group(2)), args.prompt_len, new)

    from catsim.llm.plan import (
        format_plan,
        parse_mesh,
        plan_json,
        plan_rl_step,
        read_model_config,
        with_rollout,
    )
    from catsim.llm.rl import RLConfig
    from catsim.objectives import focal

    model_cfg = read_model_config(args.model, dtype=args.dtype, remat=args.remat)
    # B rows as B groups of one (the compiled step sees rows; the advantages' std never enters it)
    rl_cfg = RLConfig.from_flat(method=focal.resolve_method(args.method, None)[0], prompts_per_step=args.batch,
                                group_size=1,
                                micro_batch_size=args.micro_batch, kl_coef=args.kl_coef,
                                adv_std="population")
    mesh = parse_mesh(args.mesh)
    plan = plan_rl_step(model_cfg, rl_cfg, seq=args.seq, mesh=mesh, device_memory_gib=args.device_memory)
    if rollout is not None:
        plan = with_rollout(plan, model_cfg, *rollout)
    if args.format == "csv":
        write_csv([_flat(plan.to_dict())])
        return 0
    print(plan_json(plan) if args.format == "json" else format_plan(plan))
    return 0
