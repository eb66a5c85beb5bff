"""`catsim llm pipeline`: warm-up (or given base models) → RL for methods × group sizes × seeds →
evaluation → report (report.md, results.json, comparison, pass@k curves, training dynamics,
theory overlay).

    catsim llm pipeline --out runs/pipeline            # CPU default: paths + maze, GRPO vs F-GRPO at N=8, GRPO N=2/32
    catsim llm pipeline --out runs/quick --quick       # a few minutes (what CI and `catsim reproduce` run)
"""

from __future__ import annotations

import argparse
import dataclasses

from catsim.cli.args import parse_int_list
from catsim.errors import CatsimError


def register(subparsers) -> None:
    parser = subparsers.add_parser("pipeline", help="warm-up → RL sweep → eval → report",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the few-minute configuration")
    add_pipeline_options(parser)
    parser.set_defaults(func=run)


def add_pipeline_options(parser: argparse.ArgumentParser) -> None:
    """The options `pipeline` and `compare` share (each overrides one PipelineConfig field)."""
    parser.add_argument("--out", required=True, help="report directory (reruns reuse finished runs)")
    parser.add_argument("--base-model", action="append", metavar="TASK=DIR",
                        help="skip the warm-up of TASK and start from DIR (with catsim_task.json)")
    parser.add_argument("--tasks", help="comma list of tasks to keep from the configuration (paths,maze)")
    parser.add_argument("--runs", help="comma list of method:N specs, e.g. grpo:8,f-grpo:8,asym-grpo:8,grpo-lowlr:8")
    parser.add_argument("--seeds", help="RL seeds, e.g. 0,1,2")
    parser.add_argument("--gamma", type=float, help="γ of the f- runs (default 0.5)")
    parser.add_argument("--rl-steps", type=int, help="RL steps per run")
    parser.add_argument("--rollouts-per-step", type=int, help="rollouts per RL step")
    parser.add_argument("--learning-rate", type=float, help="RL learning rate")
    parser.add_argument("--eval-n", type=int, help="samples per held-out prompt")
    parser.add_argument("--eval-prompts", type=int, help="held-out prompts")
    parser.add_argument("--target-reward", type=float, help="steps-to-target: the training reward to reach")
    parser.add_argument("--heldout-every", type=int, help="RL runs: held-out accuracy + safeguards every k steps")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def config_from_args(pc, args):
    """`pc` with the shared options' overrides applied."""
    changes: dict = {}
    if args.tasks:
        wanted = [t.strip() for t in args.tasks.split(",")]
        known = {t.name: t for t in pc.tasks}
        from catsim.llm.pipeline import TaskSetup

        changes["tasks"] = tuple(known.get(t, TaskSetup(t)) for t in wanted)
    if args.runs:
        changes["runs"] = tuple(s.strip() for s in args.runs.split(","))
    if args.seeds:
        changes["seeds"] = tuple(parse_int_list(args.seeds, "--seeds"))
    for name in ("gamma", "rl_steps", "rollouts_per_step", "learning_rate", "eval_n", "eval_prompts",
                 "target_reward", "heldout_every"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if "eval_n" in changes:
        changes["ks"] = tuple(k for k in (1, 2, 4, 8, 10, 16, 32, 64, 128, 256, 512, 1024)
                              if k <= changes["eval_n"] and (k != 10 or 10 in pc.ks))
        changes["test_m"] = min(pc.test_m, changes["eval_n"])
    return dataclasses.replace(pc, **changes)


def base_models_from_args(args) -> dict:
    bases = {}
    for item in args.base_model or []:
        if "=" not in item:
            raise CatsimError(f"--base-model expects TASK=DIR, got {item!r}")
        name, path = item.split("=", 1)
        bases[name.strip()] = path
    return bases


def run(args) -> int:
    from catsim.llm.pipeline import PipelineConfig, run_pipeline

    pc = config_from_args(PipelineConfig.quick() if args.quick else PipelineConfig(), args)
    report = run_pipeline(args.out, config=pc, base_models=base_models_from_args(args), progress=not args.quiet)
    print(report.read_text())
    print(f"report: {report}")
    return 0
