"""Moved to `catsim.experiments.maze.summaries`; this path works for one more release."""

import warnings

from catsim.experiments.maze.summaries import *  # noqa: F403

warnings.warn("catsim.experiments.maze_summaries moved to catsim.experiments.maze.summaries", DeprecationWarning, stacklevel=2)
