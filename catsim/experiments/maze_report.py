"""Moved to `catsim.experiments.maze.report`; this path works for one more release."""

import warnings

from catsim.experiments.maze.report import *  # noqa: F403

warnings.warn("catsim.experiments.maze_report moved to catsim.experiments.maze.report", DeprecationWarning, stacklevel=2)
