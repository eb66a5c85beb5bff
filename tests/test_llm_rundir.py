"""The run directory shared by the warm-up and RL, and the nested RL config's flat view."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm import rundir
from catsim.llm.rl import FLAT, RLConfig


def test_a_second_run_on_a_locked_directory_stops_with_one_line(tmp_path):
    run = rundir.RunDir(tmp_path, state_file="s.safetensors", log_file="log.jsonl", fingerprint="x")
    with run.locked():
        # another process: the lock is per open file, so a second process must be refused
        code = textwrap.dedent(f"""
            from catsim.llm import rundir
            from catsim.errors import CatsimError
            try:
                with rundir.RunDir({str(tmp_path)!r}, state_file="s", log_file="l", fingerprint="y").locked():
                    print("entered")
            except CatsimError as err:
                print("refused:", err)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.startswith("refused:") and "in use by another run" in out and out.count("\n") == 1
    with run.locked():  # released at exit: the same directory can be used again
        pass


def test_state_round_trip_resume_and_log_truncation(tmp_path):
    run = rundir.RunDir(tmp_path, state_file="s.safetensors", log_file="log.jsonl", fingerprint="abc")
    tree = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.asarray(3, np.int32)}
    assert run.resume(tree) == (tree, 0)
    run.log_path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "cut')
    run.save_state({"w": tree["w"] + 1, "n": tree["n"]}, 2)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    loaded, step = run.resume(tree)
    assert step == 2 and np.array_equal(loaded["w"], tree["w"] + 1)
    assert [r["step"] for r in run.history()] == [1, 2]  # steps after the saved one dropped
    other = rundir.RunDir(tmp_path, state_file="s.safetensors", log_file="log.jsonl", fingerprint="zzz")
    with pytest.raises(CatsimError, match="different settings"):
        other.resume(tree)


def test_task_file_has_one_reader(tmp_path):
    with pytest.raises(CatsimError, match="catsim_task.json"):
        rundir.read_task_file(tmp_path)
    rundir.write_json(tmp_path / rundir.TASK_FILE, {"task": "maze", "config": {"size": 5}, "data_seed": 3})
    task, seed = rundir.task_for_model(tmp_path, None, {})
    assert (task.name, task.config.size, seed) == ("maze", 5, 3)
    task, seed = rundir.task_for_model(tmp_path, "maze", {"size": 7}, data_seed=1)
    assert (task.config.size, seed) == (7, 1)
    (tmp_path / rundir.TASK_FILE).write_text("{not json")
    with pytest.raises(CatsimError, match="not valid JSON"):
        rundir.read_task_file(tmp_path)


def test_flat_options_round_trip_through_the_nested_config():
    cfg = RLConfig.from_flat(method="dapo", gamma=0.5, gamma_schedule="warmup", gamma_warmup_steps=3,
                             group_size=4, learning_rate=3e-4, asym_mixed=True, mixed_delta=1.0, seed=7)
    assert cfg.gamma.kind == "warmup" and cfg.gamma.warmup_steps == 3 and cfg.gamma.gamma == 0.5
    assert cfg.rollout.group_size == 4 and cfg.optimizer.learning_rate == 3e-4 and cfg.run.seed == 7
    assert cfg.use("mixed") and cfg.asym.delta == 1.0
    assert set(cfg.flat()) == set(FLAT)
    assert RLConfig.from_flat(**cfg.flat()) == cfg
    assert cfg.replace(seed=8).run.seed == 8 and cfg.run.seed == 7
    with pytest.raises(CatsimError, match="unknown RL option"):
        RLConfig.from_flat(gama=0.5)
    with pytest.raises(CatsimError, match="gamma"):
        RLConfig.from_flat(gamma=-1.0)
