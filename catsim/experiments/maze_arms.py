"""Moved to `catsim.experiments.maze.arms` (the runs) and `catsim.experiments.maze.arm_table` (the
arms, one row each); this path works for one more release."""

import warnings

from catsim.experiments.maze.arm_table import *  # noqa: F403
from catsim.experiments.maze.arms import *  # noqa: F403

warnings.warn("catsim.experiments.maze_arms moved to catsim.experiments.maze.arms", DeprecationWarning, stacklevel=2)
