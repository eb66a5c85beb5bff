"""`catsim llm maze-study --jobs J` and `--part I/P` on the `tiny` preset: the runs made in jobs equal
the same runs made one after another at the same thread count (one), bit for bit; a parallel study
whose parent is killed mid-way resumes to the same results; two parts run at once as two processes
(the warm-up they share trained once, under its lock), then assembled, give the serial study's
results and report."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from catsim.cli.main import main
from catsim.experiments.maze import parallel, presets
from catsim.jobs import thread_flags, usable_cores

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="jobs are pinned and stopped the Linux way")

ONE_THREAD = {**os.environ, "XLA_FLAGS": thread_flags(1, os.environ.get("XLA_FLAGS", ""))}
RUNS = ("s0/grpo-N2", "s0/f-grpo-N2-g0.5")


def _study(out: Path, *extra: str, wait: bool = True):
    argv = [sys.executable, "-m", "catsim", "llm", "maze-study", "--out", str(out), "--preset", "tiny",
            "--no-progress", *extra]
    if not wait:
        return subprocess.Popen(argv, env=ONE_THREAD, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = subprocess.run(argv, env=ONE_THREAD, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _numbers(out: Path) -> dict:
    """Everything results.json says but wall times and where it was computed."""
    results = json.loads((out / "results.json").read_text())
    runs = [{k: v for k, v in r.items() if k not in ("rl_seconds", "provenance")} for r in results["runs"]]
    return {"bases": results["bases"], "runs": runs, "summary": results["summary"], "tests": results["tests"],
            "changes": results["changes"]}


def _workers(out: Path) -> list[int]:
    """The live processes whose command line names the study folder `out`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(out).encode() in (proc / "cmdline").read_bytes() \
                    and (proc / "stat").read_text().split(")")[-1].split()[0] != "Z":
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _weights(out: Path) -> dict:
    return {name: (out / name / "model" / "model.safetensors").read_bytes() for name in RUNS}


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The tiny study made one run after another, every piece at one thread."""
    out = tmp_path_factory.mktemp("serial") / "study"
    _study(out)
    return out


def test_units_and_parts_follow_the_sweeps_split():
    sp = presets.tiny()
    assert [u.name for u in parallel.units(sp)] == list(RUNS)
    halves = [parallel.my_units(sp, part=(i, 2)) for i in range(2)]
    assert sorted(u.name for h in halves for u in h) == sorted(RUNS) and all(len(h) == 1 for h in halves)
    cpu = presets.cpu()
    shares = [[u.name for u in parallel.my_units(cpu, part=(i, 3))] for i in range(3)]
    assert sorted(sum(shares, [])) == sorted(u.name for u in parallel.units(cpu))
    assert shares == [[u.name for u in parallel.my_units(cpu, part=(i, 3))] for i in range(3)]  # fixed


@pytest.mark.slow  # a tiny study in 3–5 processes (about a minute)
def test_jobs_killed_and_resumed_equal_the_serial_runs(serial, tmp_path):
    out = tmp_path / "jobs"
    proc = _study(out, "--jobs", "2", wait=False)
    deadline = time.monotonic() + 300
    while not any((out / name / "rl_config.json").is_file() for name in RUNS):
        assert time.monotonic() < deadline and proc.poll() is None, "no job started"
        time.sleep(0.1)
    proc.kill()  # SIGKILL: no clean-up in the parent; its jobs get SIGTERM (the parent-death signal)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while _workers(out):
        assert time.monotonic() < deadline, "a job outlived its killed parent"
        time.sleep(0.1)
    said = _study(out, "--jobs", "2")  # resumes: what was finished is kept, the rest made
    assert "at a time, 1 thread each" in said
    assert _numbers(out) == _numbers(serial)
    assert _weights(out) == _weights(serial)
    for name in RUNS:  # each run records the thread count it was made at
        pieces = json.loads((out / name / "eval.json").read_text())["provenance"]
        assert pieces and all(p["threads"] == 1 for p in pieces)
        if len(usable_cores()) >= 2:
            assert all(p["xla_flags"] == ONE_THREAD["XLA_FLAGS"] for p in pieces)


@pytest.mark.slow  # a tiny study in 3–5 processes (about a minute)
def test_two_parts_at_once_assemble_into_the_serial_report(serial, tmp_path):
    out = tmp_path / "parts"
    procs = [_study(out, "--part", f"{i}/2", wait=False) for i in range(2)]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert all("when every part is done" in o for o in outputs) and not (out / "results.json").exists()
    assert sum(o.count("seed 0: warm-up") for o in outputs) >= 1
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress"]) == 0  # assembles
    assert _numbers(out) == _numbers(serial)
    reports = []
    for study in (out, serial):
        assert main(["llm", "maze-study", "--out", str(study), "--report", str(study.parent / "report")]) == 0
        text = (study.parent / "report" / "report.md").read_text()
        text = text.replace(str(study.parent / "report"), "REPORT").replace(str(study), "STUDY")
        text = text.split("## Where the runs were computed")[0]  # where and when, not what
        reports.append(re.sub(r"RL wall time per step.*", "", text))
    assert reports[0] == reports[1]


@pytest.mark.parametrize("flags, needle", [
    (["--part", "2/2"], "part must be (I, P) with 0 <= I < P"),
    (["--jobs", "2", "--trainer", "trl"], "go with catsim's runs"),
    (["--part", "0/2", "--format", "json"], "which --part does not print"),
    (["--jobs", "2", "--report", "REPORT"], "--jobs does not go with it"),
    (["--jobs", "2", "--threads-per-job", str(len(usable_cores()))], "cores to pin them to"),
])
def test_parallel_options_that_would_not_act_are_refused_in_one_line(serial, tmp_path, capsys, flags, needle):
    out = serial if "--report" in flags else tmp_path / "new"
    flags = [str(tmp_path / "r") if f == "REPORT" else f for f in flags]
    assert main(["llm", "maze-study", "--out", str(out), "--preset", "tiny", "--no-progress", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err, err
    assert not (tmp_path / "new").exists()


@pytest.mark.slow  # a tiny study in 3–5 processes (about a minute)
def test_arms_in_jobs(serial, tmp_path):
    out = tmp_path / "arms"
    shutil.copytree(serial, out)
    said = _study(out, "--arms", "grpo-kl,f-dapo-g0.5", "--jobs", "2")
    assert "2 runs, 2 at a time, 1 thread each" in said
    arms = json.loads((out / "arms.json").read_text())
    assert sorted(r["arm"] for r in arms["runs"] if r["arm"] in ("grpo-kl", "f-dapo-g0.5")) == ["f-dapo-g0.5", "grpo-kl"]
    for label in ("arm-grpo-kl-N2", "arm-f-dapo-g0.5-N2"):
        pieces = json.loads((out / "s0" / label / "eval.json").read_text())["provenance"]
        assert pieces and all(p["threads"] == 1 for p in pieces)


def test_a_jobs_spec_gives_back_the_preset_arm_and_sinks():
    from catsim.experiments.maze.arm_table import cpu_arms
    from catsim.experiments.maze.worker import read_spec
    from catsim.tracking import LogTo

    sp = presets.tiny(True)
    log_to = LogTo(("tensorboard", "wandb"), wandb_entity="team", wandb_mode="disabled")
    for unit in parallel.units(presets.cpu(), cpu_arms())[:3] + parallel.units(sp)[:1]:
        argv = parallel.worker_command(Path("/study"), sp, unit, log_to)
        assert argv[1:4] == ("-m", "catsim.experiments.maze.worker", "/study")
        assert read_spec(json.loads(argv[-1])) == (sp, unit.arm, log_to)
    assert read_spec(json.loads(parallel.worker_command(Path("/s"), sp, unit, ())[-1]))[2] == ()
