"""benchmarks/regenerate_run.py, the tool docs/reproducibility.md gives for regenerating a study run
exactly: a reference saved under pinned XLA flags is regenerated bit for bit on the same set-up (the
first step that differs is found by `first_difference`, tested on its own)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from catsim.experiments.maze import presets as maze_presets
from catsim.experiments.maze.study import run_study

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "regenerate_run.py"
PINNED = "--xla_cpu_max_isa=AVX2 --xla_cpu_use_xnnpack=false --xla_cpu_multi_thread_eigen=false " \
         "intra_op_parallelism_threads=1"


def _load():
    import importlib.util

    spec = importlib.util.spec_from_file_location("regenerate_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_first_difference_names_the_first_step_that_differs():
    first = _load().first_difference
    a = [{"loss": 0.5, "reward": 0.25}, {"loss": 0.4, "reward": 0.5}]
    assert first(a, [dict(r) for r in a]) is None
    assert first(a, [a[0], {**a[1], "loss": 0.4000001}]) == 2
    assert first(a, [{**a[0], "reward": 0.0}, a[1]], ("reward",)) == 1


@pytest.mark.slow
def test_a_pinned_reference_regenerates_bit_for_bit(tmp_path):
    study = tmp_path / "study"
    run_study(study, maze_presets.tiny(), progress=False, say=lambda *_: None)
    ref = tmp_path / "ref.json"
    made = subprocess.run([sys.executable, str(SCRIPT), "--study", str(study), "--run", "s0/grpo-N2", "--steps", "2",
                           "--setup", f"pinned={PINNED}", "--save-reference", str(ref)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "pinned: " in made.stdout and "reward equal to the committed run's through step 2" in made.stdout
    saved = json.loads(ref.read_text())
    assert len(saved["log"]) == 2 and saved["provenance"]["xla_flags"] == PINNED
    assert saved["provenance"]["threads"] == 1
    check = subprocess.run([sys.executable, str(SCRIPT), "--check-reference", str(ref)], capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0 and "bit-identical at every step" in check.stdout, check.stdout + check.stderr[-2000:]
