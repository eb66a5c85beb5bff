"""`catsim llm compare`: GRPO vs F-GRPO vs asym-GRPO on Maze with difficulty levels, several seeds:
steps to a target training reward (and held-out accuracy), pass@1/10/16, pass@k by level, the
article's `--k 10` lines, paired tests, safeguard warnings; one command.

It is `catsim llm pipeline` with `PipelineConfig.compare()` (every pipeline option applies).

examples:
    catsim llm compare --out runs/asym-compare --publish figures/asym-grpo   # CPU scale: ~12 min warm-up + ~15 min
    catsim llm compare --out runs/asym-smoke --quick                          # seconds per run, numbers mean nothing
"""

from __future__ import annotations

import argparse

from catsim.cli.llm.pipeline import add_pipeline_options, base_models_from_args, config_from_args


def register(subparsers) -> None:
    from catsim.experiments.llm_compare import PUBLISHED
    from catsim.experiments.llm_pipeline import PipelineConfig

    parser = subparsers.add_parser("compare", help="train and compare GRPO, F-GRPO and asym-GRPO: convergence, pass@k, levels",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="the seconds-per-run smoke configuration (default: off)")
    add_pipeline_options(parser, PipelineConfig.compare(), PipelineConfig.compare_quick())
    parser.add_argument("--publish", metavar="DIR", help=f"also copy {', '.join(PUBLISHED)} into DIR (default: none)")
    from catsim.progress import RL_FIELDS, SFT_FIELDS, fields_help

    parser.epilog = fields_help(SFT_FIELDS, RL_FIELDS)  # what the progress shows
    parser.set_defaults(func=run)


def run(args) -> int:
    from catsim.experiments.llm_compare import run_compare
    from catsim.experiments.llm_pipeline import PipelineConfig

    pc = config_from_args(PipelineConfig.compare_quick() if args.quick else PipelineConfig.compare(), args)
    report, published = run_compare(args.out, config=pc, base_models=base_models_from_args(args),
                                    publish=args.publish,
                                    progress=args.progress)
    print(report.read_text())
    print(f"report: {report}")
    if published:
        print(f"published: {', '.join(str(p) for p in published)}")
    return 0
