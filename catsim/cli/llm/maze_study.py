"""`catsim llm maze-study`: the paper's Maze experiment (§5.2, App. K) — warm-up once per seed, GRPO
and F-GRPO (every γ) at every N from the same warm-up, pass@k for k = 1…256 on held-out mazes (and
against RL step), per-maze π(solution) before/after, the paired m-out-of-n test of F-GRPO − GRPO.
Resumable: rerun the same command to go on (a different preset in the same --out is refused).
results.json, arms.json and trl.json summarise every run on disk, whichever a call asked about, and
`--report` refuses a summary that disagrees with its runs (catsim.experiments.maze.check).

examples:
  catsim llm maze-study --out runs/maze-study --preset cpu              # the CPU study (split: --max-runs)
  catsim llm maze-study --out runs/maze-paper --preset paper            # App. K as written (a GPU)
  catsim llm maze-study --out runs/maze-study --preset cpu --jobs 2     # two runs at a time, one thread each
  catsim llm maze-study --out runs/maze-study --preset cpu --part 0/4   # a job array's part 0 of 4 (docs/cluster.md)
  catsim llm maze-study --out runs/maze-study --arms all --max-runs 4   # the arms (after the study)
  catsim llm maze-study --out runs/maze-study --arms grpo-20000 --stop-after 5000   # a long arm in pieces
  catsim llm maze-study --out runs/maze-study --trainer trl --max-runs 2  # GRPO / F-GRPO inside TRL
  catsim llm maze-study --out runs/maze-study --report figures/maze-study   # report + figures only
"""

from __future__ import annotations

import argparse

from catsim.cli.args import positive_int
from catsim.cli.vocabulary import (
    add_format_argument,
    add_progress_argument,
    alias,
    markdown_records,
    write_csv,
)
from catsim.errors import CatsimError


def register(subparsers) -> None:
    from catsim.tracking import add_log_to_argument

    parser = subparsers.add_parser("maze-study", help="run the paper's Maze study: warm-ups, GRPO vs F-GRPO, pass@k, paired tests",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="study directory (reruns resume)")
    parser.add_argument("--preset", help="paper, cpu or tiny (default: cpu)")
    parser.add_argument("--paper-shapes", action="store_true",
                        help="with --preset tiny: 17×17 mazes and the paper's model shape (default: off)")
    parser.add_argument("--seeds", type=int, help="seeds (warm-ups) for every N (default: the preset's plan)")
    parser.add_argument("--group-size", dest="group_sizes", help="comma list of N (default: the preset's)")
    parser.add_argument("--gamma", dest="gammas",
                        help="comma list of F-GRPO γ (default: the preset's, 0.5,1 for paper/cpu)")
    parser.add_argument("--arms", metavar="NAMES",
                        help="run the study's arms instead: 'all' or a comma list of arm names (the preset's "
                             "arms: entropy, KL, DAPO, CISPO, switch, γ ramp, 4 updates, horizon; the arms each is "
                             "tested against run too; arms.json summarises every arm; default: off)")
    parser.add_argument("--trainer", choices=("catsim", "trl"), default="catsim",
                        help="trl: GRPO (TRL's GRPOTrainer) and F-GRPO γ = 0.5 (catsim's TRL plug-in) from the "
                             "study's warm-ups, evaluated by catsim, after the study (needs .[trl]; default: catsim)")
    parser.add_argument("--max-runs", type=int, help="stop after this many RL runs this call (default: all); with --arms or "
                             "--trainer trl, 0 trains nothing and rebuilds arms.json / trl.json from every finished run "
                             "(a summary that says the same is left as it is)")
    parser.add_argument("--stop-after", type=positive_int, metavar="STEPS",
                        help="with --arms: each run this call stops once STEPS of its steps are done, its state "
                             "saved, and stays pending (rerun, with a larger STEPS or without, to go on): a long "
                             "run in pieces. The horizon arms of 20,000 steps also leave what a fresh clone needs to "
                             "go on elsewhere (their state, log pieces and snapshot evaluations, committed; "
                             "docs/llm-maze-study.md) (default: every run to its end)")
    parser.add_argument("--jobs", type=positive_int, default=1, metavar="J",
                        help="J pending runs at once (the study's, or with --arms the arms'), each in a process of "
                             "its own at --threads-per-job XLA threads, pinned to its own cores when they fit; each "
                             "run is committed when it ends, a killed call loses no finished run and a rerun resumes. "
                             "Default 1: one run at a time in this process at XLA's default threads, as the "
                             "published runs were made. Measured on 2 cores (the CPU study's runs): 2 one-thread "
                             "jobs made 1.22x the runs per hour of one default-thread run, but a run at another "
                             "thread count differs from it in its last bits, so the default keeps a study's runs "
                             "as they were made (benchmarks/maze_jobs.py measures a machine)")
    parser.add_argument("--threads-per-job", type=positive_int, metavar="T",
                        help="XLA threads of each job: 1 turns XLA's thread pool off; T > 1 pins each job to T cores "
                             "of its own (XLA sizes its pool from them), so J x T must fit the cores this command may "
                             "use (default: 1 with --jobs > 1; with --jobs 1 it runs one run at a time, each in a "
                             "process of its own at T threads)")
    parser.add_argument("--part", metavar="I/P",
                        help="run only part I of P of the pending runs (job arrays across hosts sharing --out; the "
                             "split of `catsim sweep --part`, so every part must get the same options) and write no "
                             "summary; when every part is done, the same command without --part writes results.json "
                             "(arms.json) (default: every run)")
    parser.add_argument("--screen", metavar="METHODS_JSON",
                        help="keep the simulator's numbers for the rule zoo's screen in OUT/screen.json: a methods "
                             "study's methods.json (`catsim sweep --study methods`, with N = 8), read at N = 8 for "
                             "GRPO and every rule arm's row; trains nothing; with --report, before it (default: off)")
    parser.add_argument("--report", metavar="DIR",
                        help="write report.md, the figures and a copy of results.json from OUT/results.json into DIR, "
                             "run nothing; refused when a summary file disagrees with the runs in OUT (default: off)")
    add_progress_argument(parser)
    add_format_argument(parser, what="the study's table (json: every number of results.json)")
    for old, new in (("--group-sizes", "--group-size"), ("--gammas", "--gamma"), ("--quiet", "--no-progress")):
        alias(parser, old, new)
    add_log_to_argument(parser)
    from catsim.progress import RL_FIELDS, SFT_FIELDS, fields_help

    parser.epilog = fields_help(SFT_FIELDS, RL_FIELDS)  # what the progress shows
    parser.set_defaults(func=run)


def preset_from_args(args):
    from catsim.cli.args import parse_float_list, parse_int_list
    from catsim.experiments.maze import presets as maze_presets

    if args.paper_shapes and args.preset != "tiny":
        raise CatsimError("--paper-shapes goes with --preset tiny")
    sp = maze_presets.tiny(True) if args.paper_shapes else maze_presets.preset(args.preset or "cpu")
    least = 0 if args.arms is not None or args.trainer == "trl" else 1  # 0: rewrite arms.json / trl.json only
    if args.max_runs is not None and args.max_runs < least:
        raise CatsimError(f"--max-runs must be >= {least}{' for the study' if least else ''}, got {args.max_runs}")
    sizes = None if args.group_sizes is None else parse_int_list(args.group_sizes, "--group-size")
    gammas = None if args.gammas is None else parse_float_list(args.gammas, "--gamma")
    return sp.with_overrides(seeds=args.seeds, group_sizes=sizes, gammas=gammas)


def run(args) -> int:
    from catsim.cli.main import check_output_path

    other = "--report" if args.report else "--arms" if args.arms is not None else \
        "--trainer trl" if args.trainer == "trl" else "--part" if args.part is not None else None
    if args.format != "table" and other:
        raise CatsimError(f"--format {args.format} reads the study's table, which {other} does not print")
    if args.screen is not None:
        _write_screen(args)
        if not args.report:
            return 0
    if args.report:
        from catsim.experiments.maze.arms import load_arms
        from catsim.experiments.maze.check import check_summaries
        from catsim.experiments.maze.report import write_report
        from catsim.experiments.maze.screen import load_screen
        from catsim.experiments.maze.study import load_results
        from catsim.experiments.maze.trl import load_trl

        results = load_results(args.out)
        _check_report_args(args, results)
        arms, trl = load_arms(args.out), load_trl(args.out)
        check_summaries(args.out, results, arms, trl)  # what is published says what the runs say
        check_output_path(f"{args.report}/report.md", "--report")
        screen = load_screen(args.out)
        print(f"report: {write_report(results, args.report, study_dir=args.out, arms=arms, trl=trl, screen=screen)}")
        return 0
    sp = preset_from_args(args)  # every check before any work
    check_output_path(f"{args.out}/study.json", "--out")
    if args.arms is not None and args.trainer == "trl":
        raise CatsimError("--arms and --trainer trl are separate runs: give one")
    if args.stop_after is not None and args.arms is None:
        raise CatsimError("--stop-after goes with --arms: the study's runs and TRL's are run whole")
    if args.trainer == "trl" and args.log_to:
        raise CatsimError("--log-to goes with catsim's RL runs: TRL's runs send nothing to it (their log is "
                          "trl_log.jsonl)")
    parallel = _parallel_options(args)
    if parallel and args.trainer == "trl":
        raise CatsimError("--jobs, --threads-per-job and --part go with catsim's runs: TRL's run one at a time")
    if args.arms is not None:
        return _run_arms(args, sp, parallel)
    if args.trainer == "trl":
        return _run_trl(args, sp)
    if parallel:
        from catsim.experiments.maze.parallel import run_parallel

        results = run_parallel(args.out, sp, progress=args.progress, log_to=args.log_to, max_runs=args.max_runs,
                               **parallel)
        _say_part(args)
    else:
        from catsim.experiments.maze.study import run_study

        results = run_study(args.out, sp, progress=args.progress,
                            log_to=args.log_to, max_runs=args.max_runs)
    if results is not None:
        from catsim.experiments.maze.report import table_lines

        if args.format == "json":
            import json

            print(json.dumps(results))
        elif args.format == "csv":
            write_csv(markdown_records(table_lines(results)))
        else:
            print("\n".join(table_lines(results)))
            print(f"results: {args.out}/results.json")
    return 0


def _parallel_options(args) -> dict | None:
    """run_parallel's jobs, threads and part from --jobs, --threads-per-job and --part; None when none
    is given (the serial study)."""
    if args.jobs == 1 and args.threads_per_job is None and args.part is None:
        return None
    from catsim.sim.sweep_parts import parse_part

    return {"jobs": args.jobs, "threads": args.threads_per_job,
            "part": parse_part(args.part) if args.part is not None else None}


def _say_part(args) -> None:
    if args.part is not None:
        print(f"part {args.part} done; when every part is done, the same command without --part writes the summary "
              f"({args.out}/{'arms.json' if args.arms is not None else 'results.json'})")


def _run_flags(args) -> list[str]:
    """The given flags that only act when runs are trained (refused with --report and --screen)."""
    return [flag for flag, given in (("--arms", args.arms is not None), ("--trainer trl", args.trainer == "trl"),
                                     ("--max-runs", args.max_runs is not None), ("--log-to", bool(args.log_to)),
                                     ("--stop-after", args.stop_after is not None),
                                     ("--jobs", args.jobs != 1), ("--threads-per-job", args.threads_per_job is not None),
                                     ("--part", args.part is not None))
            if given]


def _write_screen(args) -> None:
    """--screen: OUT/screen.json from a methods study (the preset's rule arms name its rows); trains nothing."""
    from catsim.experiments.maze.arms import arm_set
    from catsim.experiments.maze.screen import SCREEN_FILE, write_screen
    from catsim.experiments.maze.study import load_results

    runs = _run_flags(args)
    if runs:
        raise CatsimError(f"--screen trains nothing: {runs[0]} does not go with it")
    results = load_results(args.out)  # a study's folder (one line otherwise)
    name = results["preset"]["name"].removesuffix("-paper-shapes")
    write_screen(args.out, args.screen, arm_set(name))
    print(f"screen: {args.out}/{SCREEN_FILE}")


def _check_report_args(args, results: dict) -> None:
    """`--report` runs nothing and reports the study in --out as it is: an option that would run
    something is refused (it would not act), and study settings other than the study's."""
    import dataclasses
    import json

    from catsim.experiments.maze.study import settings_diff

    runs = _run_flags(args)
    if runs:
        raise CatsimError(f"--report runs nothing: {runs[0]} does not go with it (run without --report first)")
    if args.paper_shapes or any(v is not None for v in (args.preset, args.seeds, args.group_sizes, args.gammas)):
        want = json.loads(json.dumps(dataclasses.asdict(preset_from_args(args))))
        if results["preset"] != want:
            raise CatsimError(f"{args.out}/results.json is the {results['preset'].get('name')!r} study, with other "
                              f"settings than those given ({settings_diff(results['preset'], want)}): --report reports the "
                              "study in --out; leave the settings out")


def _run_arms(args, sp, parallel: dict | None) -> int:
    from catsim.experiments.maze.arms import arm_set, run_arms
    from catsim.experiments.maze.parallel import run_parallel

    names = [n.strip() for n in args.arms.split(",") if n.strip()]
    if not names:
        raise CatsimError("--arms: give 'all' or arm names")
    arms = arm_set(sp.name.removesuffix("-paper-shapes"), None if names == ["all"] else names)
    if parallel:
        result = run_parallel(args.out, sp, arms=arms, progress=args.progress, log_to=args.log_to,
                              max_runs=args.max_runs, stop_after=args.stop_after, **parallel)
        _say_part(args)
        if result is None:
            return 0
    else:
        result = run_arms(args.out, sp, arms, progress=args.progress,
                          log_to=args.log_to, max_runs=args.max_runs, stop_after=args.stop_after)
    for c in result["claims"]:
        print(f"{c['verdict']:>13}: {c['claim']}")
    print(f"{len(result['runs'])} arm runs finished, {len(result['pending'])} pending; arms: {args.out}/arms.json")
    from pathlib import Path

    from catsim.experiments.maze.carry import state_step

    for name in result["pending"]:  # a run stopped part-way (--stop-after, or killed): where it stands
        if step := state_step(Path(args.out) / name):
            print(f"  {name}: at step {step:,}, its state saved")
    return 0


def _run_trl(args, sp) -> int:
    from catsim.experiments.maze.trl import cross_lines, run_trl_study

    result = run_trl_study(args.out, sp, progress=args.progress,
                           max_runs=args.max_runs)
    print("\n".join(cross_lines(result)))
    print(f"{len(result['runs'])} TRL runs finished, {len(result['pending'])} pending; TRL: {args.out}/trl.json")
    return 0
