"""Mret across training horizons, from the trajectories a sweep records (`log_every`).

Fig. 2 is one snapshot at T = 1000 steps; these functions read the whole recorded trajectory:
when each run has lost half its retained mass, the values at chosen horizons, and the windows of
steps in which a seed-mean trajectory lies inside a band (the seed article's "N = 8: Mret falls to
0.2–0.4" is such a band).

    from catsim.sim.horizons import crossing_steps, summarise_crossings
    steps_GNS = crossing_steps(results, "mret", level=0.5)   # [gamma, n, seed], NaN = never
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from catsim.errors import CatsimError
from catsim.sim.results import SimResults

HALF_LOSS_LEVEL = 0.5  # "lost half its retained mass": Mret at or below this


def first_crossing(steps_S: np.ndarray, values_S: np.ndarray, level: float) -> float:
    """The first step at which `values_S` (recorded at `steps_S`) reaches `level` from above,
    linearly interpolated between the two records around it; NaN when no record is <= level.

    A run that starts at or below `level` crosses at its first step."""
    values = np.asarray(values_S, dtype=float)
    steps = np.asarray(steps_S, dtype=float)
    if values.shape != steps.shape or values.ndim != 1:
        raise CatsimError(f"steps and values must be 1-d and alike, got {steps.shape}, {values.shape}")
    below = np.flatnonzero(values <= level)
    if below.size == 0:
        return float("nan")
    i = int(below[0])
    if i == 0:
        return float(steps[0])
    v0, v1 = values[i - 1], values[i]
    return float(steps[i - 1] + (v0 - level) / (v0 - v1) * (steps[i] - steps[i - 1]))


def crossing_steps(results: SimResults, metric: str = "mret", *, level: float = HALF_LOSS_LEVEL,
                   method: str | None = None) -> np.ndarray:
    """`first_crossing` of every run of `method`: [gamma, n, seed] steps, NaN = never within T."""
    runs = results.sel(metric, method=method or results.methods[0])  # [G, N, K, S]
    out = np.full(runs.shape[:-1], np.nan)
    for index in np.ndindex(out.shape):
        out[index] = first_crossing(results.steps, runs[index], level)
    return out


@dataclass(frozen=True)
class Crossing:
    """The crossing steps of one (γ, N) over its seeds."""

    steps: tuple[float, ...]  # per seed; NaN = never within the horizon
    horizon: int  # the last recorded step

    @property
    def crossed(self) -> int:
        return int(np.sum(np.isfinite(self.steps)))

    @property
    def mean(self) -> float:
        """Seed mean; NaN unless every seed crossed (a partial mean would be biased low)."""
        return float(np.mean(self.steps)) if self.crossed == len(self.steps) else float("nan")

    @property
    def sd(self) -> float:
        """Sample standard deviation over seeds (NaN unless every seed crossed, or one seed)."""
        if self.crossed != len(self.steps) or len(self.steps) < 2:
            return float("nan")
        return float(np.std(self.steps, ddof=1))

    def describe(self) -> str:
        k = len(self.steps)
        finite = [s for s in self.steps if np.isfinite(s)]
        if not finite:
            return f"never within {self.horizon:,}"
        if len(finite) < k:
            return (f"{len(finite)}/{k} seeds: {min(finite):.0f}–{max(finite):.0f}; "
                    f"{k - len(finite)} never within {self.horizon:,}")
        if k == 1:
            return f"{finite[0]:.0f}"
        return f"{self.mean:.0f} ± {self.sd:.0f} ({min(finite):.0f}–{max(finite):.0f})"


def summarise_crossings(steps_GNS: np.ndarray, horizon: int) -> list[list[Crossing]]:
    """[gamma][n] `Crossing`s of a [gamma, n, seed] array of crossing steps."""
    return [[Crossing(tuple(float(s) for s in row), int(horizon)) for row in per_gamma]
            for per_gamma in np.asarray(steps_GNS, dtype=float)]


def values_at(results: SimResults, step: int, metric: str = "mret", *,
              method: str | None = None) -> np.ndarray:
    """[gamma, n, seed] values of `metric` at a recorded `step`."""
    where = np.flatnonzero(np.asarray(results.steps) == step)
    if where.size == 0:
        raise CatsimError(f"step {step} was not recorded (recorded: every "
                          f"{int(results.steps[1] - results.steps[0]) if len(results.steps) > 1 else 0} "
                          f"steps up to {int(results.steps[-1])})")
    return results.sel(metric, method=method or results.methods[0])[..., int(where[0])]


def band_windows(steps_S: Sequence[int], values_S: Sequence[float], low: float, high: float
                 ) -> list[tuple[int, int]]:
    """Maximal runs of consecutive records with low <= value <= high, as (first, last) steps."""
    inside = (np.asarray(values_S) >= low) & (np.asarray(values_S) <= high)
    steps = np.asarray(steps_S)
    out, start = [], None
    for i, flag in enumerate(inside):
        if flag and start is None:
            start = i
        if start is not None and (not flag or i == len(inside) - 1):
            last = i if flag else i - 1
            out.append((int(steps[start]), int(steps[last])))
            start = None
    return out


__all__ = ["HALF_LOSS_LEVEL", "Crossing", "band_windows", "crossing_steps", "first_crossing",
           "summarise_crossings", "values_at"]
