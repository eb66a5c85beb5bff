"""Progress bars by default on a terminal; when stderr is not a terminal, plain lines for a long
command (llm eval, sft, rl) and nothing for one whose output is read from a pipe (simulate, llm
sample); nothing with --no-progress; the results never depend on whether a bar was drawn."""

from __future__ import annotations

import sys

import pytest
from llm_rl_helpers import make_base_model

from catsim.cli.args import show_progress
from catsim.cli.main import main

MAZE = {"task": "maze", "config": {"size": 5, "n_train": 8, "n_heldout": 4}, "data_seed": 0}
SIMULATE = ["simulate", "--group-size", "2,4,8", "--gamma", "0,1", "--steps", "200", "--num-actions", "300",
            "--num-correct", "40", "--format", "json"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_base_model(tmp_path_factory.mktemp("progress") / "model", task_spec=MAZE)


def _terminal(monkeypatch, on: bool) -> None:
    """Make the (captured) stderr claim to be a terminal, or not."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: on)


def _run(capsys, argv):
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr()


def test_show_progress_follows_the_terminal_unless_told(monkeypatch):
    _terminal(monkeypatch, True)
    assert show_progress() is True and show_progress(False) is False
    _terminal(monkeypatch, False)
    assert show_progress() is False and show_progress(True) is True


def test_simulate(capsys, monkeypatch):
    _terminal(monkeypatch, False)
    piped = _run(capsys, SIMULATE)
    assert piped.err == ""
    _terminal(monkeypatch, True)
    shown = _run(capsys, SIMULATE)
    assert "run-step" in shown.err and "100%" in shown.err
    assert shown.out == piped.out  # same numbers with and without the bar's finer records
    assert _run(capsys, [*SIMULATE, "--no-progress"]).err == ""
    _terminal(monkeypatch, False)
    assert "run-step" in _run(capsys, [*SIMULATE, "--progress"]).err


def test_llm_sample(model, capsys, monkeypatch):
    argv = ["llm", "sample", "--model", str(model), "--prompt", "UD>", "--prompt", "DU>", "--samples", "3",
            "--max-new-tokens", "4", "--format", "json"]
    _terminal(monkeypatch, False)
    piped = _run(capsys, argv)
    assert piped.err == ""
    _terminal(monkeypatch, True)
    shown = _run(capsys, argv)
    assert "sample:" in shown.err and "/6 [" in shown.err  # a bar over 2 prompts x 3 samples
    assert shown.out == piped.out
    assert _run(capsys, [*argv, "--no-progress"]).err == ""
    _terminal(monkeypatch, False)
    asked = _run(capsys, [*argv, "--progress"]).err  # asked for when piped: plain lines, no redraws
    assert asked.startswith("sample: 6/6 rollouts (100%), ") and "\r" not in asked


def test_llm_sample_task_prompts(model, capsys, monkeypatch):
    argv = ["llm", "sample", "--model", str(model), "--task", "maze", "--task-prompts", "2", "--samples", "2",
            "--max-new-tokens", "4"]
    _terminal(monkeypatch, False)
    piped = _run(capsys, argv)
    assert piped.err.startswith("mean reward") and piped.err.count("\n") == 1
    _terminal(monkeypatch, True)
    assert "/4 [" in _run(capsys, argv).err


def test_llm_eval(model, capsys, monkeypatch):
    argv = ["llm", "eval", str(model), "--samples", "2", "--prompts", "3", "--max-new-tokens", "4",
            "--base", str(model), "--rare-prompts", "2", "--rare-samples", "2"]
    _terminal(monkeypatch, False)
    piped = _run(capsys, argv)  # a long command: plain lines when stderr is a file, no bar redraws
    lines = piped.err.splitlines()
    assert any(line.startswith("rare set: 4/4 rollouts (100%)") for line in lines), piped.err
    assert any(line.startswith(f"{model.name}: 6/6 rollouts (100%)") for line in lines), piped.err
    assert "\r" not in piped.err and "[" not in piped.err
    _terminal(monkeypatch, True)
    shown = _run(capsys, argv)
    assert f"{model.name}:" in shown.err and "/6 [" in shown.err  # 3 prompts x 2 samples
    assert "rare set:" in shown.err and "/4 [" in shown.err  # 2 train prompts x 2 base samples
    assert shown.out == piped.out
    assert "rollout" not in _run(capsys, [*argv, "--no-progress"]).err


def test_plain_lines_every_five_percent_at_most_every_five_seconds_and_at_the_end(capsys):
    from catsim.progress import PlainProgress

    now = [0.0]
    bar = PlainProgress(100, "rl", unit="step", initial=20, clock=lambda: now[0])
    for _ in range(80):  # a step a second from a resumed step 20
        now[0] += 1.0
        bar.set_postfix(reward="0.500", active="0.25")
        bar.update(1)
    bar.close()
    lines = capsys.readouterr().err.splitlines()
    # a line each 5 steps (5% of 100), those being 5 s apart; the last at 100%, none repeated at close
    assert [line.split()[1] for line in lines] == [f"{n}/100" for n in range(25, 101, 5)]
    assert lines[0] == "rl: 25/100 steps (25%), 00:05 elapsed, 01:15 left, reward=0.500 active=0.25"
    assert lines[-1] == "rl: 100/100 steps (100%), 01:20 elapsed, reward=0.500 active=0.25"

    slow = PlainProgress(1000, "sft", unit="step", clock=lambda: now[0])
    for _ in range(3):  # 0.3% done, but 30 s apart: still a line each time
        now[0] += 31.0
        slow.update(1)
    fast = PlainProgress(10, "eval", unit="rollout", clock=lambda: now[0])
    for _ in range(7):  # 10% a step, all within the same second: no line until the end
        fast.update(1)
    fast.close()  # stopped early: the last line says where
    assert capsys.readouterr().err.splitlines() == [
        "sft: 1/1,000 steps (0%), 00:31 elapsed, 8:36:09 left",
        "sft: 2/1,000 steps (0%), 01:02 elapsed, 8:35:38 left",
        "sft: 3/1,000 steps (0%), 01:33 elapsed, 8:35:07 left",
        "eval: 7/10 rollouts (70%), 00:00 elapsed"]


def test_progress_modes(capsys, monkeypatch):
    from catsim.progress import PlainProgress, progress_bar

    _terminal(monkeypatch, False)
    assert isinstance(progress_bar(4, "x", None), PlainProgress)  # a long command, stderr a file
    assert isinstance(progress_bar(4, "x", True, long=False), PlainProgress)  # asked for
    for quiet in (progress_bar(4, "x", False), progress_bar(4, "x", None, long=False)):
        with quiet as bar:
            bar.update(4)
    assert capsys.readouterr().err == ""
    _terminal(monkeypatch, True)
    with progress_bar(4, "x", None) as bar:
        bar.update(4)
    assert "\r" in capsys.readouterr().err  # a tqdm bar, redrawn in place


def test_llm_rl_shows_progress_lines_in_a_file_and_names_their_fields(model, tmp_path, capsys, monkeypatch):
    from catsim.progress import RL_FIELDS

    argv = ["llm", "rl", "--base", str(model), "--out", str(tmp_path / "rl"), "--steps", "2", "--group-size", "2",
            "--prompts-per-step", "2", "--max-new-tokens", "4"]
    _terminal(monkeypatch, False)
    err = _run(capsys, argv).err
    lines = [line for line in err.splitlines() if "steps (" in line]  # the last one at the end
    assert lines and lines[-1].startswith("GRPO N=2: 2/2 steps (100%), "), err
    assert all(f" {name}=" in lines[-1] or f", {name}=" in lines[-1] for name in RL_FIELDS), lines[-1]
    assert "\r" not in err
    assert _run(capsys, [*argv, "--out", str(tmp_path / "quiet"), "--no-progress"]).err == ""
    with pytest.raises(SystemExit):
        main(["llm", "rl", "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # the help, its line breaks undone
    for name, text in RL_FIELDS.items():
        assert f"{name} {' '.join(text.split())}" in shown


def test_the_mass_step_sampler_shows_plain_lines_in_a_file(capsys, monkeypatch):
    from catsim.experiments.theory import sample_joint_changes

    _terminal(monkeypatch, False)
    sample_joint_changes(ns=(2, 4), groups=3, num_actions=50, num_correct=5, progress=None)
    assert capsys.readouterr().err.startswith("one-step updates: 6/6 groups (100%), ")
    sample_joint_changes(ns=(2,), groups=3, num_actions=50, num_correct=5, progress=False)
    assert capsys.readouterr().err == ""


def test_llm_pipeline_says_how_far_it_is_when_its_output_goes_to_a_file(tmp_path, capsys, monkeypatch):
    """It printed nothing on stderr while its output went to a file (progress only as a bar on a terminal)."""
    from llm_rl_helpers import make_paths_base

    base = make_paths_base(tmp_path / "base")
    _terminal(monkeypatch, False)
    err = _run(capsys, ["llm", "pipeline", "--out", str(tmp_path / "pipe"), "--quick", "--rl-steps", "1",
                        "--rollouts-per-step", "4", "--eval-samples", "2", "--eval-prompts", "2",
                        "--base-model", f"paths={base}", "--runs", "grpo:2"]).err
    lines = err.splitlines()
    assert any(" 1/1 steps (100%), " in line and " reward=" in line for line in lines), err  # the RL run
    assert any(" rollouts (100%), " in line for line in lines), err  # its evaluations
    assert "\r" not in err


def test_an_imported_ipykernel_is_not_a_notebook(monkeypatch):
    """A process that merely imports ipykernel (a test runner after a notebook test, a library) still
    writes plain lines to a file; before, any import of ipykernel switched every run to redrawn bars."""
    import ipykernel  # noqa: F401

    from catsim.progress import PlainProgress, progress_bar

    _terminal(monkeypatch, False)
    assert isinstance(progress_bar(4, "x", None), PlainProgress)
