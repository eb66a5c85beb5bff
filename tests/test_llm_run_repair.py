"""`catsim llm rl` rerun into a damaged run directory, as a user types it: a damaged checkpoint gives
way to the previous one (one warning line) or is refused in one line naming it; a log line cut by a
kill is dropped with one line, a damaged one before the last refused naming the file and the line;
a rerun with other settings is told which differ."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from catsim.cli.main import main

RUN = ["--group-size", "4", "--prompts-per-step", "1", "--max-new-tokens", "4", "--save-every", "1", "--no-progress"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from llm_rl_helpers import make_paths_base

    return make_paths_base(tmp_path_factory.mktemp("repair") / "base")


def _rl(base, out, steps, *extra):
    return main(["llm", "rl", "--base", str(base), "--out", str(out), "--steps", str(steps), *RUN, *extra])


@pytest.fixture(scope="module")
def two_steps(base, tmp_path_factory):
    """A run of 2 steps with a checkpoint after each (rl_state/1 and rl_state/2)."""
    out = tmp_path_factory.mktemp("two") / "run"
    assert _rl(base, out, 2) == 0
    return out


@pytest.fixture(scope="module")
def three_steps(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("three") / "run"
    assert _rl(base, out, 3) == 0
    return out


@pytest.fixture
def run(two_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(two_steps, out)
    return out


def _catsim_lines(capsys):
    """stderr's lines from catsim (orbax's absl logging may add its own), checked for tracebacks."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.startswith("catsim")]


def _steps(run):
    return [json.loads(line)["step"] for line in (run / "rl_log.jsonl").read_text().splitlines()]


def _weights(run):
    from safetensors.numpy import load_file

    return load_file(str(run / "model" / "model.safetensors"))


def _truncate_data(run):
    files = [p for p in (run / "rl_state" / "2" / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    assert files
    for path in files:
        path.write_bytes(path.read_bytes()[:10])


def _garbage_meta(run, step=2):
    (run / "rl_state" / str(step) / "meta" / "metadata").write_text("garbage{")


@pytest.mark.parametrize("damage", [_truncate_data, _garbage_meta])
def test_a_damaged_checkpoint_gives_way_to_the_previous_one(damage, run, base, three_steps, capsys):
    damage(run)
    capsys.readouterr()
    assert _rl(base, run, 3) == 0
    lines = _catsim_lines(capsys)
    assert len(lines) == 1 and "warning" in lines[0], lines
    assert str(run / "rl_state" / "2") in lines[0] and "step 1" in lines[0]
    assert _steps(run) == [1, 2, 3]
    assert (run / "rl_state.damaged" / "2").is_dir()  # kept for inspection, out of the run's way
    want = _weights(three_steps)  # steps 2 and 3 recomputed: the same run as one never damaged
    got = _weights(run)
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)


def test_no_readable_checkpoint_is_refused_in_one_line(run, base, capsys):
    _garbage_meta(run, 1)
    _garbage_meta(run, 2)
    log = (run / "rl_log.jsonl").read_bytes()
    capsys.readouterr()
    assert _rl(base, run, 3) == 2
    lines = _catsim_lines(capsys)
    assert len(lines) == 1 and str(run / "rl_state" / "2" / "meta" / "metadata") in lines[0], lines
    assert "--overwrite" in lines[0]
    assert (run / "rl_log.jsonl").read_bytes() == log
    assert _rl(base, run, 3, "--overwrite") == 0
    assert _steps(run) == [1, 2, 3] and not (run / "rl_state.damaged").exists()


def test_a_log_line_cut_by_a_kill_is_dropped_and_said(run, base, capsys):
    before = (run / "rl_log.jsonl").read_text()
    with (run / "rl_log.jsonl").open("a") as fh:
        fh.write('{"step": 3, "rew')
    capsys.readouterr()
    assert _rl(base, run, 3) == 0
    lines = _catsim_lines(capsys)
    assert len(lines) == 1 and "rl_log.jsonl" in lines[0] and "line 3" in lines[0], lines
    after = (run / "rl_log.jsonl").read_text()
    assert after.startswith(before) and _steps(run) == [1, 2, 3]  # every complete record kept


def test_a_damaged_log_line_before_the_last_is_refused_naming_it(run, base, capsys):
    path = run / "rl_log.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(["garbage", *lines[1:]]) + "\n")
    damaged = path.read_bytes()
    capsys.readouterr()
    assert _rl(base, run, 3) == 2
    err = _catsim_lines(capsys)
    assert len(err) == 1 and f"{path}, line 1" in err[0], err
    assert path.read_bytes() == damaged and sorted(p.name for p in (run / "rl_state").iterdir()) == ["1", "2"]


def test_a_rerun_with_other_settings_is_told_which_differ(run, base, capsys):
    capsys.readouterr()
    assert _rl(base, run, 3, "--lr", "0.5") == 2
    lines = _catsim_lines(capsys)
    assert len(lines) == 1 and "different settings" in lines[0] and "learning_rate" in lines[0], lines
    assert "0.5" in lines[0]
