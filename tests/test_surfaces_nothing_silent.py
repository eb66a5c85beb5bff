"""Calls that claimed a setting that never acted, printed a number that is not one, or gave a
traceback: each now acts, prints what is true, or is refused in one line (exit 2)."""

import dataclasses
import json

import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.experiments import llm_pipeline
from catsim.experiments.llm_pipeline import PipelineConfig


def _one_line(capsys, *needles):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------------ llm pipeline: a reused warm-up
def _fake_warm_up(directory, pc: PipelineConfig, **size_changes):
    """The settings files of a finished warm-up of `pc`'s first task (no weights: the check comes
    before any model is read)."""
    from catsim.llm.rundir import task_spec
    from catsim.llm.sft import ModelSize, SFTConfig
    from catsim.llm.tasks import make_task

    setup = pc.tasks[0]
    task = make_task(setup.name, **setup.options)
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    (directory / "catsim_task.json").write_text(json.dumps(task_spec(task, pc.data_seed)))
    cfg = SFTConfig(steps=pc.sft_steps, batch_size=pc.sft_batch, learning_rate=pc.sft_lr,
                    warmup_steps=min(20, pc.sft_steps // 10), data_seed=pc.data_seed)
    size = ModelSize(hidden_size=pc.model_hidden, num_layers=pc.model_layers, num_heads=pc.model_heads)
    size = dataclasses.replace(size, **size_changes)
    (directory / "sft_config.json").write_text(json.dumps(
        {"sft": dataclasses.asdict(cfg), "model_size": dataclasses.asdict(size)}))
    return task, cfg


def test_pipeline_refuses_a_warm_up_made_with_other_settings(tmp_path, capsys):
    """Before: `llm pipeline --out X` after `llm pipeline --out X --quick` reused the quick warm-up
    (3x3 paths, 60 steps, width 32) and published results.json claiming the default one (4x4
    paths, 300 steps, width 64)."""
    out = tmp_path / "pipe"
    _fake_warm_up(out / "paths" / "base", PipelineConfig.quick(), hidden_size=16)
    assert main(["llm", "pipeline", "--out", str(out), "--quick", "--no-progress"]) == 2
    _one_line(capsys, "holds a warm-up with other settings", "model_size.hidden_size 16 there, 32 here",
              "--base-model paths=")
    assert not (out / "results.json").exists()


def test_pipeline_warm_up_check_in_the_library(tmp_path):
    pc = PipelineConfig.quick()
    from catsim.llm.sft import ModelSize

    task, cfg = _fake_warm_up(tmp_path / "same", pc)
    size = ModelSize(hidden_size=pc.model_hidden, num_layers=pc.model_layers, num_heads=pc.model_heads)
    llm_pipeline.check_warm_up(tmp_path / "same", task, cfg, size)  # the same settings: reused
    (tmp_path / "same" / "sft_config.json").unlink()  # a model placed by hand: its task is checked
    llm_pipeline.check_warm_up(tmp_path / "same", task, cfg, size)
    other = PipelineConfig().tasks[0]
    from catsim.llm.tasks import make_task

    with pytest.raises(CatsimError, match="task.config.height 3 there, 4 here"):
        llm_pipeline.check_warm_up(tmp_path / "same", make_task(other.name, **other.options), cfg, size)


# ------------------------------------------------------------------ llm sft: a finished run rerun
def _strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_sft_rerun_of_a_finished_run_reports_its_loss_not_nan(tmp_path, capsys):
    """Before: the rerun ran no step and printed "final loss nan"; --format json printed a bare
    NaN (not JSON)."""
    args = ["llm", "sft", "--task", "maze", "--size", "5", "--n-heldout", "8", "--steps", "2",
            "--batch-size", "4", "--hidden", "16", "--layers", "1", "--heads", "2",
            "--out", str(tmp_path / "sft"), "--eval-prompts", "0", "--no-progress"]
    assert main([*args, "--format", "json"]) == 0
    first = _strict_json(capsys.readouterr().out)
    assert main([*args, "--format", "json"]) == 0
    again = _strict_json(capsys.readouterr().out)
    assert again["final_loss"] == first["final_loss"] and again["steps_done"] == 2
    assert main(args) == 0
    assert f"final loss {first['final_loss']:.4f}" in capsys.readouterr().out


# ------------------------------------------------------------------ mass-step: a step that overflows
def test_mass_step_large_eta_gives_the_exact_change_not_nan(capsys):
    """Before: --eta 1e308 printed the exact changes as nan (exp overflowed), rc 0, with a
    RuntimeWarning. A step that large sends all the mass to the correct action: Qpos 0.5 -> 1."""
    group = ["mass-step", "--probs", "0.5,0.5", "--correct", "0", "--draws", "0,1"]
    assert main([*group, "--lr", "1e308", "--format", "json"]) == 0
    captured = capsys.readouterr()
    out = _strict_json(captured.out)
    assert out["dqpos_exact"] == pytest.approx(0.5) and out["dqupos_exact"] == 0.0
    assert not captured.err
    # a step whose logits overflow to inf has no exact change: one line, exit 2
    assert main([*group, "--lr", "1e308", "--rule", "linear", "--advantage", "raw", "--reward-correct", "100"]) == 2
    _one_line(capsys, "overflows the logit step")


def test_exact_change_is_the_shifted_softmax_where_exp_overflows():
    import numpy as np

    from catsim.theory.mass import exact_change

    p, mask = np.array([0.2, 0.3, 0.5]), np.array([True, False, False])
    small = np.array([0.3, -0.1, 0.05])
    q = p * np.exp(small)
    assert exact_change(p, small, mask) == pytest.approx(q[0] / q.sum() - 0.2, rel=1e-12)
    assert exact_change(p, np.array([1000.0, 0.0, 0.0]), mask) == pytest.approx(0.8)


# ------------------------------------------------------------------ lemma --peaks: ignored options
@pytest.mark.parametrize("flags, needle", [
    (["--group-size", "5"], "--group-size does not apply"),
    (["--tau", "0.1", "--rho", "0.5"], "give --tau or --rho, not both"),
])
def test_lemma_peaks_refuses_options_it_would_ignore(flags, needle, capsys):
    """Before: `lemma --peaks --n 5` and `--peaks --tau 0.1 --rho 0.5` printed the table as if the
    ignored option had not been given (without --peaks, --tau with --rho is refused)."""
    assert main(["lemma", "--peaks", "--mu-pos", "0.5", *flags]) == 2
    _one_line(capsys, needle)
    assert main(["lemma", "--peaks", "--mu-pos", "0.5", "--tau", "0.1", "--format", "json"]) == 0
    assert [row["tau"] for row in json.loads(capsys.readouterr().out)] == [0.1]


def test_advise_study_refuses_a_quick_warm_up_for_the_full_study(tmp_path, capsys):
    """Before: `llm advise-study --out X` after `--quick` in X reused the 20-step, 3x3 warm-up as
    the full study's (300 steps, 4x4 paths) and reported it under the full config."""
    from catsim.experiments.advise_study import StudyConfig
    from catsim.llm.rundir import task_spec
    from catsim.llm.sft import ModelSize, SFTConfig
    from catsim.llm.tasks import make_task

    quick, base = StudyConfig.quick(), tmp_path / "study" / "base"
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    task = make_task("paths", **quick.task_options)
    (base / "catsim_task.json").write_text(json.dumps(task_spec(task, quick.data_seed)))
    cfg = SFTConfig(steps=quick.sft_steps, batch_size=quick.sft_batch, learning_rate=quick.sft_lr,
                    warmup_steps=min(20, quick.sft_steps // 10), data_seed=quick.data_seed)
    size = ModelSize(hidden_size=quick.model_hidden, num_layers=quick.model_layers, num_heads=quick.model_heads)
    (base / "sft_config.json").write_text(json.dumps(
        {"sft": dataclasses.asdict(cfg), "model_size": dataclasses.asdict(size)}))
    assert main(["llm", "advise-study", "--out", str(tmp_path / "study"), "--no-progress"]) == 2
    _one_line(capsys, "holds a warm-up with other settings", "model_size.hidden_size 32 there, 64 here")
