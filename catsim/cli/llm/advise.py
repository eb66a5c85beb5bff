"""`catsim llm advise`: which prompts will lose their rare correct answers at group size N, and
which N and γ to use — Lemma 3.1 applied to a model's own samples.

examples:

    catsim llm advise --model runs/warmup --task paths --samples 64 --group-size 2,4,8,16,32,64
    catsim llm advise --model runs/warmup --rare tail:0.2 --format json > advice.json

Per prompt, μ̂ (correct share) and τ̂ (share of its rare correct answers: rule share:q = answers
holding at most q of the prompt's correct mass, tail:q = the rarest answers holding at most q of
it together) are estimated from n samples; per N the table gives the share of active groups over all
prompts (Pr(active) = 1 − μ̂^N − (1 − μ̂)^N), the mean risk Pr(group active and
rare answers missed) with a 90 % bootstrap band, the share of prompts in the concentration regime,
the median number of visits until a group samples a rare answer while active, and F-GRPO's mean
focal weight (the rare-answer columns are over the prompts with a rare subset; "—" where none has
one). A paragraph of reasoning follows, saying when the model is too weak for RL at these N, and,
with --format table or --figure, a figure (risk vs N).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from catsim.cli.vocabulary import add_format_argument, alias, write_csv
from catsim.errors import CatsimError


def register(subparsers) -> None:
    parser = subparsers.add_parser("advise", help="group size and γ advice from Lemma 3.1 on a model's samples",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model directory with catsim_task.json (e.g. a warm-up)")
    from catsim.cli.llm._task_args import add_task_arguments

    add_task_arguments(parser, required=False)  # default: the task recorded in the model directory
    parser.add_argument("--samples", dest="n", type=int, default=64, help="samples per prompt (default 64)")
    parser.add_argument("--prompts", type=int, default=64, help="prompts sampled (default 64)")
    parser.add_argument("--split", choices=("train", "heldout"), default="train",
                        help="prompt split (default train: the prompts RL trains on)")
    parser.add_argument("--group-size", dest="group_sizes", default="2,4,8,16,32,64",
                        help="candidate N, comma list or 2^a:2^b (default 2,4,8,16,32,64)")
    parser.add_argument("--rare", default="share:0.1",
                        help="rare rule, share:q or tail:q (default share:0.1)")
    parser.add_argument("--target-risk", type=float, default=0.1,
                        help="largest acceptable mean risk for the advice (default 0.1)")
    parser.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples (default 200)")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="completion cap, >= 1 (default: the task's longest answer + 1)")
    parser.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed (default 0)")
    add_format_argument(parser, what="the advice (csv: the table's rows, one per N)")
    for old, new in (("--n", "--samples"), ("--group-sizes", "--group-size")):
        alias(parser, old, new)
    parser.add_argument("--figure", default=None,
                        help="where the risk-vs-N figure goes ('none' to skip; default: MODEL/advise_risk.png, "
                             "in the --model directory, with --format table; no figure with csv or json)")
    parser.set_defaults(func=run)


def _check(args) -> tuple[list[int], object]:
    from catsim.cli.args import parse_int_list
    from catsim.theory.planning import RareRule

    sizes = parse_int_list(args.group_sizes, "--group-size")
    if any(n < 1 or n > 2**20 for n in sizes):
        raise CatsimError("--group-size: each N must lie in [1, 2^20]")
    for name, flag in (("n", "--samples"), ("prompts", "--prompts"), ("bootstrap", "--bootstrap")):
        value = getattr(args, name)
        if value < 1 or value > 100_000:
            raise CatsimError(f"{flag} must lie in [1, 100000], got {value}")
    if args.n < 2:
        raise CatsimError("--samples must be at least 2 to estimate answer masses")
    if not 0 < args.target_risk < 1:
        raise CatsimError(f"--target-risk must lie in (0, 1), got {args.target_risk}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise CatsimError(f"--max-new-tokens must be >= 1 (omit it for the task's longest answer + 1), "
                          f"got {args.max_new_tokens}")
    if not (Path(args.model) / "config.json").is_file():
        raise CatsimError(f"{args.model}: not a model directory (no config.json)")
    if args.task is None and not (Path(args.model) / "catsim_task.json").is_file():
        raise CatsimError(f"{args.model}: no catsim_task.json; give --task")
    chosen = args.figure is not None
    if not chosen:  # a JSON run writes only what it prints; a table's figure goes with its model, not into the cwd
        args.figure = str(Path(args.model) / "advise_risk.png") if args.format == "table" else "none"
    if args.figure.lower() != "none":
        parent = Path(args.figure).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise CatsimError(f"--figure: cannot write into {parent}" if chosen else
                              f"cannot write the figure into {parent}: give --figure PATH, or --figure none")
    return sorted(set(sizes)), RareRule.parse(args.rare)


def _fmt(x: float, spec: str) -> str:
    import math

    return format(x, spec) if math.isfinite(x) else "—".rjust(len(format(0.0, spec)))


def _table(advice) -> str:
    import numpy as np

    gammas = sorted(advice.focal_weights)
    rows = ["     N   active (all)   mean risk   90% band          active   concentration   median visits to rare"
            + "".join(f"   g(γ={g:g})" for g in gammas)]
    rare = advice.has_rare
    for k, n in enumerate(advice.group_sizes):
        steps = advice.median_steps_to_rare[k]
        gs = [float(np.nanmean(advice.focal_weights[g][rare, k])) if rare.any() else float("nan")
              for g in gammas]  # no rare prompt: no mean (shown as —)
        band = f"[{advice.mean_risk_lo[k]:.3f}, {advice.mean_risk_hi[k]:.3f}]" if rare.any() else "—"
        rows.append(f"{int(n):>6}   {_fmt(advice.active_share[k], '12.2f')}   {_fmt(advice.mean_risk[k], '9.3f')}   "
                    f"{band:<16}  "
                    f"{_fmt(advice.mean_active[k], '6.2f')}   {_fmt(advice.concentration_share[k], '>13.0%')}   "
                    f"{_fmt(steps, '>21.1f')}" + "".join(f"   {_fmt(g, '>8.2f')}" for g in gs))
    return "\n".join(rows)


def _records(advice) -> list[dict]:
    """The table's rows as records (one per N; g(γ) the mean focal weight over the rare prompts)."""
    import numpy as np

    rare = advice.has_rare
    rows = []
    for k, n in enumerate(advice.group_sizes):
        row = {"n": int(n), "active_share": float(advice.active_share[k]), "mean_risk": float(advice.mean_risk[k]),
               "mean_risk_lo": float(advice.mean_risk_lo[k]), "mean_risk_hi": float(advice.mean_risk_hi[k]),
               "mean_active": float(advice.mean_active[k]),
               "concentration_share": float(advice.concentration_share[k]),
               "median_steps_to_rare": float(advice.median_steps_to_rare[k])}
        for g in sorted(advice.focal_weights):
            row[f"g_gamma_{g:g}"] = float(np.nanmean(advice.focal_weights[g][rare, k])) if rare.any() else float("nan")
        rows.append(row)
    return rows


def run(args) -> int:
    from catsim.cli.llm._task_args import task_options
    from catsim.experiments.advise import advise_model

    sizes, rule = _check(args)
    advice, meta = advise_model(args.model, group_sizes=sizes, n=args.n, n_prompts=args.prompts,
                                split=args.split, rule=rule, n_boot=args.bootstrap, seed=args.seed,
                                target_risk=args.target_risk, max_new_tokens=args.max_new_tokens,
                                task_name=args.task, task_options=task_options(args))
    if args.figure.lower() != "none":
        from catsim.files import replacing
        from catsim.plots.advise import plot_risk

        with replacing(args.figure, suffix=".png") as tmp:
            plot_risk(advice, tmp)
    if args.format == "json":
        print(json.dumps({**meta, **advice.to_json()}, indent=1))
    elif args.format == "csv":
        write_csv(_records(advice))
    else:
        print(f"{meta['task']} {meta['split']}: {advice.mu.size} prompts x {advice.n_samples} samples; "
              f"mean μ̂ = {advice.mu.mean():.3f}; {int(advice.has_rare.sum())} prompts with a rare correct "
              f"subset (rule {advice.rule})")
        print(_table(advice))
        print()
        print(advice.reasoning)
        if args.figure.lower() != "none":
            print(f"figure: {args.figure}", file=sys.stderr)
    return 0
