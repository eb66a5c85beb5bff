"""Moved to `catsim.experiments.maze.presets`; this path works for one more release."""

import warnings

from catsim.experiments.maze.presets import *  # noqa: F403

warnings.warn("catsim.experiments.maze_presets moved to catsim.experiments.maze.presets", DeprecationWarning, stacklevel=2)
