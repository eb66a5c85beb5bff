"""Moved to `catsim.experiments.maze.provenance`; this path works for one more release."""

import warnings

from catsim.experiments.maze.provenance import *  # noqa: F403

warnings.warn("catsim.experiments.maze_provenance moved to catsim.experiments.maze.provenance", DeprecationWarning, stacklevel=2)
