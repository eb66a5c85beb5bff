"""The paper's Figure 2 end to end: a resumable simulator sweep, the figure and the final-state
table (what `catsim sweep` and `catsim reproduce` run).

    from catsim.experiments.fig2 import reproduce
    out = reproduce("runs/fig2-quick", quick=True)     # {"results", "figure", "table", "seconds"}
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

from catsim.files import write_text
from catsim.plots.fig2 import plot_fig2
from catsim.sim.analysis import format_table
from catsim.sim.config import (
    PAPER_GAMMAS,
    PAPER_GROUP_SIZES,
    PAPER_SEEDS,
    SCENARIO_GRIDS,
    SCENARIOS,
    SimConfig,
    scenario,
)
from catsim.sim.results import SimResults
from catsim.sim.sweep import sweep

QUICK_GROUP_SIZES = (2, 8, 32, 256, 2048, 8192, 131072)


@dataclasses.dataclass(frozen=True)
class SweepOutput:
    """What `run_sweep` wrote: the results, one figure and one table per method."""

    results: SimResults  # the combined results of every method (also at `results_path`)
    results_path: Path | None  # <out>/results.npz (None: a part's share, nothing assembled)
    figures: tuple[Path, ...]  # one Fig. 2 per method
    table: str  # the final-state tables of every method (also at <out>/table.txt)
    seconds: float  # wall time of the sweep itself
    notes: tuple[str, ...] = ()  # one-line remarks (e.g. netCDF not written)


def is_full_sweep(config: SimConfig, group_sizes: Sequence[int], gammas: Sequence[float], seeds,
                  low_lr_gammas: Sequence[float] | None = None) -> bool:
    """Whether a sweep is a named scenario's full Fig. 2 grid, unmodified (its grid of N, γ ∈ {0, 1},
    `PAPER_SEEDS` seeds, the scenario's steps and settings; only the recording interval `log_every`
    may differ): the run whose figure the repository's figures/ holds."""
    base = SCENARIOS.get(config.method)
    return (base is not None and dataclasses.replace(config, log_every=base.log_every) == base
            and tuple(int(n) for n in group_sizes) == SCENARIO_GRIDS[config.method]
            and tuple(float(g) for g in gammas) == PAPER_GAMMAS
            and isinstance(seeds, int) and seeds == PAPER_SEEDS and not low_lr_gammas)


def run_sweep(config: SimConfig, out_dir, *, group_sizes: Sequence[int], gammas: Sequence[float],
              seeds=4, low_lr_gammas: Sequence[float] | None = None, figures_dir=None,
              figure_name: str | None = None, resume: bool = True, progress: bool = True,
              shard: bool = False, log=None, log_to=(), part: tuple[int, int] | None = None) -> SweepOutput:
    """`catsim.sim.sweep.sweep` (`log_to`: sinks of its per-cell log), then results.nc (when xarray can write it), Fig. 2 per method
    (`figures_dir/fig2_<method>.png`, or `figure_name`) and the table (`out_dir/table.txt`).

    figures_dir None: figures/ for a full scenario sweep (`is_full_sweep`), else `out_dir`, so a
    reduced run never replaces a published figure.

    `part=(I, P)`: compute part I's share of the cells only (`sweep(part=...)`); no results
    file, figure or table (results: the share, or None when it has no cell)."""
    out = Path(out_dir)
    if figures_dir is None:
        figures_dir = "figures" if is_full_sweep(config, group_sizes, gammas, seeds, low_lr_gammas) else out
    t0 = time.perf_counter()
    results = sweep(config, out, group_sizes=group_sizes, gammas=gammas, seeds=seeds,
                    low_lr_gammas=low_lr_gammas, resume=resume, progress=progress, shard=shard,
                    log=log, log_to=log_to, part=part)
    seconds = time.perf_counter() - t0
    if part is not None:
        return SweepOutput(results, None, (), "", seconds)
    notes = []
    try:
        results.save_netcdf(out / "results.nc")
    except Exception as err:  # noqa: BLE001 - the .npz is the file of record; netCDF is a bonus
        notes.append(f"note: results.nc not written ({err})")
    figures = []
    for method in results.methods:
        name = f"fig2_{method}.png"
        if figure_name:
            name = figure_name if len(results.methods) == 1 else f"{Path(figure_name).stem}_{method}.png"
        figures.append(plot_fig2(results, Path(figures_dir) / name, method=method))
    table = "\n\n".join(format_table(results, method) for method in results.methods)
    write_text(out / "table.txt", table + "\n")
    return SweepOutput(results, out / "results.npz", tuple(figures), table, seconds, tuple(notes))


def reproduce(out_dir, quick: bool = True, *, progress: bool = True, log=print) -> dict:
    """Reproduce Fig. 2 with the `paper` scenario and write the figure and table to `out_dir`.

    quick=True: N ∈ QUICK_GROUP_SIZES, γ ∈ {0, 1}, 1 seed, 1000 steps (a few minutes on 2 CPU
    cores); quick=False: the full grid (17 N × 2 γ × 4 seeds). Resumable (cells in out_dir).

    Returns {"results": SimResults, "figure": Path, "table": Path, "seconds": float}.
    """
    out = Path(out_dir)
    cfg = dataclasses.replace(scenario("paper"), log_every=10)
    sizes, seeds = (QUICK_GROUP_SIZES, 1) if quick else (PAPER_GROUP_SIZES, 4)
    t0 = time.perf_counter()
    results = sweep(cfg, out, group_sizes=sizes, gammas=PAPER_GAMMAS, seeds=seeds,
                    progress=progress, log=log)
    seconds = time.perf_counter() - t0
    figure = plot_fig2(results, out / "fig2.png")
    table = format_table(results)
    write_text(out / "fig2_table.txt", table + "\n")
    if log:
        log(table)
        log(f"figure: {figure}  ({seconds:.1f} s)")
    return {"results": results, "figure": figure, "table": out / "fig2_table.txt",
            "seconds": seconds}
