"""Built-in verifiable tasks: Maze (single solution), shortest paths (many solutions), local math.

`make_task("maze", size=9)` builds a task from its name and config fields; every task follows
`catsim.llm.tasks.base.Task`.
"""

from __future__ import annotations

import dataclasses

from catsim.errors import CatsimError
from catsim.llm.tasks.base import SPLITS, Prompt, Task
from catsim.llm.tasks.math_file import MathFileConfig, MathFileTask
from catsim.llm.tasks.maze import MazeConfig, MazeTask
from catsim.llm.tasks.paths import PathsConfig, PathsTask

TASKS = {"maze": (MazeTask, MazeConfig), "paths": (PathsTask, PathsConfig), "math": (MathFileTask, MathFileConfig)}
"""name -> (task class, config class)."""


def make_task(name: str, **options) -> Task:
    """The task `name` with config fields `options` (unknown fields are an error; None = default)."""
    if name not in TASKS:
        raise CatsimError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}")
    task_cls, config_cls = TASKS[name]
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(k for k, v in options.items() if k not in fields and v is not None)
    if unknown:
        raise CatsimError(f"task {name!r} has no option(s) {', '.join(unknown)}")
    kwargs = {k: v for k, v in options.items() if k in fields and v is not None}
    try:
        config = config_cls(**kwargs)
    except TypeError as err:  # a required field (math: path) is missing
        raise CatsimError(f"task {name!r}: {err}") from None
    return task_cls(config=config)


__all__ = [
    "SPLITS",
    "TASKS",
    "MathFileConfig",
    "MathFileTask",
    "MazeConfig",
    "MazeTask",
    "PathsConfig",
    "PathsTask",
    "Prompt",
    "Task",
    "make_task",
]
