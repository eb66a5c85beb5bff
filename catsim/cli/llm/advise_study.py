"""`catsim llm advise-study`: check `catsim llm advise` against training — warm up on paths,
predict each prompt's Lemma 3.1 risk, run GRPO at N = 2, 8, 32 (3 seeds), and measure which
prompts lost rare-answer mass (Spearman ρ and a calibration table; docs/advise.md).

examples:

    catsim llm advise-study --out runs/advise-study --figures figures/advise-study   # CPU, ~6 min; resumable
    catsim llm advise-study --out runs/advise-smoke --quick  # seconds; numbers mean nothing
"""

from __future__ import annotations

import argparse
import json

from catsim.cli.vocabulary import add_format_argument, add_progress_argument, alias, write_csv


def register(subparsers) -> None:
    parser = subparsers.add_parser("advise-study", help="validate advise's predictions against GRPO training",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="study directory (reruns reuse finished runs)")
    parser.add_argument("--figures", default=None,
                        help="where results.json and advise_study.png go (default: --out)")
    parser.add_argument("--quick", action="store_true", help="the seconds-long smoke configuration (default: the full study)")
    add_progress_argument(parser, default="shown")
    add_format_argument(parser, what="the per-N summary (json: every number of results.json)")
    alias(parser, "--quiet", "--no-progress")
    from catsim.progress import RL_FIELDS, SFT_FIELDS, fields_help

    parser.epilog = fields_help(SFT_FIELDS, RL_FIELDS)  # what the progress shows
    parser.set_defaults(func=run)


def run(args) -> int:
    from catsim.experiments.advise_study import StudyConfig, check_out_dir, run_study

    check_out_dir(args.out)
    if args.figures:
        check_out_dir(args.figures, "--figures")
    results = run_study(args.out, StudyConfig.quick() if args.quick else None, progress=args.progress is not False,
                        figures_dir=args.figures)
    if args.format == "json":
        print(json.dumps(results))
        return 0
    if args.format == "csv":
        write_csv([{"n": n, **{f"{key}{part}": (None if v is None else v[i]) for key, v in row.items()
                               if isinstance(v, (list, tuple)) or v is None for i, part in enumerate(("", "_std"))}}
                   for n, row in results["summary"].items()])
        return 0
    print(f"{results['prompts_with_rare_subset']} of {results['prompts']} train prompts have a rare subset "
          f"(rule {results['rule']})")
    print("   N   Spearman(risk, loss)   Spearman(visits·risk, loss)   share lost   mean Δlog τ")
    spread = len(results["config"]["seeds"]) > 1  # one seed has no spread to show
    for n, row in results["summary"].items():
        def cell(key, row=row):
            v = row[key]
            return "—" if v is None else f"{v[0]:+.3f} ± {v[1]:.3f}" if spread else f"{v[0]:+.3f}"
        print(f"{n:>4}   {cell('spearman_risk_vs_loss'):>20}   {cell('spearman_visits_x_risk_vs_loss'):>27}"
              f"   {cell('lost_share'):>10}   {cell('mean_delta_log_tau'):>11}")
    print("calibration (predicted risk bin → share lost):",
          json.dumps([(round(c["risk_mean"], 3), round(c["lost_share"], 3), c["prompts"])
                      for c in results["calibration"]]))
    where = args.figures or args.out
    print(f"results: {where}/results.json, figure: {where}/advise_study.png")
    return 0
