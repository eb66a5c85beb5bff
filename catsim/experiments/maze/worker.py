"""`python -m catsim.experiments.maze.worker OUT SPEC`: one run of the Maze study, a job of
`catsim.experiments.maze.parallel` (`catsim llm maze-study --jobs`).

SPEC is JSON: {"preset": the study's preset, "unit": "s<seed>/<label>", "arm": the arm's fields or
null for a study run, "log_to": trackers, and for an arm optionally "stop_after": steps}. The run is
made as the serial study makes it (`study.run_study` / `arms.run_arms` with `only`), its eval.json
committed; no summary is written.
SIGTERM stops it at a step boundary with its state saved (`catsim.signals`), as it stops `catsim`.
Exit 0 when done; 2 with one line `error: ...` (a CatsimError); 130 when stopped.
"""

from __future__ import annotations

import json
import signal
import sys


def main(argv: list[str]) -> int:
    from catsim.errors import CatsimError
    from catsim.signals import on_sigterm

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        out, spec = argv[0], json.loads(argv[1])
        run_unit(out, spec)
    except CatsimError as err:
        print(f"error: {err}", flush=True)
        return 2
    except KeyboardInterrupt:
        print("stopped; its state is saved: rerun to resume", flush=True)
        return 130
    return 0


def read_spec(spec: dict):
    """(preset, arm or None, log_to) of a job's SPEC (`parallel.worker_command` writes it)."""
    from catsim.experiments.maze.arm_table import Arm
    from catsim.experiments.maze.presets import StudyPreset

    log_to = spec.get("log_to") or ()
    if isinstance(log_to, dict):  # the parent's LogTo: its sinks and W&B settings
        from catsim.tracking import LogTo

        log_to = LogTo(**{**log_to, "sinks": tuple(log_to["sinks"])})
    arm = spec.get("arm")
    if arm is not None:
        arm = Arm(**{**arm, "study_run": tuple(arm["study_run"]), "compare": tuple(arm["compare"])})
    return StudyPreset(**spec["preset"]), arm, tuple(log_to) if isinstance(log_to, list) else log_to


def run_unit(out: str, spec: dict) -> None:
    from catsim.experiments.maze.arms import run_arms
    from catsim.experiments.maze.study import run_study

    sp, arm, log_to = read_spec(spec)
    kw = {"progress": False, "log_to": log_to, "only": {spec["unit"]}}
    if arm is None:
        run_study(out, sp, **kw)
    else:
        run_arms(out, sp, (arm,), stop_after=spec.get("stop_after"), **kw)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
