"""The Maze study inside TRL (`catsim llm maze-study --trainer trl`, catsim.experiments.maze.trl) on the
tiny preset: TRL's GRPOTrainer and the plug-in's FGRPOTrainer train from the study's warm-up, catsim
evaluates them; a finished run is read back, a trained one missing its evaluation is only evaluated,
an interrupted one is retrained; the report gets the cross-trainer section."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("trl")

from catsim.cli.main import main  # noqa: E402
from catsim.errors import CatsimError  # noqa: E402
from catsim.experiments.maze import presets as maze_presets  # noqa: E402
from catsim.experiments.maze import study  # noqa: E402
from catsim.experiments.maze import trl as maze_trl  # noqa: E402

QUIET = {"progress": False, "say": lambda *_: None}


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("trl") / "study"
    study.run_study(out, maze_presets.tiny(), **QUIET)
    return out


def test_config_is_the_study_step_in_trl():
    sp = maze_presets.cpu()
    grpo = maze_trl.trl_config(sp, "grpo", 8, 0.0, 2, 25, "/tmp/x")
    focal = maze_trl.trl_config(sp, "f-grpo", 8, 0.5, 2, 25, "/tmp/x")
    assert type(grpo).__name__ == "GRPOConfig" and focal.focal_gamma == 0.5
    for c in (grpo, focal):
        assert (c.per_device_train_batch_size, c.num_generations, c.max_completion_length) == (256, 8, 25)
        assert (c.learning_rate, c.warmup_steps, c.max_steps, c.seed) == (1e-4, 2, 2000, 2)
        assert (c.loss_type, c.beta, c.epsilon, c.scale_rewards) == ("dapo", 0.0, 0.2, "group")
    assert maze_trl.plan(sp) == [(m, 8, g, s) for s in range(3) for m, g in (("grpo", 0.0), ("f-grpo", 0.5))]


def test_trl_runs_resume_and_report(tiny_study, tmp_path, capsys):
    sp = maze_presets.tiny()
    out = tmp_path / "study"
    shutil.copytree(tiny_study, out)
    capsys.readouterr()
    first = maze_trl.run_trl_study(out, sp, max_runs=1, **QUIET)
    assert len(first["runs"]) == 1 and first["pending"] == ["s0/trl-f-grpo-N2-g0.5"]
    printed = capsys.readouterr()
    assert "'loss'" not in printed.out + printed.err  # quiet: not TRL's per-step log
    grpo = out / "s0" / "trl-grpo-N2"
    done = json.loads((grpo / "eval.json").read_text())
    assert done["versions"]["trl"] and done["versions"]["torch"] and len(done["reward_curve"]) == sp.rl_steps
    assert done["final"]["n"] == sp.eval_n and len(done["final"]["num_correct"]) == sp.eval_prompts
    finished = (grpo / "eval.json").read_text()
    log_mtime = (grpo / "trl_log.jsonl").stat().st_mtime_ns
    whole = maze_trl.run_trl_study(out, sp, **QUIET)
    assert (grpo / "eval.json").read_text() == finished and not whole["pending"]  # read back
    assert [r["trainer"] for r in whole["cross"]] == ["catsim", "trl"] and whole["cross"][1]["test"] is not None
    focal = out / "s0" / "trl-f-grpo-N2-g0.5"
    rows = [json.loads(x) for x in (focal / "trl_log.jsonl").read_text().splitlines()]
    assert all("catsim/focal_weight/mean" in r for r in rows)  # the plug-in did the F-GRPO run
    # a trained run without its evaluation is evaluated, not retrained
    (grpo / "eval.json").unlink()
    again = maze_trl.run_trl_study(out, sp, **QUIET)
    assert (grpo / "trl_log.jsonl").stat().st_mtime_ns == log_mtime
    assert json.loads((grpo / "eval.json").read_text())["final"] == done["final"]
    assert again["tests"] == whole["tests"]
    # an interrupted one (no final model) is retrained
    shutil.rmtree(grpo / "model")
    (grpo / "eval.json").write_text("{")
    said = []
    maze_trl.run_trl_study(out, sp, progress=False, say=said.append)
    assert any("recomputing it" in s for s in said) and (grpo / "model" / "catsim_task.json").is_file()
    assert (grpo / "trl_log.jsonl").stat().st_mtime_ns != log_mtime
    report = tmp_path / "report"
    capsys.readouterr()
    assert main(["llm", "maze-study", "--out", str(out), "--report", str(report)]) == 0
    text = (report / "report.md").read_text()
    assert "## The same finding inside TRL" in text and "| trl |" in text and "--trainer trl" in text
    assert json.loads((report / "trl.json").read_text())["runs"]


def test_cli_trl_refusals(tiny_study, tmp_path, capsys):
    for argv, why in ((["--out", str(tiny_study), "--trainer", "trl", "--arms", "all"], "separate runs"),
                      (["--out", str(tmp_path / "none"), "--trainer", "trl"], "holds no maze study")):
        capsys.readouterr()
        assert main(["llm", "maze-study", "--preset", "tiny", "--no-progress", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert why in err and "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "none").exists()


def test_cli_trl_refuses_a_study_without_gamma_one_half(tmp_path, capsys):
    """The TRL runs train F-GRPO at γ = 0.5: on a study whose plan has no γ = 0.5 catsim's side of the
    cross-trainer table would be empty ("–"), so it is refused in one line before any work."""
    out = tmp_path / "study"
    assert main(["llm", "maze-study", "--preset", "tiny", "--no-progress", "--out", str(out), "--trainer", "trl",
                 "--gamma", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "γ = 0.5" in err and "--gamma" in err and "\n" not in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(CatsimError, match="γ = 0.5"):  # the function beneath, before any file
        maze_trl.run_trl_study(out, maze_presets.tiny().with_overrides(gammas=[1.0]), **QUIET)
    assert not out.exists()


def test_size_line_reads_the_two_intervals():
    def cross(trl_iv, trl_d):
        return {"cross": [{"trainer": "catsim", "test": {"delta": 0.036, "interval": [0.025, 0.048]}},
                          {"trainer": "trl", "test": {"delta": trl_d, "interval": trl_iv}}]}
    overlap = maze_trl._size_line(cross([0.013, 0.036], 0.025), 64)
    assert "+2.5 points in TRL against +3.6 in catsim (-1.1)" in overlap and "intervals overlap" in overlap
    apart = maze_trl._size_line(cross([0.001, 0.02], 0.01), 64)
    assert "do not overlap: the effect is smaller in TRL" in apart
    assert "larger in TRL" in maze_trl._size_line(cross([0.05, 0.07], 0.06), 64)
