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

import numpy as np

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

    results: SimResults  # every finished cell in the folder, all methods (also at `results_path`)
    results_path: Path | None  # <out>/results.npz (None: a part's share, nothing assembled)
    figures: tuple[Path, ...]  # one Fig. 2 per method of this call
    table: str  # the final-state tables of every method in the folder (also at <out>/table.txt)
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

    results.npz/.nc and the table hold every finished cell in `out_dir` (every method and N swept
    into it, `sweep`), so a second sweep into one folder adds to its summary instead of replacing
    it; each method's table and figure show the N it has. Figures are drawn for this call's
    methods (another method's figure was drawn by its own call and is left as it is).

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
    asked, results = results.methods, SimResults.load(out / "results.npz")
    notes = []
    try:
        results.save_netcdf(out / "results.nc")
    except Exception as err:  # noqa: BLE001 - the .npz is the file of record; netCDF is a bonus
        notes.append(f"note: results.nc not written ({err})")
    figures = []
    for method in asked:
        name = f"fig2_{method}.png"
        if figure_name:
            name = figure_name if len(asked) == 1 else f"{Path(figure_name).stem}_{method}.png"
        figures.append(plot_fig2(method_results(results, method), Path(figures_dir) / name, method=method))
    table = "\n\n".join(format_table(method_results(results, method), method) for method in results.methods)
    write_text(out / "table.txt", table + "\n")
    return SweepOutput(results, out / "results.npz", tuple(figures), table, seconds, tuple(notes))


def method_results(results: SimResults, method: str) -> SimResults:
    """The cells of one method: its N only (a folder's results are NaN at a (method, N) never
    swept, which would otherwise be a row of NaN in its table and figure)."""
    i = results.methods.index(method)
    have = [j for j in range(len(results.group_sizes)) if not np.isnan(results.data["qpos"][i, :, j]).all()]
    data = {name: array[i:i + 1][:, :, have] for name, array in results.data.items()}
    return SimResults((method,), results.gammas, tuple(results.group_sizes[j] for j in have), results.seeds,
                      results.steps, data, {k: v for k, v in results.attrs.items() if k == method})


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
