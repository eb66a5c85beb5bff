"""Moved to `catsim.experiments.maze.trl`; this path works for one more release."""

import warnings

from catsim.experiments.maze.trl import *  # noqa: F403

warnings.warn("catsim.experiments.maze_trl moved to catsim.experiments.maze.trl", DeprecationWarning, stacklevel=2)
