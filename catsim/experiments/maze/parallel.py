"""The Maze study's runs in worker processes (`--jobs`) and across hosts (`--part`).

    run_parallel("runs/maze-study", presets.cpu(), jobs=2)                  # two runs at a time
    run_parallel("runs/maze-study", presets.cpu(), arms=arm_set("cpu"), part=(0, 2))   # half the arms' runs

A unit is one RL run, `s<seed>/<label>`: a study run, or (given `arms`) an arm's run. A part's share
is `catsim.jobs.owners` — the split of `catsim sweep --part` — over every unit (finished or not), each
costed by its rollouts (steps × prompts × N) with a seed's units together when that costs nothing;
so every part, and every rerun, computes the same shares whatever is finished. Every part must be
given the same settings (and the same --arms).

Before any run, the warm-ups of the seeds this call's runs need are trained here, one at a time,
each under a lock file (`s<seed>/.warm-up.lock`, `fcntl.flock`) so that parts on hosts sharing the
study folder train each once. Then each run is a job (`catsim.jobs.run_jobs`):
`python -m catsim.experiments.maze.worker`, which runs that one unit as the serial study does
(`study.run_study` / `arms.run_arms` with `only`) and commits its eval.json — a job stopped or killed
loses only its unfinished run, which resumes from its last saved RL state. `jobs=1` without `threads`
runs the share here, in this process, at its threads (as the serial study). A run in a job equals
the same run made alone at the same thread count, bit for bit; its eval.json's provenance records
the thread count (`threads`).

Without `part`, the call ends as the serial study does: results.json (arms.json) written from every
run. A part writes no summary (parts finishing together would race to write it): when every part is
done, the same command without --part runs nothing and writes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from catsim.errors import CatsimError
from catsim.experiments.maze import study
from catsim.experiments.maze.carry import at_stop
from catsim.experiments.maze.pieces import read_base, read_run
from catsim.experiments.maze.presets import StudyPreset, run_label, run_names
from catsim.jobs import Job, check_layout, run_jobs, share

LOCK_FILE = ".warm-up.lock"


@dataclass(frozen=True)
class Unit:
    """One RL run of the study or of an arm."""

    name: str  # s<seed>/<label>, its directory under the study folder
    seed: int
    cost: float  # rollouts: steps × prompts per step × N
    arm: object = None  # the arm (`arms.Arm`), None for a study run
    run: tuple = ()  # (method, N, γ, seed) of a study run


def units(sp: StudyPreset, arms=None) -> list[Unit]:
    """Every unit, in the serial order: the study's runs (`run_names`), or the trained arms' runs
    arm by arm (an arm that is a study run is read from the study, never a unit)."""
    if arms is None:
        return [Unit(f"s{seed}/{run_label(m, n, g)}", seed, float(sp.rl_steps * sp.prompts(n) * n), run=(m, n, g, seed))
                for m, n, g, seed in run_names(sp)]
    return [Unit(f"s{seed}/{a.label()}", seed, float((a.steps or sp.rl_steps) * sp.prompts(a.group_size) * a.group_size),
                 arm=a) for a in arms if not a.study_run for seed in range(a.seeds)]


def my_units(sp: StudyPreset, arms=None, part: tuple[int, int] | None = None) -> list[Unit]:
    """The units of `part` (I, P) (all without one), in the serial order."""
    every = units(sp, arms)
    return share(every, [u.cost for u in every], part, [u.seed for u in every])


def _finished(sp: StudyPreset, out: Path, unit: Unit, say) -> bool:
    if unit.arm is None:
        method, n, gamma, seed = unit.run
        return read_run(sp, out / f"s{seed}", method, n, gamma, seed, say) is not None
    from catsim.experiments.maze.arms import read_arm_run

    return read_arm_run(sp, out, unit.arm, unit.seed, say) is not None


@contextlib.contextmanager
def _locked(path: Path):
    """Hold an exclusive lock on `path` (waits for another process's)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX)
        except OSError as err:
            raise CatsimError(f"cannot lock {path} ({err.strerror or err}): the study folder's file system takes "
                              "no locks; train the warm-ups first with one call without --part") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def warm_ups(out: Path, sp: StudyPreset, seeds, *, progress, say) -> None:
    """Train (or resume) and evaluate the warm-up of each seed in `seeds`, each under its lock."""
    task = study.study_task(sp)
    for seed in sorted(set(seeds)):
        sdir = out / f"s{seed}"
        bases: dict = {}
        if read_base(sp, sdir, lambda _: None) is not None and (sdir / "base" / "config.json").is_file():
            continue  # finished: nothing to lock
        with _locked(sdir / LOCK_FILE):  # another part may be training it: wait, then read it
            study.ensure_base(sp, task, sdir, seed, bases, progress=progress, say=say)


def worker_command(out: Path, sp: StudyPreset, unit: Unit, log_to=(), stop_after: int | None = None) -> tuple:
    """The command of a job that runs `unit` (`catsim.experiments.maze.worker`)."""
    sinks = json.loads(json.dumps(dataclasses.asdict(log_to))) if dataclasses.is_dataclass(log_to) else list(log_to)
    spec = {"preset": study.preset_json(sp), "unit": unit.name, "log_to": sinks,  # a LogTo's W&B settings too
            "arm": None if unit.arm is None else json.loads(json.dumps(dataclasses.asdict(unit.arm))),
            **({"stop_after": stop_after} if stop_after is not None else {})}
    return (sys.executable, "-m", "catsim.experiments.maze.worker", str(out), json.dumps(spec))


def run_parallel(out_dir, sp: StudyPreset, *, arms=None, jobs: int = 1, threads: int | None = None,
                 part: tuple[int, int] | None = None, progress: bool | None = True, log_to: tuple = (),
                 max_runs: int | None = None, say=print, stop_after: int | None = None):
    """Run the pending units of this part (all without `part`; at most `max_runs`), `jobs` at a time
    at `threads` XLA threads each (None with jobs > 1: 1), each stopped after `stop_after` steps
    (arms only: `arms.run_arms`); see the module docstring. Returns the
    study's results (`run_study`'s) or arms.json's content (`run_arms`'s) when no part was given and
    nothing is left (arms: always, without `part`), else None."""
    from catsim.experiments.maze import arms as maze_arms

    out = Path(out_dir)
    if not (jobs == 1 and threads is None):
        check_layout(jobs, threads or 1)  # before any work
    if arms is None:
        study.prepare_study(out, sp, say)  # the serial study's checks, then study.json
    else:
        maze_arms.check_arms_ready(out, sp, arms, say)
    mine = my_units(sp, arms, part)
    pending = [u for u in mine if not _finished(sp, out, u, say)]
    todo = [u for u in pending if not at_stop(out / u.name, stop_after)]
    now = todo if max_runs is None else todo[:max_runs]
    if part is not None:
        say(f"part {part[0]}/{part[1]}: {len(mine)} of {len(units(sp, arms))} runs are this part's, "
            f"{len(pending)} of them pending")
    warm_ups(out, sp, [u.seed for u in now], progress=progress, say=say)
    if now and jobs == 1 and threads is None:  # here, at this process's threads
        only = {u.name for u in now}
        if arms is None:
            study.run_study(out, sp, progress=progress, log_to=log_to, say=say, only=only)
        else:
            maze_arms.run_arms(out, sp, arms, progress=progress, log_to=log_to, say=say, only=only,
                               stop_after=stop_after)
    elif now:
        say(f"{len(now)} runs, {jobs} at a time, {threads or 1} thread{'s' if (threads or 1) > 1 else ''} each")
        run_jobs([Job(u.name, worker_command(out, sp, u, log_to, stop_after)) for u in now], jobs, threads or 1,
                 say=say)
    left = len(pending) - len(now)
    if part is not None:
        return None
    if arms is not None:  # arms.json: every finished run, the others listed as pending
        return maze_arms.run_arms(out, sp, arms, progress=progress, log_to=log_to, say=say, max_runs=0)
    if left:
        say(f"stopped after {len(now)} runs this call; {left} pending: rerun to resume")
        return None
    return study.run_study(out, sp, progress=progress, log_to=log_to, say=say)  # every run finished: assembles
