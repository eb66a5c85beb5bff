"""`catsim sweep --study horizons`: Mret(N, t) up to 10,000 steps (catsim.experiments.horizons).

Uses the sweep's options: --group-size, --gamma, --seeds, --steps (default 10,000 here), --log-every,
--out, --figures, --no-resume, --progress, --shard / --cpu-devices and the scenario and
update options."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

from catsim.cli._simargs import DEFAULT_GAMMAS, config_from_args, group_sizes, method_gammas
from catsim.errors import CatsimError


def run(args) -> int:
    from catsim.experiments.horizons import HORIZON_STEPS, run_horizons
    from catsim.sim.config import SCENARIO_GRIDS
    from catsim.sim.engine import use_cpu_cores

    if args.low_lr_gamma is not None or args.figure_name is not None or args.log_to:
        raise CatsimError("--study horizons takes neither --low-lr-gamma, --figure-name nor --log-to "
                          "(it writes mret_heatmap.png and half_loss.png)")
    if args.format != "table":
        raise CatsimError(f"--study horizons prints a table only (its numbers are in OUT/horizons.npz); "
                          f"--format {args.format} is for the fig2 and methods studies")
    gamma_values = method_gammas(args, DEFAULT_GAMMAS)
    sizes = group_sizes(args.n) if args.n is not None else list(SCENARIO_GRIDS[args.scenario])
    cfg = config_from_args(args, sizes)
    if args.steps is None:
        cfg = dataclasses.replace(cfg, steps=HORIZON_STEPS)  # validates steps % log_every
    if args.shard:
        use_cpu_cores(args.cpu_devices)
    out = Path(args.out or f"runs/horizons-{args.scenario}")
    command = "catsim " + shlex.join(sys.argv[1:]) if sys.argv[1:] else None
    done = run_horizons(cfg, out, group_sizes=sizes, gammas=gamma_values, seeds=args.seeds,
                        figures_dir=args.figures_dir or (out if args.out else None), resume=not args.no_resume,
                        progress=args.progress is not False, shard=args.shard,
                        log=lambda m: print(m, file=sys.stderr), command=command)
    print(done.table)
    print(f"files: {', '.join(map(str, done.files))}   sweep wall time: {done.seconds:.1f} s")
    return 0
