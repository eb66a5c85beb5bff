"""`catsim llm pipeline` (and `llm compare`, the same pipeline) rebuilds results.json from every
run of its --out: a rerun asking about fewer runs keeps the others' summaries as they were."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError

TINY = ["--quick", "--no-progress", "--rl-steps", "1", "--rollouts-per-step", "4", "--eval-samples", "2",
        "--eval-prompts", "2"]


def _pipeline(tmp_path, out, runs: str, *extra: str) -> int:
    from llm_rl_helpers import make_paths_base

    base = tmp_path / "base"
    if not base.exists():
        make_paths_base(base)
    return main(["llm", "pipeline", "--out", str(out), *TINY, "--base-model", f"paths={base}", "--runs", runs,
                 *extra])


def test_a_rerun_with_fewer_runs_keeps_every_other_summary(tmp_path, capsys):
    """Before: the rerun with --runs grpo:2 (which trains nothing) rewrote results.json and
    report.md with grpo:2 alone: F-GRPO's summary and the paired test were gone, its run on disk."""
    out = tmp_path / "pipe"
    assert _pipeline(tmp_path, out, "grpo:2,f-grpo:2") == 0
    first = json.loads((out / "results.json").read_text())
    assert _pipeline(tmp_path, out, "grpo:2") == 0
    again = json.loads((out / "results.json").read_text())
    runs = again["tasks"]["paths"]["runs"]
    assert list(runs) == ["grpo:2:s0", "f-grpo:2:s0"]
    assert runs["f-grpo:2:s0"] == first["tasks"]["paths"]["runs"]["f-grpo:2:s0"]  # not asked about: unchanged
    assert runs["grpo:2:s0"]["eval"] == first["tasks"]["paths"]["runs"]["grpo:2:s0"]["eval"]
    assert again["tasks"]["paths"]["tests"] == first["tasks"]["paths"]["tests"]
    assert again["config"]["runs"] == ["grpo:2", "f-grpo:2"]
    report = (out / "report.md").read_text()
    assert "| F-GRPO γ=0.5 N=2 |" in report and "| GRPO N=2 |" in report

    # Other settings cannot share the summary: refused in one line before any work, nothing changed.
    capsys.readouterr()
    before = (out / "results.json").read_bytes()
    assert _pipeline(tmp_path, out, "grpo:2", "--gamma", "0.25") == 2
    err = capsys.readouterr().err.strip()
    assert "summarises runs made with other settings" in err and "gamma 0.5 there, 0.25 here" in err, err
    assert "\n" not in err
    assert (out / "results.json").read_bytes() == before


def _summary(tmp_path, runs: dict, base: str = "b") -> dict:
    from catsim.experiments.llm_pipeline import PipelineConfig

    config = json.loads(json.dumps(dataclasses.asdict(PipelineConfig.quick())))
    for key in runs:
        (tmp_path / "paths" / key / "model").mkdir(parents=True)
    tasks = {"paths": {"base_model": str(tmp_path / base), "runs": {
        key: {"run_dir": f"somewhere/paths/{key}", "seed": 0} for key in runs}}}
    (tmp_path / "results.json").write_text(json.dumps({"config": config, "tasks": tasks}))
    return {"config": config, "tasks": {}}


def test_the_summary_keeps_runs_on_disk_only_and_refuses_another_base(tmp_path):
    from catsim.experiments.llm_pipeline import summary_so_far

    fresh = _summary(tmp_path, {"grpo-N4-s0": 1, "f-grpo-N4-s0": 1})
    shutil.rmtree(tmp_path / "paths" / "f-grpo-N4-s0")  # its run is gone: no longer summarised
    kept = summary_so_far(tmp_path, fresh, {"paths": tmp_path / "b"})
    assert list(kept["tasks"]["paths"]["runs"]) == ["grpo-N4-s0"]
    assert summary_so_far(tmp_path, fresh, {})["tasks"] == kept["tasks"]  # a call about other tasks keeps it
    with pytest.raises(CatsimError, match="its paths runs start from .*b, this call's from .*other"):
        summary_so_far(tmp_path, fresh, {"paths": tmp_path / "other"})
    (tmp_path / "results.json").write_text("{")
    with pytest.raises(CatsimError, match="not a readable pipeline results.json"):
        summary_so_far(tmp_path, fresh, {})
