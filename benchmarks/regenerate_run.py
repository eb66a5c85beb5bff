"""Regenerate the first steps of a committed Maze study run under several XLA set-ups, side by side:
where each departs from the committed run, from the first set-up, and what each costs per step.

    python benchmarks/regenerate_run.py --study figures/maze-study/cpu --run s0/grpo-N8 --steps 60 \\
        --setup default= --setup pinned="--xla_cpu_max_isa=AVX2 --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    python benchmarks/regenerate_run.py ... --save-reference figures/reproducibility/pinned-s0-grpo-N8.json
    python benchmarks/regenerate_run.py --check-reference figures/reproducibility/pinned-s0-grpo-N8.json

Each set-up runs in its own process (XLA reads XLA_FLAGS once, at start) with today's code, from the
run's committed warm-up, with the run's own settings (`maze_study.rl_config` / `maze_arms.arm_config`),
stopped after --steps (`run_rl(stop_after=...)`: the schedule is the full run's). A run's trajectory
is compared by its per-step loss, gradient norm and reward, bit for bit (the loss moves with the last
bit of any parameter); the committed run kept only its reward per step, so against it the first step
whose reward differs is the one reported (a rounding difference shows there once it flips a sample).

--save-reference writes the first set-up's per-step record and its provenance (commit, CPU, ISA,
threads); --check-reference reruns it under the flags it records and says whether every step is
bit-identical — the check for a later session on the other CPU kind (docs/reproducibility.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEYS = ("loss", "grad_norm", "reward")


def _child(study: Path, run: str, steps: int, out: Path) -> None:
    """Train the first `steps` steps of the study run `run` into `out`; write out/record.json."""
    from catsim import provenance
    from catsim.experiments.maze import arms as maze_arms
    from catsim.experiments.maze import presets as maze_presets
    from catsim.experiments.maze import study as maze_study
    from catsim.llm.rl import read_log, run_rl

    seed_dir, label = run.split("/")
    seed = int(seed_dir[1:])
    ev = json.loads((study / run / "eval.json").read_text())
    recorded = json.loads((study / "study.json").read_text())["preset"]
    sp = maze_presets.PRESETS[recorded["name"]]()
    if json.loads(json.dumps(dataclasses.asdict(sp))) != recorded:
        raise SystemExit(f"{study}: its preset is not today's {recorded['name']!r} preset")
    task = maze_study.study_task(sp)
    max_new = task.max_answer_chars + 1
    if ev.get("arm"):
        arm = next(a for a in maze_arms.arm_set(sp.name) if a.name == ev["arm"])
        cfg = maze_arms.arm_config(sp, arm, seed, max_new)
    else:
        cfg = maze_study.rl_config(sp, ev["method"], ev["group_size"], ev["gamma"], seed, max_new)
    t0 = time.perf_counter()
    run_rl(study / seed_dir / "base", out / "run", cfg, stop_after=steps, progress=False)
    wall = time.perf_counter() - t0
    log = read_log(out / "run")
    record = {"study": str(study), "run": run, "steps": steps, "seconds": wall,
              "step_seconds": [r["step_seconds"] for r in log],
              "log": [{k: r.get(k) for k in KEYS} for r in log], "provenance": provenance.collect()}
    (out / "record.json").write_text(json.dumps(record))


def _run(study: str, run: str, steps: int, flags: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="regen-") as tmp:
        env = {**os.environ, "XLA_FLAGS": flags}
        subprocess.run([sys.executable, __file__, "--child", "--study", study, "--run", run, "--steps", str(steps),
                        "--out", tmp], env=env, check=True)
        return json.loads((Path(tmp) / "record.json").read_text())


def first_difference(a: list[dict], b: list[dict], keys=KEYS) -> int | None:
    """The first step (1-based) at which two per-step records differ in any of `keys`, or None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if any(x.get(k) != y.get(k) for k in keys):
            return i + 1
    return None


def _median(xs: list[float]) -> float:
    xs = sorted(xs[1:]) or xs  # the first step compiles
    return xs[len(xs) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--study", default="figures/maze-study/cpu")
    ap.add_argument("--run", default="s0/grpo-N8")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--setup", action="append", default=[], help="NAME=XLA_FLAGS (repeatable; default: this process's)")
    ap.add_argument("--save-reference", help="write the first set-up's record here")
    ap.add_argument("--check-reference", help="rerun a saved reference under its flags and compare")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(Path(args.study), args.run, args.steps, Path(args.out))
        return 0
    if args.check_reference:
        ref = json.loads(Path(args.check_reference).read_text())
        flags = ref["provenance"]["xla_flags"]
        new = _run(ref["study"], ref["run"], ref["steps"], flags)
        diff = first_difference(ref["log"], new["log"])
        from catsim import provenance

        print(f"reference: {provenance.describe(ref['provenance'])}")
        print(f"here:      {provenance.describe(new['provenance'])}")
        print(f"{ref['run']}, {ref['steps']} steps under XLA_FLAGS={flags!r}: "
              + ("bit-identical at every step" if diff is None else f"differs from step {diff}"))
        return 0 if diff is None else 1
    setups = [s.split("=", 1) for s in args.setup] or [["here", os.environ.get("XLA_FLAGS", "")]]
    committed = json.loads((Path(args.study) / args.run / "eval.json").read_text())["reward_curve"]
    records = []
    for name, flags in setups:
        rec = _run(args.study, args.run, args.steps, flags)
        records.append((name, flags, rec))
        vs_committed = first_difference([{"reward": r} for r in committed[:args.steps]], rec["log"], ("reward",))
        vs_first = first_difference(records[0][2]["log"], rec["log"])
        print(f"{name:>10}: {_median(rec['step_seconds']):.3f} s/step (median), reward equal to the committed run's "
              + (f"through step {args.steps}" if vs_committed is None else f"until step {vs_committed - 1}")
              + ("" if len(records) == 1 else ", identical to the first set-up" if vs_first is None
                 else f", departs from the first set-up at step {vs_first}")
              + f"  [XLA_FLAGS={flags!r}]", flush=True)
    if args.save_reference:
        path = Path(args.save_reference)
        path.parent.mkdir(parents=True, exist_ok=True)
        rec = records[0][2]
        keep = {k: rec[k] for k in ("study", "run", "steps", "log", "provenance")}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(keep, indent=1) + "\n")
        os.replace(tmp, path)
        print(f"reference written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
