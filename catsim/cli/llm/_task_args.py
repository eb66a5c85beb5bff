"""Task options shared by `catsim llm sft` and `catsim llm sample --task` (not a command itself)."""

from __future__ import annotations

import argparse

from catsim.llm.tasks import TASKS
from catsim.llm.tasks.math_file import CHECKERS
from catsim.llm.tasks.maze import ALGORITHMS
from catsim.llm.tasks.paths import RANKINGS


def _sizes(text: str) -> tuple[int, ...]:
    from catsim.cli.args import parse_int_list

    return tuple(parse_int_list(text, "--sizes"))


# CLI flag -> task config field (None default = the task's own default)
TASK_OPTIONS = {
    "size": ("--size", int, "maze: grid side incl. walls, odd (default 7; paper 17)"),
    "sizes": ("--sizes", _sizes, "maze: difficulty levels, e.g. 5,7,9,11,13 (each prompt draws one size)"),
    "algorithm": ("--maze-algorithm", str, "maze: generator (default dfs)"),
    "height": ("--height", int, "paths: grid rows (default 5)"),
    "width": ("--width", int, "paths: grid columns (default 5)"),
    "obstacle_density": ("--obstacle-density", float, "paths: obstacle probability per square"),
    "min_answers": ("--min-answers", int, "paths: fewest shortest paths per prompt"),
    "max_answers": ("--max-answers", int, "paths: most shortest paths per prompt"),
    "zipf_exponent": ("--zipf", float, "paths: warm-up weights ∝ rank^-s over the answers"),
    "ranking": ("--ranking", str, "paths: answer rank order (default turns)"),
    "n_train": ("--n-train", int, "train prompts per seed"),
    "n_heldout": ("--n-heldout", int, "held-out prompts per seed"),
    "path": ("--data", str, "math: local .jsonl or .parquet file of question/answer records"),
    "checker": ("--checker", str, "math: answer checker (default math-verify)"),
}


CHOICES = {"algorithm": ALGORITHMS, "ranking": RANKINGS, "checker": CHECKERS}  # enumerated task options


def add_task_arguments(parser: argparse.ArgumentParser, *, required: bool,
                       task_default: str = "the task recorded in the model directory") -> None:
    group = parser.add_argument_group("task")
    text = "built-in task: maze, paths (many solutions) or math (local file)"
    group.add_argument("--task", choices=sorted(TASKS), required=required,
                       help=text if required else f"{text} (default: {task_default})")
    for dest, (flag, kind, text) in TASK_OPTIONS.items():
        if "default" not in text:
            text = f"{text} (default: the task's own, or the value recorded with the model)"
        if dest in CHOICES:
            group.add_argument(flag, dest=f"task_{dest}", choices=CHOICES[dest], default=None, help=text)
        else:
            group.add_argument(flag, dest=f"task_{dest}", type=kind, default=None, help=text,
                               metavar=flag.lstrip("-").upper().replace("-", "_"))


def task_options(args: argparse.Namespace) -> dict:
    """The task config fields given on the command line (unset ones omitted)."""
    return {dest: getattr(args, f"task_{dest}") for dest in TASK_OPTIONS
            if getattr(args, f"task_{dest}", None) is not None}


def add_task_sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """`catsim llm sample --task ...`: which task prompts to sample."""
    group = parser.add_argument_group("task prompts (with --task)")
    group.add_argument("--split", choices=["heldout", "train"], default="heldout",
                       help="task split to take prompts from (default heldout)")
    group.add_argument("--task-prompts", type=int, default=4, help="number of task prompts (default 4)")
    group.add_argument("--data-seed", type=int, default=None,
                       help="task split seed (default: the one recorded in the model dir, else 0)")


def run_task_sampling(args: argparse.Namespace, sampling_config, progress_bar, mesh=None,
                      say=print) -> int:
    """Sample a model on task prompts and print each completion with its reward. mesh: the
    device mesh to shard the model and rows over (None: one device); say: the print function
    (a no-op on the processes of a multi-process run that do not write)."""
    import sys

    import jax
    import numpy as np

    from catsim.errors import CatsimError
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.sharding import whole_rows
    from catsim.llm.model.tokenizer import Tokenizer
    from catsim.llm.rollout import sample_groups
    from catsim.llm.rundir import task_for_model

    if args.prompt:
        raise CatsimError("give either --prompt or --task, not both")
    if args.task_prompts < 1:
        raise CatsimError("--task-prompts must be positive")
    task, data_seed = task_for_model(args.model, args.task, task_options(args), args.data_seed)
    count = min(args.task_prompts, task.num_prompts(args.split))
    prompts = [task.prompt(args.split, data_seed, i) for i in range(count)]
    cfg, params = load_model(args.model, dtype=args.dtype, mesh=mesh)
    tokenizer = Tokenizer.from_dir(args.model)
    sampling = sampling_config(args, cfg, tokenizer)
    cap = getattr(task, "max_answer_chars", None)
    if cap is not None and sampling.max_new_tokens > cap + 1:  # longer answers score 0 anyway
        import dataclasses

        sampling = dataclasses.replace(sampling, max_new_tokens=cap + 1)
    chat = tokenizer.chat_template is not None if args.chat is None else args.chat
    with progress_bar(count * args.n, args) as bar:
        groups = sample_groups(params, cfg, tokenizer, task, prompts, args.n, sampling, jax.random.key(args.seed),
                               mesh=mesh, chat_template=chat, batch_size=whole_rows(min(256, count * args.n), mesh),
                               pad_rows=True, pad_multiple=1, progress=bar)
    from catsim.cli.vocabulary import record_printer

    emit = record_printer(args.format, say)
    for row in range(count * args.n):
        prompt, s = prompts[row // args.n], row % args.n
        reward = float(groups.scores[row // args.n, s])
        if args.format != "table":
            emit({"task": task.name, "split": args.split, "prompt_index": prompt.index,
                  "sample_index": s, "completion": groups.texts[row], "reward": reward,
                  "finished": bool(groups.finished[row]), "reference": task.reference(prompt)})
        else:
            if s == 0:
                say(f"=== {task.name} {args.split} prompt {prompt.index}\n{prompt.text}")
            say(f"  sample {s}: {groups.texts[row]!r} reward {reward:g}")
    mean = float(np.mean(groups.scores.astype(np.float64)))
    say(f"mean reward {mean:.4f} over {groups.scores.size} samples ({count} prompts x {args.n})",
        file=sys.stderr)
    return 0
