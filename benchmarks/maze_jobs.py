"""Runs per hour of the Maze study's RL runs made one at a time or in parallel jobs
(`catsim llm maze-study --jobs J`), side by side in one call, on the study's workload: F-GRPO γ = 0.5
at N = 8 from the CPU study's committed warm-up (figures/maze-study/cpu/s0/base), the CPU preset's
batch (256 rollouts a step), `--steps` steps (default 300), no evaluation.

    PYTHONPATH=. python benchmarks/maze_jobs.py --out /tmp/maze-jobs.json                 # J = 1, 2
    PYTHONPATH=. python benchmarks/maze_jobs.py --out /tmp/maze-jobs.json --jobs 2,4,8,16 # a larger machine
    PYTHONPATH=. python benchmarks/maze_jobs.py --out /tmp/maze-jobs.json --tiny          # seconds: a smoke

Layouts, each run through `catsim.jobs.run_jobs` as `--jobs` runs them (a fresh process per run, so
every run compiles, as a study's runs do): J = 1 at XLA's default threads (the serial study), J = 1
at one thread, and J one-thread jobs at once, each pinned to its own core, for every J of `--jobs`
up to the cores found. Runs per hour = J × 3600 / wall seconds of the layout; the ratio is to
J = 1 at default threads. Writes every number as JSON to --out and prints one markdown table row
per layout. On a shared machine read the ratios with `uptime`'s load (printed).

Measured alone on this 2-core machine (AMD EPYC, 2026-12-06, 300 steps; the JSON is
benchmarks/results/maze_jobs_2core.json): J = 1 default threads 89.1 s, J = 1 one thread 139.8 s,
J = 2 one thread each 145.7 s for both runs — 1.22× the runs per hour of J = 1 at default threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = ROOT / "figures" / "maze-study" / "cpu" / "s0" / "base"


def one_run(base: str, out: str, steps: int, tiny: bool) -> None:
    """One RL run of the workload (a job of this benchmark)."""
    from catsim.experiments.maze import presets, study
    from catsim.llm.rl import run_rl

    sp = presets.tiny() if tiny else presets.cpu()
    n = 2 if tiny else 8
    task = study.study_task(sp)
    cfg = study.rl_config(sp, "f-grpo", n, 0.5, 0, task.max_answer_chars + 1, steps=steps, snapshot_every=steps)
    run_rl(Path(base), Path(out), cfg, progress=False, overwrite=True)
    print(f"{steps} steps done")


def _tiny_base(root: Path) -> Path:
    from catsim.experiments.maze import presets, study

    sp = presets.tiny()
    return study._warm_up(sp, study.study_task(sp), root / "base", 0, False)


def layout(base: Path, root: Path, jobs: int, threads: int | None, args) -> dict:
    from catsim.jobs import Job, run_jobs

    name = f"J{jobs}-t{threads or 'default'}"
    todo = [Job(f"{name}-{i}", (sys.executable, __file__, "--one-run", str(base), str(root / f"{name}-{i}"),
                                str(args.steps)) + (("--tiny",) if args.tiny else ())) for i in range(jobs)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    run_jobs(todo, jobs, threads, say=lambda _: None)
    wall = time.perf_counter() - t0
    return {"jobs": jobs, "threads": "default" if threads is None else threads, "wall_s": round(wall, 2),
            "runs_per_hour": round(jobs * 3600 / wall, 2), "load_at_start": round(load, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="JSON file for the results (required)")
    parser.add_argument("--steps", type=int, default=300, help="RL steps per run (default: 300)")
    parser.add_argument("--jobs", default="2", help="comma list of J for the one-thread layouts (default: 2; "
                                                    "those above the cores found are skipped)")
    parser.add_argument("--tiny", action="store_true", help="the tiny preset from a fresh 4-step warm-up: a smoke")
    parser.add_argument("--one-run", nargs=3, metavar=("BASE", "OUT", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_run:
        one_run(args.one_run[0], args.one_run[1], int(args.one_run[2]), args.tiny)
        return 0
    if not args.out:
        parser.error("--out is required")
    from catsim.jobs import usable_cores

    cores = len(usable_cores())
    wanted = sorted({int(j) for j in args.jobs.split(",") if j.strip()})
    with tempfile.TemporaryDirectory(prefix="maze-jobs-") as tmp:
        root = Path(tmp)
        base = _tiny_base(root) if args.tiny else WARM_UP
        rows = [layout(base, root, 1, None, args), layout(base, root, 1, 1, args)]
        rows += [layout(base, root, j, 1, args) for j in wanted if 1 < j <= cores]
    first = rows[0]["runs_per_hour"]
    for r in rows:
        r["ratio"] = round(r["runs_per_hour"] / first, 3)
    from catsim.files import write_text

    record = {"workload": "tiny" if args.tiny else "cpu preset, F-GRPO γ = 0.5, N = 8, from figures/maze-study/cpu/s0/base",
              "steps": args.steps, "cores": cores, "layouts": rows, "skipped_jobs": [j for j in wanted if j > cores]}
    write_text(args.out, json.dumps(record, indent=1) + "\n")
    print("| layout | wall (s) | runs per hour | ratio to J = 1, default threads |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| J = {r['jobs']}, {r['threads']} thread{'s' if r['threads'] != 1 else ''}{' each' if r['jobs'] > 1 else ''}"
              f" | {r['wall_s']:.1f} | {r['runs_per_hour']:.1f} | {r['ratio']:.2f}× |")
    print(f"{args.steps} steps a run, {cores} cores; results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
