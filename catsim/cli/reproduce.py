"""`catsim reproduce`: regenerate the project's figures and checks in one command.

Steps, in order (each can be skipped with --skip):
  lemma   Lemma 3.1 figures (paper Fig. 3 and Fig. 5) into --figures
  mass    the joint distribution of (dQpos, dQu,pos) per step at the paper initialisation
  verify  every symbolic and numeric check of `catsim verify`
  sim     the paper's Figure 2 with the categorical simulator (reduced grid with --quick)
  llm     the LLM pipeline (warm-up, GRPO vs F-GRPO, evaluation; tiny with --quick)
Intermediate results go to --runs and are resumable: rerunning skips finished work.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments import reproduction
from catsim.files import copy_file

STEPS = ("lemma", "mass", "verify", "sim", "llm")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="regenerate figures/ and run all checks (lemma, mass, verify, sim, llm)",
        description=__doc__,
        epilog="examples:\n  catsim reproduce --quick --figures /tmp/figs --runs /tmp/runs\n"
               "  catsim reproduce --skip llm,verify          # full Fig. 2 and the theory figures",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="reduced simulator grid, quick checks and a tiny LLM pipeline (minutes; "
                             "default: the full versions)")
    parser.add_argument("--figures", default="figures", help="where figures go (default: figures)")
    parser.add_argument("--runs", default="runs/reproduce",
                        help="where intermediate results go (default: runs/reproduce)")
    parser.add_argument("--skip", default="", metavar="STEP[,STEP...]",
                        help=f"comma list of steps to skip, from {', '.join(STEPS)} (default: none)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 unless every regenerated published number agrees within its "
                             "tolerance (docs/reproducibility.md; default: off, disagreement is reported)")
    parser.add_argument("--write-references", action="store_true",
                        help="afterwards make this run's numbers the published ones (figures/reference/"
                             "quick.json with --quick, else figures/fig2_paper_table.txt and "
                             "figures/llm-rl/results.json; theory.json in both; default: off)")
    parser.set_defaults(func=run)


def _skipped(text: str) -> set[str]:
    skip = {s.strip() for s in text.split(",") if s.strip()}
    unknown = skip - set(STEPS)
    if unknown:
        raise CatsimError(f"--skip: unknown step(s) {', '.join(sorted(unknown))}; steps are {', '.join(STEPS)}")
    return skip


def _lemma(args, figures: Path, runs: Path) -> bool:
    from catsim.experiments.theory import reproduce_figures

    for path in reproduce_figures(figures):
        print(f"wrote {path}")
    return True


def _mass(args, figures: Path, runs: Path) -> bool:
    from catsim.experiments.theory import reproduce_mass_figure

    paths, _ = reproduce_mass_figure(figures, groups=300)
    for path in paths:
        print(f"wrote {path}")
    return True


def _verify(args, figures: Path, runs: Path) -> bool:
    from catsim.cli.verify import run as verify_run

    return verify_run(argparse.Namespace(quick=args.quick)) == 0


def _sim(args, figures: Path, runs: Path) -> bool:
    from catsim.experiments.fig2 import reproduce

    result = reproduce(runs / ("sim-quick" if args.quick else "sim-full"), quick=args.quick)
    target = figures / ("fig2_quick.png" if args.quick else "fig2_paper.png")
    copy_file(result["figure"], target)
    print(f"wrote {target}")
    return True


def _llm(args, figures: Path, runs: Path) -> bool:
    from catsim.experiments.llm_pipeline import run_pipeline

    report = run_pipeline(runs / ("llm-quick" if args.quick else "llm-default"), quick=args.quick)
    target_dir = figures / ("llm-rl-quick" if args.quick else "llm-rl")
    target_dir.mkdir(parents=True, exist_ok=True)
    for path in [report, *sorted(report.parent.glob("*.png"))]:
        copy_file(path, target_dir / path.name)
        print(f"wrote {target_dir / path.name}")
    print(report.read_text())
    return True


STEP_FUNCS = {"lemma": _lemma, "mass": _mass, "verify": _verify, "sim": _sim, "llm": _llm}


def run(args: argparse.Namespace) -> int:
    skip = _skipped(args.skip)
    figures, runs = Path(args.figures), Path(args.runs)
    steps = [step for step in STEPS if step not in skip]
    published = reproduction.load_published(args.quick, steps, writing=args.write_references)
    figures.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for step in STEPS:
        if step in skip:
            continue
        print(f"== catsim reproduce: {step}", flush=True)
        start = time.perf_counter()
        ok = STEP_FUNCS[step](args, figures, runs)
        print(f"== {step}: {'done' if ok else 'FAILED'} in {time.perf_counter() - start:.1f} s", flush=True)
        if not ok:
            failed.append(step)
    ran = [step for step in steps if step not in failed]
    disagree = reproduction.check_reproduction(published, runs, ran, strict=args.strict,
                                               write=args.write_references)
    if failed:
        print(f"catsim reproduce: failed steps: {', '.join(failed)}")
        return 1
    return disagree
