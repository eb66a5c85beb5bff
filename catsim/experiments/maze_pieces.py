"""Moved to `catsim.experiments.maze.pieces`; this path works for one more release."""

import warnings

from catsim.experiments.maze.pieces import *  # noqa: F403

warnings.warn("catsim.experiments.maze_pieces moved to catsim.experiments.maze.pieces", DeprecationWarning, stacklevel=2)
