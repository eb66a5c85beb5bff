"""`catsim llm compare`: issue 9's evaluation — GRPO vs F-GRPO vs asym-GRPO on Maze with difficulty
levels, several seeds: steps to a target training reward (and held-out accuracy), pass@1/10/16,
pass@k by level, the article's `--k 10` lines, paired tests, safeguard warnings; one command.

It is `catsim llm pipeline` with `PipelineConfig.compare()` (every pipeline option applies):

    catsim llm compare --out runs/asym-compare --publish figures/asym-grpo   # CPU scale: ~12 min warm-up + ~15 min
    catsim llm compare --out runs/asym-smoke --quick                          # seconds per run, numbers mean nothing
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from catsim.cli.llm.pipeline import add_pipeline_options, base_models_from_args, config_from_args

PUBLISHED = ("report.md", "results.json", "comparison.png", "passk_curves.png", "training_dynamics.png")


def register(subparsers) -> None:
    parser = subparsers.add_parser("compare", help="GRPO vs F-GRPO vs asym-GRPO: convergence, pass@k, levels",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the seconds-per-run smoke configuration")
    add_pipeline_options(parser)
    parser.add_argument("--publish", metavar="DIR", help=f"also copy {', '.join(PUBLISHED)} into DIR")
    parser.set_defaults(func=run)


def run(args) -> int:
    from catsim.llm.pipeline import PipelineConfig, run_pipeline

    pc = config_from_args(PipelineConfig.compare_quick() if args.quick else PipelineConfig.compare(), args)
    report = run_pipeline(args.out, config=pc, base_models=base_models_from_args(args), progress=not args.quiet)
    print(report.read_text())
    print(f"report: {report}")
    if args.publish:
        target = Path(args.publish)
        target.mkdir(parents=True, exist_ok=True)
        for name in PUBLISHED:
            shutil.copyfile(report.parent / name, target / name)
        print(f"published: {', '.join(str(target / n) for n in PUBLISHED)}")
    return 0
