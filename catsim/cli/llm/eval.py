"""`catsim llm eval`: unbiased pass@k (with bootstrap intervals) of one or more model dirs, and
optionally ΔNLL_rare / retained answer mass against a base model, a paired m-out-of-n test between
the first model and each other one, and a solved-then-forgotten ledger across the models in order.

    catsim llm eval runs/sft runs/grpo/model runs/fgrpo/model --samples 64 --k 1,8,64 --base runs/sft --test
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from catsim.cli.args import parse_int_list
from catsim.cli.llm._distributed import (
    add_distributed_options,
    check_distributed_args,
    initialize_from_args,
    mesh_from_args,
    writer_print,
)
from catsim.cli.llm.rl import add_common_model_options, task_spec_from_args
from catsim.cli.vocabulary import add_format_argument, add_progress_argument, alias, record_printer
from catsim.errors import CatsimError


def register(subparsers) -> None:
    parser = subparsers.add_parser("eval", help="score model dirs: pass@k, paired test, ΔNLL_rare, answer mass, forgetting ledger",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="Hugging Face model dirs (checkpoint order for the ledger)")
    add_common_model_options(parser)
    parser.add_argument("--samples", dest="n", type=int, default=64, help="samples per prompt n (default 64)")
    parser.add_argument("--k", default=None,
                        help="k values to print, comma list or 2^a:2^b (default: the powers of two up to --samples)")
    parser.add_argument("--prompts", type=int, default=128, help="prompts scored, 0 = the whole split (default: %(default)s)")
    parser.add_argument("--split", default="heldout", choices=("heldout", "train"),
                        help="task split to score (default: %(default)s)")
    parser.add_argument("--data-seed", type=int, default=None, help="task split seed (default: the task file's, else 0)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="completion cap (default: the task's longest answer + 1)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=256, help="rollouts per generate call (default: %(default)s)")
    parser.add_argument("--base", help="base model dir: adds ΔNLL_rare and retained answer mass")
    parser.add_argument("--rare-prompts", type=int, default=256, help="train prompts for the rare set (default: %(default)s)")
    parser.add_argument("--rare-samples", dest="rare_n", type=int, default=64,
                        help="base samples per prompt for the rare set (default: %(default)s)")
    parser.add_argument("--rare-quantile", type=float, default=0.01, help="rare share by base NLL (default: %(default)s)")
    parser.add_argument("--test", action="store_true", help="paired m-out-of-n test: each model vs the first")
    parser.add_argument("--m", type=int, default=None, help="m of the paired test (default n/4)")
    parser.add_argument("--iterations", type=int, default=50_000, help="subsampling iterations (default: %(default)s)")
    parser.add_argument("--ledger", action="store_true", help="solved-then-forgotten ledger across the models")
    parser.add_argument("--save", dest="json", metavar="FILE.json", help="also write every number to this JSON file")
    add_format_argument(parser, what="the pass@k table (json: every number)")
    add_progress_argument(parser)
    for old, new in (("--n", "--samples"), ("--rare-n", "--rare-samples"), ("--json", "--save"),
                     ("--quiet", "--no-progress")):
        alias(parser, old, new)
    add_distributed_options(parser)
    parser.set_defaults(func=run)


def check_model_dirs(paths) -> None:
    """Refuse a path that is not a model directory, naming it, before anything else is read: an
    empty folder is "not a model", not a model without a task file."""
    for path in paths:
        if not Path(path).is_dir():
            raise CatsimError(f"{path}: no such model directory")
        if not (Path(path) / "config.json").is_file():
            raise CatsimError(f"{path}: not a model directory (no config.json)")


def run(args) -> int:
    from catsim.llm import evaluate as ev
    from catsim.llm import metrics
    from catsim.llm.rundir import read_task_file, task_from_spec

    check_distributed_args(args)
    for flag in ("n", "prompts", "batch_size", "rare_prompts", "rare_n", "iterations"):
        value = getattr(args, flag)
        if value < (0 if flag == "prompts" else 1):
            shown = {"n": "samples", "rare_n": "rare_samples"}.get(flag, flag)
            raise CatsimError(f"--{shown.replace('_', '-')} must be {'>= 0' if flag == 'prompts' else 'positive'}, "
                              f"got {value}")
    if args.m is not None and not 1 <= args.m <= args.n:
        raise CatsimError(f"--m must lie in [1, --samples = {args.n}], got {args.m}")
    if args.json:
        from catsim.cli.main import check_output_path

        check_output_path(args.json, "--save")
    ks = (parse_int_list(args.k, "--k") if args.k is not None
          else [2**i for i in range(args.n.bit_length()) if 2**i <= args.n])
    if max(ks) > args.n:
        raise CatsimError(f"--k asks for k = {max(ks)} but --samples is {args.n}; need n >= k")
    check_model_dirs([*args.models, *([args.base] if args.base else [])])
    spec = task_spec_from_args(args) or read_task_file(args.models[0])
    task = task_from_spec(spec)
    data_seed = args.data_seed if args.data_seed is not None else int(spec.get("data_seed", 0))
    max_new = args.max_new_tokens or int(getattr(task, "max_answer_chars", 255)) + 1
    progress = args.progress  # None: a bar on a terminal, plain lines when stderr is a file
    kw = dict(n=args.n, ks=ks, n_prompts=args.prompts, split=args.split, data_seed=data_seed,
              max_new_tokens=max_new, seed=args.seed, batch_size=args.batch_size, chat_template=args.chat_template,
              progress=progress)
    initialize_from_args(args)  # every process samples over one mesh; process 0 prints and writes
    mesh, say = mesh_from_args(args), writer_print()
    report: dict = {"task": spec, "models": {}}
    base = rare = base_mass = None
    prompts = ev.eval_prompts(task, args.split, data_seed, args.prompts)
    if args.base:
        base = ev.load_policy(args.base, mesh=mesh)
        try:
            rare = ev.rare_correct_set(base, task, n_prompts=args.rare_prompts, n=args.rare_n,
                                       rare_quantile=args.rare_quantile, data_seed=data_seed, max_new_tokens=max_new,
                                       progress=progress)
            report["rare_set"] = {"size": int(rare.base_nll.size), "from_correct": rare.num_correct}
        except CatsimError as err:
            report["rare_set"] = {"error": str(err)}
        if task.correct_answers(prompts[0]) is not None:
            base_mass = ev.answer_mass_table(base, task, prompts)
    header = ["model"] + [f"pass@{k}" for k in ks] + (["ΔNLL_rare", "kept", "Mret"] if base else [])
    rows = [" | ".join(header)]  # printed once every model is loaded and scored: a refusal prints no table
    records = []  # the same rows for --format csv
    for path in args.models:
        policy = ev.load_policy(path, mesh=mesh)
        res = ev.evaluate_passk(policy, task, label=Path(path).name, **kw)
        if rare is not None:
            res["delta_nll_rare"] = ev.delta_nll_rare(policy, rare)
        if base_mass is not None:
            res["answer_mass"] = ev.retained_mass(base_mass, ev.answer_mass_table(policy, task, prompts))
        report["models"][path] = res
        cells = [Path(path).as_posix()] + [
            f"{res['pass_at_k'][k]:.3f} [{res['interval'][k][0]:.3f},{res['interval'][k][1]:.3f}]" for k in ks]
        if base:
            cells += [f"{res['delta_nll_rare']:.3f}" if "delta_nll_rare" in res else "–",
                      f"{res['answer_mass']['kept_fraction']:.3f}" if "answer_mass" in res else "–",
                      f"{res['answer_mass']['mret']:.3f}" if "answer_mass" in res else "–"]
        rows.append(" | ".join(cells))
        records.append(_record(path, res, ks))
    if args.format == "table":
        for row in rows:
            say(row)
    elif args.format == "csv":
        emit = record_printer("csv", say)
        for record in records:
            emit(record)
    if args.format != "table":  # the test and ledger lines: in the JSON, or beside the CSV on stderr
        say = _to_stderr(say) if args.format == "csv" else (lambda *a, **k: None)
    counts = [np.asarray(report["models"][p]["num_correct"]) for p in args.models]
    if args.test and len(args.models) > 1:
        m = args.m if args.m is not None else max(1, args.n // 4)
        report["tests"] = []
        for path, c in zip(args.models[1:], counts[1:]):
            for k in sorted({1, m}):
                t = metrics.paired_subsample_test(args.n, counts[0], c, k=k, m=m, iterations=args.iterations,
                                                  seed=args.seed)
                report["tests"].append({"a": args.models[0], "b": path, **t})
                say(f"paired test {path} − {args.models[0]}: pass@{k} (m={m} of n={args.n}) "
                    f"Δ = {t['delta']:+.4f}, 95% [{t['interval'][0]:+.4f}, {t['interval'][1]:+.4f}], "
                      f"p = {t['p_value']:.4f}")
    if args.ledger and len(args.models) > 1:
        led = ev.forgetting_ledger(args.models, np.stack(counts))
        led["forgotten_prompts"] = [prompts[i].index for i in led["forgotten_prompts"]]
        report["ledger"] = led
        say(f"ledger: solved {led['solved']} (in order); forgotten by the last: {led['forgotten']}; "
            f"gained: {led['gained']}")
    from catsim.llm.model.sharding import is_primary

    if args.json and is_primary():
        from catsim.llm.rundir import write_json

        write_json(Path(args.json), report)
    if args.format == "json":
        import json

        writer_print()(json.dumps(report, default=_plain))
    return 0


def _record(path: str, res: dict, ks) -> dict:
    """One CSV row of the pass@k table: the model, pass@k and its interval, the base comparisons."""
    row: dict = {"model": Path(path).as_posix()}
    for k in ks:
        row[f"pass@{k}"] = res["pass_at_k"][k]
        row[f"pass@{k}_low"], row[f"pass@{k}_high"] = res["interval"][k][0], res["interval"][k][1]
    if "delta_nll_rare" in res:
        row["delta_nll_rare"] = res["delta_nll_rare"]
    if "answer_mass" in res:
        row["kept"], row["mret"] = res["answer_mass"]["kept_fraction"], res["answer_mass"]["mret"]
    return row


def _to_stderr(say):
    import sys

    return lambda *a, **k: say(*a, **{**k, "file": sys.stderr})


def _plain(value):
    """JSON for numpy values."""
    return value.tolist() if hasattr(value, "tolist") else str(value)
