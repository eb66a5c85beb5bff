"""Independent runs in worker processes, and a grid's units split across hosts.

    done = run_jobs([Job("s0/grpo-N8", (sys.executable, "-m", "catsim.experiments.maze.worker", ...))],
                    workers=2, threads=1)
    mine = [u for u, p in zip(units, owners(costs, parts=4)) if p == 1]     # `--part 1/4`

* `owners(costs, parts, programs)`: which part takes each unit, the split of `catsim sweep --part`
  (its `sweep_parts.cell_owners` calls it): a deterministic function of the whole grid, so every
  host (and a host that resumes) computes the same answer whatever is finished.
* `thread_flags(threads, flags)`: XLA_FLAGS for a job of `threads` threads (1: Eigen's thread pool
  off; T > 1: the pool on, sized by XLA from the T cores the job is pinned to), the thread settings
  of `flags` replaced.
* `run_jobs(jobs, workers, threads)`: each job is a fresh subprocess (XLA reads its thread count
  once, at start), `workers` at a time, each pinned to its own `threads` cores when they fit in the
  cores this process may use (they must for `threads` > 1: XLA counts a job's cores). One line per finished job (which, seconds, its last line of output).
  A job that fails stops the start of new ones; those running finish, then `run_jobs` raises one
  CatsimError naming it with its last line of output. The parent stopped (Ctrl-C, SIGTERM as
  KeyboardInterrupt) stops every job with SIGTERM; the parent killed outright (SIGKILL) sends them
  SIGTERM too (Linux: the parent-death signal). Each job must commit its own work, so nothing a job
  finished is lost and a rerun resumes the rest.

Measured by `benchmarks/maze_jobs.py` (a 2-core machine, the Maze study's CPU workload, 300 steps a
run): one run at default threads 89.1 s; one run at one thread 139.8 s; two one-thread runs at once
145.7 s — 1.22× the runs per hour of one run at a time at default threads (docs/cluster.md).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from catsim.errors import CatsimError

THREAD_FLAGS = ("xla_cpu_multi_thread_eigen", "intra_op_parallelism_threads")


# ----------------------------------------------------------------------------- the split across hosts
def owners(costs: Sequence[float], parts: int, programs: Sequence | None = None) -> list[int]:
    """The part (0 … parts−1) that takes each unit, from each unit's estimated cost (only the ranking
    and the sums matter): costliest unit first, each onto the least loaded part; among equally loaded
    parts one that already holds a unit of the same `programs` entry (one compilation fewer), else
    the lowest index. Deterministic: the same costs give the same split on every host."""
    if parts < 1:
        raise CatsimError(f"parts must be >= 1, got {parts}")
    programs = list(programs) if programs is not None else list(range(len(costs)))
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    load = [0.0] * parts
    held: list[set] = [set() for _ in range(parts)]
    out = [0] * len(costs)
    for i in order:
        least = min(load)
        free = [p for p in range(parts) if math.isclose(load[p], least)]
        part = next((p for p in free if programs[i] in held[p]), free[0])
        out[i] = part
        load[part] += costs[i]
        held[part].add(programs[i])
    return out


def share(units: Sequence, costs: Sequence[float], part: tuple[int, int] | None,
          programs: Sequence | None = None) -> list:
    """The units of `part` (I, P) of the whole list `units` (all of them for None), in their order:
    `owners(costs, P, programs)`."""
    if part is None:
        return list(units)
    index, count = part
    return [u for u, p in zip(units, owners(costs, count, programs)) if p == index]


# ----------------------------------------------------------------------------- thread settings
def thread_flags(threads: int | None, flags: str = "") -> str:
    """`flags` (an XLA_FLAGS value) with its thread settings replaced by those for `threads` (None:
    left as they are: XLA's default, every core the process may use). 1: Eigen's thread pool off
    (with the inert `intra_op_parallelism_threads=1` that the JAX FAQ's spelling carries and
    `catsim.provenance.threads` reads). T > 1: the pool on, over the cores the job is pinned to —
    XLA sizes it from the process's affinity; `intra_op_parallelism_threads` is no XLA flag (XLA
    refuses it as `--intra_op_parallelism_threads` and ignores it after a `--` flag), so T threads
    need T pinned cores (`run_jobs` refuses T > 1 it cannot pin)."""
    if threads is None:
        return flags
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise CatsimError(f"threads must be a whole number >= 1, got {threads!r}")
    kept = [f for f in flags.split() if f.lstrip("-").partition("=")[0] not in THREAD_FLAGS]
    ours = ["--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1"] if threads == 1 else \
        ["--xla_cpu_multi_thread_eigen=true"]
    return " ".join(kept + ours)


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity), in order."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


# ----------------------------------------------------------------------------- running the jobs
@dataclass(frozen=True)
class Job:
    """One independent run: its name (in progress and errors) and the command that makes it."""

    name: str  # e.g. "s0/grpo-N8"
    argv: tuple  # the command, e.g. (sys.executable, "-m", "catsim.experiments.maze.worker", ...)


@dataclass(frozen=True)
class Done:
    """A finished job: its name, wall seconds and last line of standard output."""

    name: str
    seconds: float
    last_line: str


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _launch(argv: list[str]) -> None:
    """`python -m catsim.jobs PARENT CORES COMMAND...`: the job's own process, before it becomes
    COMMAND (exec keeps both settings): SIGTERM when the parent dies (Linux's parent-death signal;
    elsewhere a killed parent leaves its jobs to finish their run), pinned to CORES ("0,1"; "-": not
    pinned). Here, not in a fork hook: the parent may hold JAX's threads, and a fork hook that imports
    is unsafe then."""
    parent, cores, command = int(argv[0]), argv[1], argv[2:]
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the signal was set
        raise SystemExit(1)
    if cores != "-" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [int(c) for c in cores.split(",")])
    os.execvp(command[0], command)


def check_layout(workers: int, threads: int | None) -> bool:
    """Whether `workers` jobs of `threads` threads each are pinned (they fit in the usable cores);
    CatsimError (one line) for jobs of more than one thread that do not fit: XLA would not compute
    with the threads they claim."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise CatsimError(f"jobs must be a whole number >= 1, got {workers!r}")
    thread_flags(threads)  # a valid count
    cores = len(usable_cores())
    pin = threads is not None and workers * threads <= cores
    if threads is not None and threads > 1 and not pin:
        raise CatsimError(f"{workers} jobs × {threads} threads need {workers * threads} cores to pin them to, and this "
                          f"process may use {cores}: XLA takes a job's threads from its cores (fewer jobs or "
                          "threads, or one thread each)")
    return pin


def run_jobs(jobs: Sequence[Job], workers: int = 1, threads: int | None = 1, *, env: dict | None = None,
             say=print) -> list[Done]:
    """Run `jobs` (see the module docstring), `workers` at a time, each at `threads` XLA threads
    (None: XLA's default) and pinned to its own cores when workers × threads fit in the usable ones.
    Returns every job's `Done`, in the order they finished; raises CatsimError when one failed."""
    base = dict(os.environ if env is None else env)
    base["XLA_FLAGS"] = thread_flags(threads, base.get("XLA_FLAGS", ""))
    pin = check_layout(workers, threads)
    cores = usable_cores()
    free_slots = list(range(workers))
    pending = list(jobs)
    running: dict[int, tuple] = {}  # slot -> (job, process, output file, start time)
    done: list[Done] = []
    failed: list[str] = []
    try:
        while pending or running:
            while pending and free_slots and not failed:
                slot, job = free_slots.pop(0), pending.pop(0)
                out = tempfile.TemporaryFile(mode="w+")
                mine = cores[slot * threads:(slot + 1) * threads] if pin else None
                launch = [sys.executable, "-m", "catsim.jobs", str(os.getpid()),
                          ",".join(map(str, mine)) if mine else "-", *job.argv]
                proc = subprocess.Popen(launch, stdout=out, stderr=subprocess.STDOUT, env=base)
                running[slot] = (job, proc, out, time.perf_counter())
            if failed and not running:
                break
            time.sleep(0.05)
            for slot in [s for s, (_, p, _, _) in running.items() if p.poll() is not None]:
                job, proc, out, t0 = running.pop(slot)
                free_slots.append(slot)
                free_slots.sort()
                out.seek(0)
                last = _last_line(out.read())
                out.close()
                if proc.returncode == 0:
                    done.append(Done(job.name, time.perf_counter() - t0, last))
                    say(f"[{len(done)}/{len(jobs)}] {job.name}: {done[-1].seconds:.1f} s" + (f"; {last}" if last else ""))
                else:
                    failed.append(f"{job.name} failed (exit {proc.returncode}): {last or 'no output'}")
                    say(failed[-1] + ("; the running jobs finish, no new one starts" if running or pending else ""))
    except BaseException:
        _stop([proc for _, proc, _, _ in running.values()])
        raise
    if failed:
        raise CatsimError(failed[0] + (f" (and {len(failed) - 1} more failed)" if len(failed) > 1 else "")
                          + "; rerun to resume")
    return done


def _stop(procs: list) -> None:
    """SIGTERM each running job (a clean stop at a step boundary), then SIGKILL one that lingers."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    _launch(sys.argv[1:])
