"""`catsim sweep`: the paper's Fig. 2 grid, resumable, with figure and table."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from catsim.cli._simargs import add_config_arguments, config_from_args, gammas, group_sizes


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="run the Fig. 2 grid (N = 2…131072, γ ∈ {0, 1}, 4 seeds) and plot it",
        description="Run a scenario over a grid of group sizes, γ values and seeds. Each N is a "
                    "cell saved under OUT/cells; an interrupted sweep resumes. Writes "
                    "OUT/results.npz (+ results.nc), the Fig. 2 figure and the final-state table.")
    parser.add_argument("--out", default=None, help="output folder (default runs/sweep-<scenario>)")
    parser.add_argument("--n", default=None,
                        help="group sizes (default: the scenario's grid, 2^1:2^17 for paper)")
    parser.add_argument("--gamma", default="0,1", help="γ values (default 0,1)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0…K−1 (default 4)")
    parser.add_argument("--figures-dir", default="figures", help="where fig2 goes (default figures)")
    parser.add_argument("--figure-name", default=None, help="file name (default fig2_<method>.png)")
    parser.add_argument("--no-resume", action="store_true", help="recompute every cell")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--shard", action=argparse.BooleanOptionalAction, default=True,
                        help="split each cell's runs over all local devices (default on; "
                             "results are bit-identical either way)")
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help="CPU cores to use as JAX devices (default: all; 1 = one device)")
    add_config_arguments(parser)
    parser.set_defaults(func=run, log_every=10)


def run(args) -> int:
    from catsim.plots.fig2 import plot_fig2
    from catsim.sim.config import SCENARIO_GRIDS
    from catsim.sim.engine import use_cpu_cores
    from catsim.sim.sweep import format_table, sweep

    if args.shard:
        use_cpu_cores(args.cpu_devices)
    cfg = config_from_args(args)
    sizes = group_sizes(args.n) if args.n else list(SCENARIO_GRIDS[args.scenario])
    out = Path(args.out or f"runs/sweep-{args.scenario}")
    t0 = time.perf_counter()
    results = sweep(cfg, out, group_sizes=sizes, gammas=gammas(args.gamma),
                    seeds=args.seeds, resume=not args.no_resume, progress=not args.no_progress,
                    shard=args.shard, log=lambda m: print(m, file=sys.stderr))
    seconds = time.perf_counter() - t0
    try:
        results.save_netcdf(out / "results.nc")
    except Exception as err:  # noqa: BLE001 - the .npz is the file of record; netCDF is a bonus
        print(f"note: results.nc not written ({err})", file=sys.stderr)
    name = args.figure_name or f"fig2_{results.methods[0]}.png"
    figure = plot_fig2(results, Path(args.figures_dir) / name)
    table = format_table(results)
    (out / "table.txt").write_text(table + "\n")
    print(table)
    print(f"results: {out / 'results.npz'}   figure: {figure}   wall time: {seconds:.1f} s")
    return 0
