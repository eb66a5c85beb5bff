"""Progress bars by default on a terminal, none when stderr is piped, none with --quiet /
--no-progress; the results never depend on whether a bar was drawn."""

from __future__ import annotations

import sys

import pytest
from llm_rl_helpers import make_base_model

from catsim.cli.args import show_progress
from catsim.cli.main import main

MAZE = {"task": "maze", "config": {"size": 5, "n_train": 8, "n_heldout": 4}, "data_seed": 0}
SIMULATE = ["simulate", "--n", "2,4,8", "--gamma", "0,1", "--steps", "200", "--num-actions", "300",
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
    argv = ["llm", "sample", "--model", str(model), "--prompt", "UD>", "--prompt", "DU>", "--n", "3",
            "--max-new-tokens", "4", "--json"]
    _terminal(monkeypatch, False)
    piped = _run(capsys, argv)
    assert piped.err == ""
    _terminal(monkeypatch, True)
    shown = _run(capsys, argv)
    assert "sample:" in shown.err and "/6 [" in shown.err  # a bar over 2 prompts x 3 samples
    assert shown.out == piped.out
    assert _run(capsys, [*argv, "--quiet"]).err == ""


def test_llm_sample_task_prompts(model, capsys, monkeypatch):
    argv = ["llm", "sample", "--model", str(model), "--task", "maze", "--task-prompts", "2", "--n", "2",
            "--max-new-tokens", "4"]
    _terminal(monkeypatch, False)
    piped = _run(capsys, argv)
    assert piped.err.startswith("mean reward") and piped.err.count("\n") == 1
    _terminal(monkeypatch, True)
    assert "/4 [" in _run(capsys, argv).err


def test_llm_eval(model, capsys, monkeypatch):
    argv = ["llm", "eval", str(model), "--n", "2", "--prompts", "3", "--max-new-tokens", "4",
            "--base", str(model), "--rare-prompts", "2", "--rare-n", "2"]
    _terminal(monkeypatch, False)
    piped = _run(capsys, argv)
    assert "rollout" not in piped.err
    _terminal(monkeypatch, True)
    shown = _run(capsys, argv)
    assert f"{model.name}:" in shown.err and "/6 [" in shown.err  # 3 prompts x 2 samples
    assert "rare set:" in shown.err and "/4 [" in shown.err  # 2 train prompts x 2 base samples
    assert shown.out == piped.out
    assert "rollout" not in _run(capsys, [*argv, "--quiet"]).err
