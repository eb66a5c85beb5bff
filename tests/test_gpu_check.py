"""benchmarks/gpu_check.sh, the prepared accelerator check: its shell is valid and, at tiny sizes
(--cpu-smoke), every part runs on a CPU and writes its summary."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_an_unknown_option_is_refused(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path), "--gpu"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown option --gpu" in proc.stderr


@pytest.mark.slow
def test_the_cpu_smoke_run_completes_every_part(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               JAX_PLATFORMS="cpu")
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "--cpu-smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "out" / "summary.txt").read_text()
    for part in ("sweep", "llm_check", "plan_4x16", "plan_1x64", "rollout"):
        assert f"[{part}] ok" in summary, summary
    report = json.loads((tmp_path / "out" / "llm_check.json").read_text())
    assert report["cpu_smoke"] and report["rows"] == 4 and report["seq"] == 16
    assert report["rollout_tokens"] == 4 * 8  # no stop token: every row runs to its length
    assert report["rl_step_seconds"] > 0 and report["rollout_tokens_per_second"] > 0
    plan = report["plan"]
    assert plan["params"] == report["params"] and plan["batch"] == 4 and plan["seq"] == 16
    assert plan["per_device_bytes"] >= plan["param_bytes"] + plan["optimizer_bytes"]
    assert (tmp_path / "out" / "sweep" / "table.txt").is_file()
    assert "per_device_bytes (peak)" in summary
    rollout = json.loads((tmp_path / "out" / "rollout_check.json").read_text())["models"][0]
    assert rollout["rows"] == 8 and rollout["cascade"]["useful_tokens"] == rollout["static"]["useful_tokens"]
    assert "rollout Qwen2.5-0.5B cascade" in summary
    assert "[maze_study_step] ok" in summary and "s per 100 steps" in summary, summary  # Maze study part
