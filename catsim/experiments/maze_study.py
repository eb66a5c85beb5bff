"""Moved to `catsim.experiments.maze.study` (the runs) and `catsim.experiments.maze.stats` (seed
statistics, the paired tests, `p_text`); this path works for one more release."""

import warnings

from catsim.experiments.maze.stats import *  # noqa: F403
from catsim.experiments.maze.study import *  # noqa: F403

warnings.warn("catsim.experiments.maze_study moved to catsim.experiments.maze.study (the runs) and "
              "catsim.experiments.maze.stats (the tests)", DeprecationWarning, stacklevel=2)
