"""Where a `catsim llm rl` step's time goes, phase by phase: the command run in this process with
timers around the loop's phases (collect → generate → prefill / decode chunks / weight layout,
verifier; advantages; the update; the log record), each synchronised with the device.

    python benchmarks/profile_rl_phases.py --base DIR [any other `catsim llm rl` options]
    python benchmarks/profile_rl_phases.py --base figures/maze-study/cpu/s0/base --steps 160 \\
        --prompts-per-step 32 --group-size 8 --max-new-tokens 25      # the Maze study's workload

Without --out the run goes to a temporary directory (--overwrite is added). Run it twice: the first
run fills the compilation cache (`JAX_COMPILATION_CACHE_DIR`, else catsim's default) and the second
shows the steady state. Reported per phase: its total, calls, the median call and median × calls
per step (what a steady-state step spends there; the total also holds compilation and the first
use of each completion width). The phases nest (generate is inside collect), so they do not add up.
The timers add a device synchronisation per call, so the step under the profiler is a little slower
than without it: `bench_rl_vs_trl.py` gives the step's speed, this script where it goes.
"""

from __future__ import annotations

import collections
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

import catsim.llm.rl.loop as loop
import catsim.llm.rollout.cascade as cascade
import catsim.llm.rollout.groups as groups
from catsim.cli.main import main as catsim_main

TIMES: dict[str, list[float]] = collections.defaultdict(list)

PHASES = (  # (module, function, label): the loop's phases and the rollout's parts
    (loop, "collect", "collect (rollout + verifier)"),
    (groups, "generate", "  generate"),
    (cascade, "_prefill", "    prefill"),
    (cascade, "_chunk", "    decode chunks"),
    (cascade, "_relayout", "    compaction"),
    (cascade, "laid_out", "    weight layout"),
    (groups, "score_batch", "  verifier"),
    (loop, "compute_advantages", "advantages"),
    (loop, "score", "behaviour / reference log-probs"),
    (loop, "update", "update (forward, backward, AdamW)"),
    (loop, "step_record", "log record"),
)


def _timed(fn, label: str):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(*args, **kwargs))
        TIMES[label].append(time.perf_counter() - t0)
        return out
    return wrapper


def main(argv: list[str]) -> None:
    if "--base" not in argv:
        raise SystemExit("usage: profile_rl_phases.py --base MODEL_DIR [catsim llm rl options]")
    if "--out" not in argv:
        argv = [*argv, "--out", str(Path(tempfile.mkdtemp(prefix="profile-rl-")) / "run")]
    argv = [*argv, "--no-progress"] + ([] if "--overwrite" in argv else ["--overwrite"])
    for module, name, label in PHASES:
        setattr(module, name, _timed(getattr(module, name), label))
    t0 = time.perf_counter()
    code = catsim_main(["llm", "rl", *argv])
    if code:
        raise SystemExit(code)
    wall = time.perf_counter() - t0
    out = Path(argv[argv.index("--out") + 1])
    steps = [json.loads(line)["step_seconds"] for line in (out / loop.LOG_FILE).read_text().splitlines()
             if line.strip()]
    n = len(steps)
    print(f"{n} steps in {wall:.1f} s; step (2..{n}): mean {statistics.mean(steps[1:]):.4f} s, "
          f"median {statistics.median(steps[1:]):.4f} s")
    print(f"{'phase':36}{'total s':>9}{'calls':>7}{'median ms':>11}{'ms/step':>9}")
    for _, _, label in PHASES:
        t = TIMES.get(label)
        if t:
            med = statistics.median(t)
            print(f"{label:36}{sum(t):9.3f}{len(t):7d}{1000 * med:11.2f}{1000 * med * len(t) / n:9.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
