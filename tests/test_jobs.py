"""`catsim.jobs`: the split across hosts (hand-computed cases), XLA thread flags, and jobs in worker
processes — each pinned and at its thread count, a failure reported in one line after the others
finish, and the jobs stopped when the parent is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from catsim import jobs
from catsim.errors import CatsimError
from catsim.provenance import threads


def test_owners_costliest_first_onto_the_least_loaded_part():
    # costs 5, 1, 4, 3 over 2 parts: 5 -> 0, 4 -> 1, 3 -> 1 (4 < 5), 1 -> 0 (5 < 7)
    assert jobs.owners([5, 1, 4, 3], 2) == [0, 0, 1, 1]
    assert jobs.owners([1, 1, 1], 1) == [0, 0, 0]
    assert jobs.owners([1, 1], 4) == [0, 1]  # more parts than units: parts left idle
    # equal loads: the part already holding the unit's program takes it
    assert jobs.owners([2, 2, 1, 1], 2, programs=["a", "b", "b", "a"]) == [0, 1, 1, 0]
    assert jobs.owners([2, 2, 1, 1], 2) == [0, 1, 0, 1]


def test_share_is_a_partition_in_unit_order():
    units, costs = list("abcdefg"), [3, 1, 4, 1, 5, 9, 2]
    parts = [jobs.share(units, costs, (i, 3)) for i in range(3)]
    assert sorted(sum(parts, [])) == units
    assert all(p == sorted(p) for p in parts)
    assert jobs.share(units, costs, None) == units
    with pytest.raises(CatsimError):
        jobs.owners([1], 0)


def test_thread_flags_replace_only_the_thread_settings():
    one = jobs.thread_flags(1, "--xla_cpu_max_isa=AVX2 --intra_op_parallelism_threads=4")
    assert one == "--xla_cpu_max_isa=AVX2 --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    assert threads(one) == 1
    assert jobs.thread_flags(3, "--a=1 --xla_cpu_multi_thread_eigen=false") == "--a=1 --xla_cpu_multi_thread_eigen=true"
    assert jobs.thread_flags(None, "--xla_cpu_max_isa=AVX2") == "--xla_cpu_max_isa=AVX2"
    with pytest.raises(CatsimError):
        jobs.thread_flags(0)


REPORT = ("import json, os; print(json.dumps({'cores': sorted(os.sched_getaffinity(0)), "
          "'flags': os.environ['XLA_FLAGS']}))")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux affinity")
def test_jobs_run_pinned_at_their_thread_count():
    said = []
    done = jobs.run_jobs([jobs.Job(f"j{i}", (sys.executable, "-c", REPORT)) for i in range(3)], workers=2,
                         threads=1, say=said.append)
    assert sorted(d.name for d in done) == ["j0", "j1", "j2"] and len(said) == 3
    seen = [json.loads(d.last_line) for d in done]
    assert all(threads(s["flags"]) == 1 for s in seen)
    if len(jobs.usable_cores()) >= 2:  # two one-thread workers fit: each pinned to one core
        assert all(len(s["cores"]) == 1 for s in seen)
    loose = jobs.run_jobs([jobs.Job("x", (sys.executable, "-c", REPORT))], workers=1, threads=None, say=said.append)
    assert json.loads(loose[0].last_line)["cores"] == jobs.usable_cores()


XLA = "import jax, jax.numpy as jnp; from catsim.provenance import threads; print(float(jnp.ones(3).sum()), threads())"


def test_xla_takes_the_flags_and_the_thread_count_is_the_jobs():
    # `--intra_op_parallelism_threads=T` would stop XLA at start ("Unknown flag in XLA_FLAGS")
    cores = len(jobs.usable_cores())
    for threads_each in sorted({1, min(2, cores)}):
        done = jobs.run_jobs([jobs.Job("x", (sys.executable, "-c", XLA))], 1, threads_each, say=lambda _: None)
        assert done[0].last_line == f"3.0 {threads_each}"
    with pytest.raises(CatsimError, match="cores to pin them to"):
        jobs.run_jobs([jobs.Job("x", (sys.executable, "-c", "0"))], 1, cores + 1, say=lambda _: None)


def test_a_failing_job_fails_the_call_after_the_others_finish(tmp_path):
    mark = tmp_path / "slow-finished"
    slow = f"import time, pathlib; time.sleep(1); pathlib.Path({str(mark)!r}).write_text('ok')"
    bad = "import sys; print('starting'); print('error: no maze here'); sys.exit(2)"
    never = tmp_path / "never"
    later = f"import pathlib; pathlib.Path({str(never)!r}).write_text('ran')"
    with pytest.raises(CatsimError, match=r"^bad failed \(exit 2\): error: no maze here; rerun to resume$"):
        jobs.run_jobs([jobs.Job("slow", (sys.executable, "-c", slow)), jobs.Job("bad", (sys.executable, "-c", bad)),
                       jobs.Job("later", (sys.executable, "-c", later))], workers=2, say=lambda _: None)
    assert mark.read_text() == "ok" and not never.exists()  # the running job finished; none started after


PARENT = """
import sys
from catsim import jobs
child = "import os, time, pathlib; pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(120)"
child = "import sys; " + child
jobs.run_jobs([jobs.Job(f"j{i}", (sys.executable, "-c", child, f"{sys.argv[1]}/pid{i}")) for i in range(2)],
              workers=2, say=print)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_parent_stops_its_jobs(tmp_path, how):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(PARENT), str(tmp_path)])
    pids = [tmp_path / "pid0", tmp_path / "pid1"]
    deadline = time.monotonic() + 60
    while not all(p.is_file() and p.read_text() for p in pids):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    parent.send_signal(how)
    parent.wait(timeout=60)
    children = [int(p.read_text()) for p in pids]
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in children):
        assert time.monotonic() < deadline, "a job outlived its killed parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


HANDLED = """
import signal, sys
from catsim import jobs
from catsim.signals import Terminated, on_sigterm
signal.signal(signal.SIGTERM, on_sigterm)  # as the catsim command does
child = '''
import os, pathlib, signal, sys, time
def stop(*_):
    pathlib.Path(sys.argv[1] + ".stopped").write_text("clean")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
time.sleep(120)
'''
try:
    jobs.run_jobs([jobs.Job(f"j{i}", (sys.executable, "-c", child, f"{sys.argv[1]}/pid{i}")) for i in range(2)],
                  workers=2, say=print)
except Terminated:
    sys.exit(143)
"""


def test_a_terminated_parent_stops_its_jobs_cleanly_and_waits_for_them(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", HANDLED, str(tmp_path)])
    pids = [tmp_path / "pid0", tmp_path / "pid1"]
    deadline = time.monotonic() + 60
    while not all(p.is_file() and p.read_text() for p in pids):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=60) == 143
    # run_jobs sent each job SIGTERM (its handler ran) and waited for it before the parent left
    assert [(tmp_path / f"pid{i}.stopped").read_text() for i in range(2)] == ["clean", "clean"]
    assert not any(_alive(int(p.read_text())) for p in pids)
