"""Moved to `catsim.experiments.maze.check`; this path works for one more release."""

import warnings

from catsim.experiments.maze.check import *  # noqa: F403

warnings.warn("catsim.experiments.maze_check moved to catsim.experiments.maze.check", DeprecationWarning, stacklevel=2)
