"""`catsim llm rl`: GRPO-family RL (GRPO, DAPO, CISPO, Dr.GRPO, asym-GRPO, focal γ) from a base model dir.

Every `RLConfig` option has a flag (`--group-size 8`, `--gamma 0.5`, ...), grouped by the config
section it sets. Rerunning the same command in the same --out resumes. Example:

    catsim llm rl --base runs/sft --out runs/fgrpo --method f-grpo --steps 100   # GRPO, focal γ = 0.5
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from catsim.cli.llm._distributed import (
    add_distributed_options,
    check_distributed_args,
    initialize_from_args,
    mesh_from_args,
    writer_print,
)
from catsim.cli.vocabulary import add_dual_clip_arguments, add_progress_argument, alias
from catsim.errors import CatsimError

SECTION_TITLES = {None: "method", "objective": "objective", "gamma": "focal γ schedule",
                  "components": "asym-GRPO components", "asym": "asym-GRPO hyper-parameters",
                  "optimizer": "optimizer", "rollout": "rollout", "run": "run",
                  "rare": "rare-solution advantages (MaxRL, pass@k, NSR)"}


def _default(section: str | None, field: str):
    from catsim.llm.rl import RLConfig

    cfg = RLConfig()
    return getattr(cfg if section is None else getattr(cfg, section), field)


def _field_type(section: str | None, field: str) -> str:
    from catsim.llm.rl import RLConfig

    cls = RLConfig if section is None else type(getattr(RLConfig(), section))
    return str({f.name: f.type for f in dataclasses.fields(cls)}[field])


def add_rl_options(parser: argparse.ArgumentParser) -> None:
    """One `--flat-name` option per `RLConfig` option (`catsim.llm.rl.config.FLAT`), grouped by
    section, with its real default and, for enumerated options, its choices. Unset options keep the
    config's default (argparse default None), so `rl_config_from_args` sees only what was given."""
    from catsim.llm.rl.config import CHOICES, FLAT
    from catsim.objectives import focal

    groups: dict = {}
    for name, (section, field, text) in FLAT.items():
        if section not in groups:
            groups[section] = parser.add_argument_group(f"RL {SECTION_TITLES[section]}")
        group, flag = groups[section], RENAMED.get(name, "--" + name.replace("_", "-"))
        default, kind = _default(section, field), _field_type(section, field)
        shown = default
        if default is None:
            shown = "on for asym-grpo, off otherwise" if section == "components" else "the method's"
        help_text = text if "(default:" in text else f"{text} (default: {shown})"
        if name == "method":
            names = focal.focal_names(CHOICES[name])
            group.add_argument(flag, dest=name, choices=CHOICES[name] + names, default=None,
                               help=f"{text}; {', '.join(names)} = the same with the focal weight (1 − μ̂)^γ on, "
                                    f"at --gamma (default {focal.NAMED_GAMMA:g}; 0 refused) (default: {shown})")
        elif name == "dual_clip":  # the simulator's form: a switch, with the clip's max-norm as its value
            add_dual_clip_arguments(group, "on for asym-grpo, off otherwise",
                                    below="×--dual-clip-amplification below --dual-clip-lower; "
                                          "MAX_NORM = --grad-clip")
        elif kind.startswith("bool"):
            group.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif name in CHOICES:
            group.add_argument(flag, dest=name, choices=CHOICES[name], default=None, help=help_text)
        elif kind.startswith("int"):
            group.add_argument(flag, dest=name, type=int, default=None, metavar="N", help=help_text)
        elif kind.startswith("float"):
            group.add_argument(flag, dest=name, type=float, default=None, metavar="X", help=help_text)
        else:
            group.add_argument(flag, dest=name, default=None, help=help_text)
    for name, new in RENAMED.items():
        alias(parser, "--" + name.replace("_", "-"), new)


RENAMED = {"learning_rate": "--lr"}  # RLConfig options whose flag is not their name (the CLI's vocabulary)


def rl_config_from_args(args):
    """The `RLConfig` of the options given on the command line: --method f-grpo is GRPO with the
    focal weight on (γ = `focal.NAMED_GAMMA` unless --gamma is given; --gamma 0 refused), and
    --dual-clip MAX_NORM is --dual-clip --grad-clip MAX_NORM."""
    from catsim.llm.rl import FLAT, RLConfig
    from catsim.objectives import focal

    given = {name: getattr(args, name) for name in FLAT if getattr(args, name, None) is not None}
    if "method" in given:
        given["method"], gammas = focal.resolve_method(given["method"], (given["gamma"],) if "gamma" in given else None)
        if gammas is not None:
            given["gamma"] = gammas[0]
    clip = given.get("dual_clip")
    if clip is not None and clip is not True and clip is not False:
        if given.get("grad_clip", clip) != clip:
            raise CatsimError(f"--dual-clip {clip:g} and --grad-clip {given['grad_clip']:g} name two max-norms "
                              "for one clip; give one")
        given["dual_clip"], given["grad_clip"] = True, clip
    return RLConfig.from_flat(**given)


def parse_task_options(items) -> dict:
    """["size=7", "checker=exact"] -> {"size": 7, "checker": "exact"} (JSON values when they parse)."""
    out = {}
    for item in items or []:
        if "=" not in item:
            raise CatsimError(f"--task-opt expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def add_common_model_options(parser: argparse.ArgumentParser) -> None:
    """--task and its options (shared with `catsim llm sft/sample`), plus --task-opt for any other
    task config field (e.g. the math prompt_template), and --chat-template."""
    from catsim.cli.llm._task_args import add_task_arguments

    add_task_arguments(parser, required=False)
    parser.add_argument("--task-opt", action="append", metavar="KEY=VALUE",
                        help="any other task config field, repeatable (e.g. --task-opt question_field=problem)")
    parser.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=False,
                        help="wrap prompts in the tokenizer's chat template (instruct checkpoints; default: off)")
    alias(parser, "--chat", "--chat-template")


def task_spec_from_args(args) -> dict | None:
    """{"task", "config"} from --task and its options; None = use the model dir's catsim_task.json."""
    from catsim.cli.llm._task_args import task_options

    options = {**task_options(args), **parse_task_options(args.task_opt)}
    if args.task is None:
        if options:
            raise CatsimError("task options need --task")
        return None
    return {"task": args.task, "config": options}


def register(subparsers) -> None:
    parser = subparsers.add_parser("rl", help="train a base model with GRPO-family RL (grpo, dapo, cispo, dr_grpo, asym-grpo, f-grpo, ...)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="Hugging Face model dir to start from (the KL reference)")
    parser.add_argument("--out", required=True, help="output directory (resumed if it holds a run)")
    add_common_model_options(parser)
    add_distributed_options(parser)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"),
                        help="compute dtype (default: the checkpoint's); weights, gradients and "
                             "Adam state stay float32")
    parser.add_argument("--remat", action="store_true", help="recompute activations in the backward pass (default off)")
    parser.add_argument("--stop-after", type=int, default=None, help="stop once this many steps are done (state saved; rerun to resume)")
    parser.add_argument("--overwrite", action="store_true", help="discard a previous run in --out")
    add_progress_argument(parser, default="shown")
    alias(parser, "--quiet", "--no-progress")
    from catsim.tracking import add_log_to_argument

    add_log_to_argument(parser)
    add_rl_options(parser)
    from catsim.progress import RL_FIELDS, fields_help

    parser.epilog = fields_help(RL_FIELDS)  # what the progress shows
    parser.set_defaults(func=run)


def run(args) -> int:
    from catsim.llm.rl import run_rl

    check_distributed_args(args)
    spec = task_spec_from_args(args)
    if args.data_seed is None:  # train on the split the warm-up used
        from catsim.llm.rundir import read_task_file

        try:
            args.data_seed = int((spec or read_task_file(args.base)).get("data_seed", 0))
        except CatsimError:
            args.data_seed = 0
    cfg = rl_config_from_args(args)
    from catsim.llm.rl.config import FLAT
    from catsim.llm.rl.unread import check_options_act

    check_options_act(cfg, [name for name in FLAT if getattr(args, name, None) is not None])  # each acts
    initialize_from_args(args)  # after every check: a bad option stops each process at once
    mesh = mesh_from_args(args)
    result = run_rl(args.base, args.out, cfg, task_spec=spec, mesh=mesh,
                    stop_after=args.stop_after, overwrite=args.overwrite, progress=args.progress is not False,
                    chat_template=args.chat_template, label=cfg.label(), dtype=args.dtype, remat=args.remat,
                    log_to=args.log_to)
    from catsim.llm.rl.summary import summary_lines

    say = writer_print()
    for line in summary_lines(result, cfg.label()):  # the final metrics, and where the run's files are
        say(line)
    return 0
