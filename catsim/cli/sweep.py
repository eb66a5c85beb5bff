"""`catsim sweep`: the paper's Fig. 2 grid, resumable, with figure and table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from catsim.cli._simargs import (
    add_config_arguments,
    config_from_args,
    gammas,
    group_sizes,
    low_lr_gammas,
)

EXAMPLE = """examples:
  catsim sweep                                        # the full Fig. 2 grid -> figures/fig2_paper.png
  catsim sweep --n 2,32,256 --seeds 1 --gamma 0 --low-lr-gamma 0,0.5 --out runs/lowlr
                                                      # a reduced grid -> runs/lowlr/fig2_*.png"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="run the Fig. 2 grid (N = 2…131072, γ ∈ {0, 1}, 4 seeds) and plot it",
        description="Run a scenario over a grid of group sizes, γ values, App. N control values\n"
                    "and seeds. Each (method, N) is a cell saved under OUT/cells; an interrupted\n"
                    "sweep resumes. Writes OUT/results.npz (+ results.nc), one Fig. 2 per method\n"
                    "and the final-state table (OUT/table.txt).",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="output folder (default: runs/sweep-<scenario>)")
    parser.add_argument("--n", default=None,
                        help="group sizes (default: the scenario's grid, 2^1:2^17 for paper)")
    parser.add_argument("--gamma", default="0,1", help="γ values (default: 0,1)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0…K−1 (default: 4)")
    parser.add_argument("--figures-dir", default=None,
                        help="where fig2 goes (default: figures/ for a scenario's full grid; for a "
                             "reduced grid, other seeds, steps or settings: the --out folder)")
    parser.add_argument("--figure-name", default=None,
                        help="file name (default: fig2_<method>.png; with several methods, "
                             "<name>_<method>.png)")
    parser.add_argument("--study", choices=("fig2", "methods"), default="fig2",
                        help="fig2: the grid above; methods: every rare-mass fix at its paper's "
                             "setting (catsim.experiments.methods; --gamma ignored) (default: fig2)")
    parser.add_argument("--no-resume", action="store_true", help="recompute every cell (default: resume)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown)")
    parser.add_argument("--shard", action=argparse.BooleanOptionalAction, default=True,
                        help="split each cell's runs over all local devices for N <= 2048 (larger "
                             "N run faster on one); results are bit-identical (default: on)")
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help="CPU cores to use as JAX devices; 1 = one device (default: all)")
    from catsim.tracking import add_log_to_argument

    add_log_to_argument(parser)  # one record per cell: OUT/sweep_log.jsonl
    add_config_arguments(parser, default_log_every=10)
    parser.set_defaults(func=run)


def run(args) -> int:
    from catsim.experiments.fig2 import run_sweep
    from catsim.sim.config import SCENARIO_GRIDS
    from catsim.sim.engine import use_cpu_cores

    cfg = config_from_args(args)
    controls = low_lr_gammas(args)
    sizes = group_sizes(args.n) if args.n is not None else list(SCENARIO_GRIDS[args.scenario])
    gamma_values = gammas(args.gamma)
    if args.shard:
        use_cpu_cores(args.cpu_devices)
    out = Path(args.out or f"runs/sweep-{args.scenario}")
    if args.study == "methods":
        from catsim.experiments.methods import run_methods_study

        study = run_methods_study(cfg, out, group_sizes=sizes, seeds=args.seeds, figures_dir=args.figures_dir,
                                  resume=not args.no_resume, progress=not args.no_progress, shard=args.shard,
                                  log=lambda m: print(m, file=sys.stderr))
        print(study.table())
        print(f"study: {out / 'methods.txt'}   wall time: {study.seconds:.1f} s")
        return 0
    done = run_sweep(cfg, out, group_sizes=sizes, gammas=gamma_values, seeds=args.seeds,
                     low_lr_gammas=controls, figures_dir=args.figures_dir,
                     figure_name=args.figure_name, resume=not args.no_resume,
                     progress=not args.no_progress, shard=args.shard,
                     log=lambda m: print(m, file=sys.stderr), log_to=args.log_to)
    for note in done.notes:
        print(note, file=sys.stderr)
    print(done.table)
    print(f"results: {done.results_path}   figure: {', '.join(map(str, done.figures))}   "
          f"wall time: {done.seconds:.1f} s")
    return 0
