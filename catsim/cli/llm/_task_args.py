"""Task options shared by `catsim llm sft` and `catsim llm sample --task` (not a command itself)."""

from __future__ import annotations

import argparse

from catsim.llm.tasks import TASKS

# CLI flag -> task config field (None default = the task's own default)
TASK_OPTIONS = {
    "size": ("--size", int, "maze: grid side incl. walls, odd (paper: 17)"),
    "algorithm": ("--maze-algorithm", str, "maze: generator, dfs or wilson"),
    "height": ("--height", int, "paths: grid rows"),
    "width": ("--width", int, "paths: grid columns"),
    "obstacle_density": ("--obstacle-density", float, "paths: obstacle probability per square"),
    "min_answers": ("--min-answers", int, "paths: fewest shortest paths per prompt"),
    "max_answers": ("--max-answers", int, "paths: most shortest paths per prompt"),
    "zipf_exponent": ("--zipf", float, "paths: warm-up weights ∝ rank^-s over the answers"),
    "ranking": ("--ranking", str, "paths: answer rank order, turns or lexicographic"),
    "n_train": ("--n-train", int, "train prompts per seed"),
    "n_heldout": ("--n-heldout", int, "held-out prompts per seed"),
    "path": ("--data", str, "math: local .jsonl or .parquet file of question/answer records"),
    "checker": ("--checker", str, "math: math-verify or exact"),
}


def add_task_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    group = parser.add_argument_group("task")
    group.add_argument("--task", choices=sorted(TASKS), required=required,
                       help="built-in task: maze, paths (many solutions) or math (local file)")
    for dest, (flag, kind, text) in TASK_OPTIONS.items():
        group.add_argument(flag, dest=f"task_{dest}", type=kind, default=None, help=text)


def task_options(args: argparse.Namespace) -> dict:
    """The task config fields given on the command line (unset ones omitted)."""
    return {dest: getattr(args, f"task_{dest}") for dest in TASK_OPTIONS
            if getattr(args, f"task_{dest}", None) is not None}
