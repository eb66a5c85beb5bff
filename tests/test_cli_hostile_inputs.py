"""Inputs an outside check found mishandled, each through the command a user types: one line
naming the option and exit code 2, nothing written before a refusal, and no false refusal or
warning where the input is fine."""

from __future__ import annotations

import json

import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError

SIM = ["--num-actions", "64", "--num-correct", "8", "--steps", "2"]


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture(scope="module")
def paths_base(tmp_path_factory):
    from llm_rl_helpers import make_paths_base

    return make_paths_base(tmp_path_factory.mktemp("hostile") / "base")


# ------------------------------------------------------------------------ k of the pass@k rules
@pytest.mark.parametrize("rule", ["pkpo", "pkpo_mean", "passk_training", "passk_best"])
def test_llm_rl_runs_the_pass_at_k_rules_at_the_default_k(rule, paths_base, tmp_path, capsys):
    """The trainer's step functions are compiled for rows, not groups: their config copy (N = 1)
    must not re-check the run's k against N."""
    assert main(["llm", "rl", "--base", str(paths_base), "--out", str(tmp_path / "rl"), "--group-size", "8",
                 "--prompts-per-step", "1", "--max-new-tokens", "4", "--advantage", rule, "--steps", "1",
                 "--no-progress"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_simulate_checks_k_against_the_given_group_sizes(capsys):
    assert main(["simulate", *SIM, "--group-size", "512", "--advantage", "pkpo", "--passk-k", "300", "--format", "json"]) == 0
    assert main(["simulate", *SIM, "--group-size", "512", "--advantage", "passk_training", "--passk-k", "256",
                 "--format", "json"]) == 0
    assert "warning" not in capsys.readouterr().err  # k < N: no "trains nothing"
    assert main(["simulate", *SIM, "--group-size", "128,512", "--advantage", "passk_training", "--passk-k", "256"]) == 2
    _one_line_error(capsys, "passk_k = 256 exceeds the group size N = 128")
    assert main(["simulate", *SIM, "--group-size", "256,512", "--advantage", "passk_training", "--passk-k", "256",
                 "--format", "json"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "passk_k = N = 256" in err[0] and "warning" in err[0]  # said once, for N = 256


def test_sweep_checks_k_against_its_group_sizes(tmp_path, capsys):
    out = tmp_path / "s"
    assert main(["sweep", *SIM, "--group-size", "8", "--gamma", "0", "--seeds", "1", "--advantage", "pkpo",
                 "--passk-k", "300", "--out", str(out), "--no-progress"]) == 2
    _one_line_error(capsys, "passk_k = 300 exceeds the group size N = 8")
    assert not out.exists()
    assert main(["sweep", *SIM, "--group-size", "512", "--gamma", "0", "--seeds", "1", "--log-every", "1",
                 "--advantage", "pkpo", "--passk-k", "300", "--out", str(out), "--figures", str(out),
                 "--no-progress"]) == 0


# ------------------------------------------------------------------------ the methods study's rows
@pytest.mark.parametrize("flags, named", [
    (["--advantage", "nsr"], "--advantage"),
    (["--advantage", "pkpo", "--passk-k", "9"], "--passk-k"),
    (["--entropy-coef", "0.01"], "--entropy-coef"),
    (["--gamma-schedule", "switch", "--gamma-switch-step", "1"], "--gamma-schedule"),
    (["--update", "asym-grpo"], "--update"),
])
def test_methods_study_refuses_options_that_relabel_its_rows(flags, named, tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["sweep", "--study", "methods", *SIM, "--group-size", "2,8", "--seeds", "1", *flags,
                 "--out", str(out)]) == 2
    _one_line_error(capsys, named, "--study methods")
    assert not out.exists()


def test_methods_study_library_refuses_a_base_that_sets_a_row_field(tmp_path):
    import dataclasses

    from catsim.experiments.methods import run_methods_study
    from catsim.sim import config as C

    base = C.scenario("paper")
    base = dataclasses.replace(base, update=dataclasses.replace(base.update, advantage="nsr"))
    with pytest.raises(CatsimError, match="advantage"):
        run_methods_study(base, tmp_path / "m", group_sizes=[8], seeds=1)
    assert not (tmp_path / "m").exists()


# ------------------------------------------------------------------------ γ beyond float32
def test_gamma_beyond_float32_is_refused_before_any_work(paths_base, tmp_path, capsys):
    assert main(["simulate", *SIM, "--gamma", "1e39"]) == 2
    _one_line_error(capsys, "--gamma")
    assert main(["simulate", *SIM, "--gamma-schedule", "step_ramp", "--gamma-start", "1e39"]) == 2
    _one_line_error(capsys, "gamma_start")
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(paths_base), "--out", str(out), "--gamma", "1e39", "--steps", "1",
                 "--no-progress"]) == 2
    _one_line_error(capsys, "gamma")
    assert not out.exists()
    from catsim.sim import config as C
    from catsim.sim.sweep import simulate

    with pytest.raises(CatsimError, match="gamma"):
        simulate(C.SimConfig(steps=1), gammas=[1e39])


# ------------------------------------------------------------------------ the base model and --out
def test_llm_rl_refuses_a_base_inside_its_output(paths_base, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(paths_base, run / "model")
    before = (run / "model" / "model.safetensors").read_bytes()
    for extra in ([], ["--overwrite"]):
        assert main(["llm", "rl", "--base", str(run / "model"), "--out", str(run), "--steps", "1", "--no-progress",
                     *extra]) == 2
        _one_line_error(capsys, "lies inside the output directory")
    assert (run / "model" / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in run.iterdir()) == ["model"]


def test_missing_base_is_named_as_missing(tmp_path, capsys):
    assert main(["llm", "rl", "--base", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"), "--steps", "1"]) == 2
    _one_line_error(capsys, "nowhere: no such model directory")
    assert not (tmp_path / "o").exists()


def test_sft_refuses_a_task_that_cannot_make_prompts_before_writing(tmp_path, capsys):
    out = tmp_path / "sft"
    assert main(["llm", "sft", "--task", "paths", "--obstacle-density", "0.99", "--out", str(out), "--steps", "2",
                 "--batch-size", "2", "--eval-prompts", "0", "--no-progress"]) == 2
    _one_line_error(capsys, "paths")
    assert not out.exists()


# ------------------------------------------------------------------------ advise
def test_advise_without_rare_prompts_prints_no_numpy_warning(paths_base, tmp_path, capsys):
    assert main(["llm", "advise", "--model", str(paths_base), "--samples", "2", "--prompts", "2", "--bootstrap", "2",
                 "--group-size", "2,4", "--figure", "none", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "RuntimeWarning" not in captured.err and "Mean of empty slice" not in captured.err
    assert json.loads(captured.out)["group_sizes"] == [2, 4]
    assert main(["llm", "advise", "--model", str(paths_base), "--samples", "2", "--prompts", "2", "--bootstrap", "2",
                 "--group-size", "2,4", "--figure", "none"]) == 0
    captured = capsys.readouterr()
    assert "RuntimeWarning" not in captured.err and "Mean of empty slice" not in captured.err


def test_advise_refuses_a_zero_completion_cap(paths_base, capsys):
    assert main(["llm", "advise", "--model", str(paths_base), "--max-new-tokens", "0", "--figure", "none"]) == 2
    _one_line_error(capsys, "--max-new-tokens must be >= 1")
