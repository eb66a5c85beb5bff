"""`catsim simulate`: run the categorical simulator for some (N, γ, seed) and print final metrics."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

from catsim.cli._simargs import (
    add_config_arguments,
    config_from_args,
    group_sizes,
    low_lr_gammas,
    method_gammas,
)
from catsim.cli.args import positive_int, show_progress
from catsim.cli.vocabulary import add_format_argument, add_progress_argument, alias, write_csv
from catsim.objectives import focal

FIELDS = ("qpos", "mret", "entropy", "anchor_prob", "share_rose", "worst_drop")
EXAMPLE = """example:
  catsim simulate --group-size 2,256,8192 --gamma 0,1 --seeds 2 --steps 200
  catsim simulate --method f-grpo --ppo-epochs 2      # the clipped GRPO loss with the focal weight, γ = 0.5
  catsim simulate --gamma 0 --low-lr-gamma 0,0.5      # GRPO, and GRPO at lr × m_0.5 (App. N)"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="run the categorical-policy simulator for some N, γ and seeds; print final metrics",
        description="Run the softmax-policy simulator of the paper's §5.1 / App. J and print the\n"
                    "final metrics of every (method, N, γ, seed). Default scenario: paper.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group-size", dest="n", default="256",
                        help="group size(s) N: 256, 2,8,32 or 2^1:2^17 (default: 256)")
    alias(parser, "--n", "--group-size")
    parser.add_argument("--gamma", default=None,
                        help=f"focal γ value(s), e.g. 0,1 (default: 0; {focal.NAMED_GAMMA:g} for --method f-*)")
    parser.add_argument("--seed", type=int, default=0, help="seed of a single run (default: 0)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="run seeds 0…K−1 together instead of --seed (default: off)")
    add_format_argument(parser, what="the final metrics of every (method, N, γ, seed) (json: one object a line)")
    add_progress_argument(parser)
    parser.add_argument("--shard", action=argparse.BooleanOptionalAction, default=True,
                        help="split the runs over all local devices (every N; only when the device count "
                             "divides the run count); results agree to float32 rounding (default: on)")
    parser.add_argument("--cpu-devices", type=positive_int, default=None,
                        help="CPU cores to use as JAX devices; 1 = one device (default: all)")
    parser.add_argument("--save", default=None,
                        help="also write all recorded metrics to this .npz (default: none)")
    add_config_arguments(parser)
    parser.set_defaults(func=run)


def final_records(results) -> list[dict]:
    """One record per (method, γ, N, seed) of `results`: its final metrics (FIELDS)."""
    rows = []
    for method in results.methods:
        for g in results.gammas:
            for n in results.group_sizes:
                for s in results.seeds:
                    row = {"method": method, "n": n, "gamma": g, "seed": s, "steps": int(results.steps[-1])}
                    for name in FIELDS:
                        row[name] = float(results.sel(name, method=method, gamma=g, n=n, seed=s)[-1])
                    rows.append(row)
    return rows


def print_records(rows: list[dict], fmt: str) -> None:
    """json: one object a line (NaN as null); csv: a header and a line a record."""
    if fmt == "csv":
        write_csv(rows)
        return
    for row in rows:
        print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}))


def run(args) -> int:
    from catsim.errors import CatsimError
    from catsim.sim.engine import use_cpu_cores
    from catsim.sim.sweep import learning_rate_for, low_lr_variants, simulate

    sizes, gamma_values = group_sizes(args.n), method_gammas(args, "0")
    cfg = config_from_args(args, sizes)
    progress = show_progress(args.progress)
    if args.save:
        from catsim.cli.main import check_output_path

        check_output_path(args.save, "--save")
    if args.log_every is None and not args.save:  # only final values are printed: record only them
        # (with a progress bar: a record every 100 steps at most, the host loop's chunk)
        cfg = dataclasses.replace(
            cfg, log_every=math.gcd(cfg.steps, 100) if progress else cfg.steps)
    controls = low_lr_gammas(args)
    if args.seeds is not None and args.seeds < 1:
        raise CatsimError(f"--seeds must be >= 1, got {args.seeds}")
    if args.seeds is None and args.seed < 0:
        raise CatsimError(f"--seed must be >= 0, got {args.seed}")
    seeds = args.seeds if args.seeds is not None else [args.seed]
    if args.shard:
        use_cpu_cores(args.cpu_devices)
    results = simulate(cfg, group_sizes=sizes, gammas=gamma_values, seeds=seeds,
                       low_lr_gammas=controls, progress=progress, shard=args.shard)
    if args.save:
        results.save(args.save)
    rows = final_records(results)
    if args.format != "table":
        print_records(rows, args.format)
        return 0
    for variant in low_lr_variants(cfg, controls):
        upd = variant.update
        control = f" (× m_{upd.low_lr_gamma:g} = {learning_rate_for(variant):g})" if upd.low_lr_gamma else ""
        print(f"method {variant.method_label}: {upd.optimizer} on {upd.surrogate}, "
              f"lr {upd.learning_rate:g}{control}, V={variant.policy.num_actions}, "
              f"C={variant.policy.num_correct}, {variant.steps} steps")
    width = max(map(len, results.methods)) if len(results.methods) > 1 else 0
    method_head = f"{'method':<{width}} " if width else ""
    print(method_head + f"{'N':>7} {'gamma':>5} {'seed':>4} " + " ".join(f"{f:>11}" for f in FIELDS))
    for row in rows:
        method = f"{row['method']:<{width}} " if width else ""
        print(f"{method}{row['n']:>7} {row['gamma']:>5g} {row['seed']:>4} "
              + " ".join(f"{row[f]:>11.5g}" for f in FIELDS))
    return 0
