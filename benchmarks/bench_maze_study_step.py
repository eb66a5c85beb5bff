"""Wall time per 100 RL steps of the Maze study's `paper` preset (App. K: 17×17 mazes, ~3M-parameter
model, 256 prompts × N rollouts per step, 4 mini-batches), so a user knows the cost before renting.

    python benchmarks/bench_maze_study_step.py --out /tmp/maze-step [--group-size 8] [--steps 4] [--cpu-smoke]

A short warm-up (`--sft-steps`, default 50) stands in for the preset's 1,500 steps: its completions
are longer than a trained model's (often running to the 224-token cap), so the time is an upper
bound for the early steps. The first RL step (compilation) is reported apart; the per-100 figure is
the median of the others × 100. --cpu-smoke: the `tiny` preset (2 RL steps; --paper-shapes: with
the paper's maze size and model shape).

Measured CPU smoke with --paper-shapes (2-core machine shared, load 8–25, 2026-12-02): warm-up 165 s,
first RL step 425 s (compilation), 4 RL steps of 32 rollouts 1,044 s wall, 3.6 min of CPU — it runs;
the GPU figure is not measured yet.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path


def main() -> int:
    from catsim.experiments.maze import presets as maze_presets
    from catsim.experiments.maze import study as maze_study
    from catsim.llm.rl import read_log, run_rl

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="/tmp/maze-step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--sft-steps", type=int, default=50)
    parser.add_argument("--cpu-smoke", action="store_true", help="the tiny preset, 2 RL steps")
    parser.add_argument("--paper-shapes", action="store_true", help="with --cpu-smoke: 17×17 mazes, the 3.15M model")
    args = parser.parse_args()
    sp = maze_presets.tiny(paper_shapes=args.paper_shapes) if args.cpu_smoke else maze_presets.paper()
    steps = min(args.steps, 2) if args.cpu_smoke else args.steps
    sp = dataclasses.replace(sp, sft_steps=min(sp.sft_steps, args.sft_steps), plan=((args.group_size, 1),),
                             rl_steps=steps, checkpoints=1)
    out = Path(args.out)
    task = maze_study.study_task(sp)
    t0 = time.perf_counter()
    base = maze_study._warm_up(sp, task, out / "base", 0, False)
    sft_s = time.perf_counter() - t0
    cfg = maze_study.rl_config(sp, "f-grpo", args.group_size, 0.5, 0, task.max_answer_chars + 1)
    t0 = time.perf_counter()
    run_rl(base, out / "rl", cfg, progress=False, overwrite=True)
    wall = time.perf_counter() - t0
    log = read_log(out / "rl")
    steps = [r["step_seconds"] for r in log]
    rest = steps[1:] or steps
    per100 = 100 * statistics.median(rest)
    print(json.dumps({"preset": sp.name, "group_size": args.group_size, "prompts_per_step": sp.prompts(args.group_size),
                      "rollouts_per_step": sp.prompts(args.group_size) * args.group_size,
                      "updates_per_step": sp.updates(args.group_size), "sft_s": round(sft_s, 1),
                      "first_step_s": round(steps[0], 2), "rl_wall_s": round(wall, 1),
                      "response_length": round(statistics.mean(r["response_length"] for r in log), 1)}))
    print(f"maze study ({sp.name}) RL: {per100:.0f} s per 100 steps at N = {args.group_size} "
          f"({sp.prompts(args.group_size) * args.group_size} rollouts/step), ≈ {per100 * 200 / 3600:.1f} h per "
          "20K-step run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
