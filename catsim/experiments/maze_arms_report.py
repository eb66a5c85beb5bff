"""Moved to `catsim.experiments.maze.arms_report`; this path works for one more release."""

import warnings

from catsim.experiments.maze.arms_report import *  # noqa: F403

warnings.warn("catsim.experiments.maze_arms_report moved to catsim.experiments.maze.arms_report", DeprecationWarning, stacklevel=2)
