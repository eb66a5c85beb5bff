"""`catsim sweep`: the paper's Fig. 2 grid, resumable, with figure and table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from catsim.cli._simargs import (
    DEFAULT_GAMMAS,
    add_config_arguments,
    config_from_args,
    group_sizes,
    low_lr_gammas,
    method_gammas,
)
from catsim.cli.args import positive_int
from catsim.cli.vocabulary import add_format_argument, add_progress_argument, alias
from catsim.objectives import focal

EXAMPLE = """examples:
  catsim sweep                                        # the full Fig. 2 grid -> figures/fig2_paper.png
  catsim sweep --group-size 2,32,256 --seeds 1 --gamma 0 --low-lr-gamma 0,0.5 --out runs/lowlr
                                                      # a reduced grid -> runs/lowlr/fig2_*.png
  catsim sweep --out runs/big --part 0/4              # job array: part 0 of 4 computes its cells
  catsim sweep --out runs/big                         # after every part: only assembles
  catsim sweep --out runs/big --distributed --coordinator host0:1234 --num-processes 2 --process-id 0
                                                      # one of 2 processes; process 0 assembles"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="run a resumable grid of N, γ and seeds and plot it (Fig. 2; --study horizons, methods)",
        description="Run a scenario over a grid of group sizes, γ values, App. N control values\n"
                    "and seeds. Each (method, N) is a cell saved under OUT/cells; an interrupted\n"
                    "sweep resumes. Writes OUT/results.npz (+ results.nc) and the final-state table\n"
                    "(OUT/table.txt) of every cell in OUT (earlier calls' too), and one Fig. 2 per method.",
        epilog=EXAMPLE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", choices=("fig2", "horizons", "methods"), default="fig2",
                        help="fig2: the grid at the scenario's horizon; horizons: Mret(N, t) up to "
                             "10,000 steps, heat maps and half-loss steps; methods: every rare-mass "
                             "fix at its paper's setting (each row sets its γ: --gamma refused) "
                             "(default: fig2)")
    parser.add_argument("--out", default=None, help="output folder (default: runs/sweep-<scenario>)")
    parser.add_argument("--group-size", dest="n", default=None,
                        help="group sizes N (default: the scenario's grid, 2^1:2^17 for paper)")
    alias(parser, "--n", "--group-size")
    parser.add_argument("--gamma", default=None,
                        help=f"γ values (default: {DEFAULT_GAMMAS}; {focal.NAMED_GAMMA:g} for --method f-*)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0…K−1 (default: 4)")
    parser.add_argument("--figures", dest="figures_dir", default=None,
                        help="where fig2 goes (default: the --out folder; figures/, the published "
                             "figures, for a scenario's full grid run without --out)")
    alias(parser, "--figures-dir", "--figures")
    parser.add_argument("--figure-name", default=None,
                        help="file name (default: fig2_<method>.png; with several methods, "
                             "<name>_<method>.png)")
    parser.add_argument("--no-resume", action="store_true", help="recompute every cell (default: resume)")
    add_progress_argument(parser, default="shown")
    add_format_argument(parser, what="the final-state table of every cell")
    parser.add_argument("--shard", action=argparse.BooleanOptionalAction, default=True,
                        help="split each cell's runs over all local devices for N <= 2048 (larger "
                             "N run faster on one); results are bit-identical (default: on)")
    parser.add_argument("--cpu-devices", type=positive_int, default=None,
                        help="CPU cores to use as JAX devices; 1 = one device (default: all)")
    parser.add_argument("--part", default=None, metavar="I/P",
                        help="compute only part I of P of the cells and exit (job arrays; without a "
                             "coordinator); a later run without --part assembles (default: all cells)")
    parser.add_argument("--rerender", action="store_true",
                        help="--study methods: run nothing; redraw methods_vs_n.png and methods_frontier.png "
                             "from the methods.json in the figures folder (default: --out) (default: off)")
    from catsim.cli.llm._distributed import add_distributed_options
    from catsim.tracking import add_log_to_argument

    add_distributed_options(parser, mesh=False)  # each process computes its share of the cells

    add_log_to_argument(parser)  # one record per cell: OUT/sweep_log.jsonl
    add_config_arguments(parser, default_log_every=10)
    parser.set_defaults(func=run)


def run(args) -> int:
    if args.study == "horizons":
        from catsim.cli.horizons import run as run_horizons

        return run_horizons(args)
    if args.rerender:
        return _rerender_methods(args)
    from catsim.cli.llm._distributed import check_distributed_args, initialize_from_args
    from catsim.errors import CatsimError
    from catsim.experiments.fig2 import run_sweep
    from catsim.sim.config import SCENARIO_GRIDS
    from catsim.sim.engine import use_cpu_cores
    from catsim.sim.sweep_parts import parse_part

    check_distributed_args(args)
    part = parse_part(args.part) if args.part is not None else None
    if part is not None and args.distributed:
        raise CatsimError("--part is for runs without a coordinator; with --distributed every "
                          "process computes its share of the cells")
    sizes = group_sizes(args.n) if args.n is not None else list(SCENARIO_GRIDS[args.scenario])
    if args.study == "methods":
        _check_methods_options(args)
    gamma_values = method_gammas(args, DEFAULT_GAMMAS)
    cfg = config_from_args(args, sizes)
    controls = low_lr_gammas(args)
    initialize_from_args(args)  # joins the job when --distributed, before JAX's first operation
    if args.shard:
        use_cpu_cores(args.cpu_devices)
    out = Path(args.out or f"runs/sweep-{args.scenario}")
    if args.study == "methods":
        from catsim.experiments.methods import run_methods_study

        study = run_methods_study(cfg, out, group_sizes=sizes, seeds=args.seeds, figures_dir=args.figures_dir,
                                  resume=not args.no_resume, progress=args.progress is not False,
                                  shard=args.shard, log=lambda m: print(m, file=sys.stderr))
        if args.format != "table":
            _print_study(study, args.format)
            return 0
        print(study.table())
        print(f"study: {out / 'methods.txt'}   wall time: {study.seconds:.1f} s")
        return 0
    say = print
    if args.distributed:
        part, say = _join_sweep(cfg, sizes, gamma_values, args.seeds, controls)
    options = dict(group_sizes=sizes, gammas=gamma_values, seeds=args.seeds, low_lr_gammas=controls,
                   figures_dir=args.figures_dir or (out if args.out else None), figure_name=args.figure_name,
                   progress=args.progress is not False, shard=args.shard,
                   log=lambda m: print(m, file=sys.stderr), log_to=args.log_to)
    done = run_sweep(cfg, out, resume=not args.no_resume, part=part, **options)
    if args.distributed:
        from catsim.llm.model.sharding import barrier, is_primary

        barrier("catsim-sweep-cells")  # every process's cells are written
        if not is_primary():
            return 0
        done = run_sweep(cfg, out, resume=True, **options)  # finds every cell: only assembles
    elif part is not None:
        count = 0 if done.results is None else len(done.results.methods) * len(done.results.group_sizes)
        print(f"part {part[0]}/{part[1]}: {count} cell{'s' if count != 1 else ''} in {out / 'cells'} ({done.seconds:.1f} s); "
              f"when every part is done, `catsim sweep --out {out}` with the same settings assembles")
        return 0
    for note in done.notes:
        print(note, file=sys.stderr)
    if args.format != "table":
        from catsim.cli.simulate import final_records, print_records

        if done.results is not None:
            print_records(final_records(done.results), args.format)
        return 0
    say(done.table)
    say(f"results: {done.results_path}   figure: {', '.join(map(str, done.figures))}   "
        f"wall time: {done.seconds:.1f} s")
    return 0


def _print_study(study, fmt: str) -> None:
    """The methods study as JSON (every number) or CSV (seed means per rule and N)."""
    if fmt == "json":
        import json

        print(json.dumps(study.to_json()))
        return
    from catsim.cli.vocabulary import write_csv

    mret, qpos = study.mean("mret"), study.mean("qpos")
    write_csv([{"method": name, "n": n, "mret": float(mret[i, j]), "qpos": float(qpos[i, j])}
               for i, name in enumerate(study.methods) for j, n in enumerate(study.group_sizes)])


def _rerender_methods(args) -> int:
    """`--rerender`: the methods study's figures redrawn from its methods.json, nothing run."""
    from catsim.errors import CatsimError
    from catsim.experiments.methods import rerender_methods_study

    if args.study != "methods":
        raise CatsimError("--rerender redraws a methods study's figures: give it with --study methods")
    if args.n is not None:  # it would not act: the figures draw the N methods.json holds
        raise CatsimError("--rerender draws the group sizes methods.json holds; leave out the group sizes")
    folder = Path(args.figures_dir or args.out or f"runs/sweep-{args.scenario}")
    for path in rerender_methods_study(folder / "methods.json", folder):
        print(path)
    return 0


def _check_methods_options(args) -> None:
    """`--study methods` defines each row's rule itself: refuse the options that would change them
    (one line naming them), before any work."""
    from catsim.errors import CatsimError
    from catsim.experiments.methods import ROW_FIELDS

    given = [f"--{f.replace('_', '-')}" for f in ROW_FIELDS if getattr(args, f, None) not in (None, False)]
    given += ["--gamma-schedule"] * (args.gamma_schedule != "constant") + ["--update"] * (args.update != "standard")
    given += [f"--method {args.surrogate}"] * str(args.surrogate).startswith(focal.FOCAL_PREFIX)  # it sets γ
    if given:
        raise CatsimError(f"--study methods runs every rule under its own label and sets {', '.join(given)} "
                          f"per row itself; leave {'it' if len(given) == 1 else 'them'} out")


def _join_sweep(cfg, sizes, gamma_values, seeds, controls):
    """(this process's part, print on process 0) of a `jax.distributed` sweep; every process
    refuses (CatsimError, before any work) when the processes were given different settings."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from catsim.cli.llm._distributed import writer_print
    from catsim.errors import CatsimError
    from catsim.sim.sweep import sweep_settings
    from catsim.sim.sweep_parts import settings_signature

    mine = int(settings_signature(sweep_settings(cfg, sizes, gamma_values, seeds, controls))[:7], 16)
    every = np.asarray(multihost_utils.process_allgather(np.int32(mine))).reshape(-1)
    if len(set(every.tolist())) > 1:
        differ = [i for i, s in enumerate(every.tolist()) if s != every[0]]
        raise CatsimError(f"the processes of this sweep were given different settings (process 0 and "
                          f"process{'es' if len(differ) > 1 else ''} {', '.join(map(str, differ))}): "
                          f"run the same command on every process")
    return (jax.process_index(), jax.process_count()), writer_print()
