"""`catsim llm pipeline`: warm-up (or given base models) → RL for methods × group sizes × seeds →
evaluation → report (report.md, results.json, comparison, pass@k curves, training dynamics,
theory overlay).

example:
  catsim llm pipeline --out runs/pipeline            # CPU default: paths + maze, GRPO vs F-GRPO at N=8, GRPO N=2/32
  catsim llm pipeline --out runs/quick --quick       # a few minutes (what CI and `catsim reproduce` run)
  catsim llm pipeline --out figures/llm-rl --rerender # redraw report.md + figures from results.json only
"""

from __future__ import annotations

import argparse
import dataclasses

from catsim.cli.args import parse_int_list
from catsim.cli.llm._distributed import (
    add_distributed_options,
    check_distributed_args,
    initialize_from_args,
    mesh_from_args,
    writer_print,
)
from catsim.cli.vocabulary import add_progress_argument, alias
from catsim.errors import CatsimError

# option -> PipelineConfig field overridden by it (the same name with dashes)
FIELDS = ("gamma", "rl_steps", "rollouts_per_step", "learning_rate", "eval_n", "eval_prompts",
          "target_reward", "heldout_every")
RUN_OPTIONS = ("quick", "base_model", "tasks", "runs", "seeds", *FIELDS, "progress")  # what --rerender never reads
FLAGS = {"learning_rate": "--lr", "eval_n": "--eval-samples"}  # fields whose flag is not their name (the vocabulary)
HELP = {"gamma": "γ of the f- runs and of the grpo-lowlr control",
        "rl_steps": "RL steps per run", "rollouts_per_step": "rollouts per RL step (compute-matched across N)",
        "learning_rate": "RL learning rate", "eval_n": "samples per held-out prompt (pass@k for k ≤ this)",
        "eval_prompts": "held-out prompts scored",
        "target_reward": "steps-to-target: the training reward to reach",
        "heldout_every": "RL runs: held-out accuracy + safeguards every k steps (0 = never)"}


def register(subparsers) -> None:
    from catsim.experiments.llm_pipeline import PipelineConfig

    parser = subparsers.add_parser("pipeline", help="run warm-up → RL sweep → eval → report in one folder",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="the few-minute configuration (PipelineConfig.quick(); default: off)")
    add_pipeline_options(parser, PipelineConfig(), PipelineConfig.quick())
    parser.add_argument("--rerender", action="store_true",
                        help="run nothing: redraw OUT/report.md and the figures from OUT/results.json; "
                             "the run options are refused with it (default: off)")
    add_distributed_options(parser)
    from catsim.progress import RL_FIELDS, SFT_FIELDS, fields_help

    parser.epilog = fields_help(SFT_FIELDS, RL_FIELDS)  # what the progress shows
    parser.set_defaults(func=run)


def _show(value) -> str:
    if isinstance(value, tuple):
        return ",".join(getattr(v, "name", str(v)) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_pipeline_options(parser: argparse.ArgumentParser, full, quick) -> None:
    """The options `pipeline` and `compare` share (each overrides one PipelineConfig field); the
    help shows the defaults of `full` and, after --quick, of `quick`."""
    from catsim.llm.rl import METHODS

    def default(name: str) -> str:
        a, b = _show(getattr(full, name)), _show(getattr(quick, name))
        return f"(default: {a}" + (f"; --quick: {b})" if b != a else ")")

    parser.add_argument("--out", required=True, help="report directory (reruns reuse finished runs)")
    parser.add_argument("--base-model", action="append", metavar="TASK=DIR",
                        help="skip the warm-up of TASK and start from DIR (with catsim_task.json); "
                             "repeatable (default: warm up every task)")
    parser.add_argument("--tasks", help=f"comma list of tasks: paths, maze, math {default('tasks')}")
    parser.add_argument("--runs", help="comma list of method:N specs; method one of "
                                       f"{', '.join(METHODS)}, f-<method> (focal γ), "
                                       f"grpo-lowlr (App. N control) {default('runs')}")
    parser.add_argument("--seeds", help=f"RL seeds, e.g. 0,1,2 {default('seeds')}")
    for name in FIELDS:
        kind = float if isinstance(getattr(full, name), float) else int
        parser.add_argument(_flag(name), dest=name, type=kind, help=f"{HELP[name]} {default(name)}")
    add_progress_argument(parser)
    for name, new in (*FLAGS.items(), ("quiet", "--no-progress")):
        alias(parser, "--" + name.replace("_", "-"), new)


def _flag(name: str) -> str:
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def config_from_args(pc, args):
    """`pc` with the shared options' overrides applied."""
    changes: dict = {}
    for flag in ("tasks", "runs", "seeds"):  # an empty list is a mistake, not "the default"
        value = getattr(args, flag)
        if value is not None and not [x for x in value.split(",") if x.strip()]:
            raise CatsimError(f"--{flag}: empty list")
    if args.tasks:
        wanted = [t.strip() for t in args.tasks.split(",")]
        known = {t.name: t for t in pc.tasks}
        from catsim.experiments.llm_pipeline import TaskSetup

        changes["tasks"] = tuple(known.get(t, TaskSetup(t)) for t in wanted)
    if args.runs:
        changes["runs"] = tuple(s.strip() for s in args.runs.split(",") if s.strip())
    if args.seeds:
        changes["seeds"] = tuple(parse_int_list(args.seeds, "--seeds"))
    for name in FIELDS:
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
    from catsim.experiments.llm_pipeline import PipelineConfig, run_pipeline, write_results

    check_distributed_args(args)
    if args.rerender:
        from catsim.experiments.llm_report import load_results

        given = [_flag(name) for name in RUN_OPTIONS if getattr(args, name) is not None
                 and (getattr(args, name) is not False or name == "progress")]  # 0 is given; --no-progress too
        if given:  # they were ignored: a rerender redraws what results.json holds
            raise CatsimError(f"{', '.join(given)}: not read with --rerender, which runs nothing and redraws "
                              f"{args.out}/results.json as it is")
        results = load_results(f"{args.out}/results.json")
        initialize_from_args(args)
        report = write_results(results, args.out, results_file=False)  # redrawn by process 0
        writer_print()(f"report: {report}")
        return 0
    pc = config_from_args(PipelineConfig.quick() if args.quick else PipelineConfig(), args)
    bases = base_models_from_args(args)
    initialize_from_args(args)  # every process runs every phase over one mesh; process 0 writes
    report = run_pipeline(args.out, config=pc, base_models=bases,
                          progress=args.progress, mesh=mesh_from_args(args))
    say = writer_print()
    say(report.read_text())
    say(f"report: {report}")
    return 0
