"""Damaged input files and impossible sizes are one-line errors: exit code 2, the message names the
file (or the option), no traceback, nothing written. Each case writes the file a crash, a bad
download or a typo would leave."""

from __future__ import annotations

import json
import shutil

import pytest
from llm_rl_helpers import make_base_model

from catsim.cli.main import main

MAZE = {"task": "maze", "config": {"size": 5, "n_train": 8, "n_heldout": 4}, "data_seed": 0}
EVAL = ["--samples", "2", "--prompts", "2", "--max-new-tokens", "4"]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return make_base_model(tmp_path_factory.mktemp("base") / "model", task_spec=MAZE)


@pytest.fixture
def model(base_model, tmp_path):
    """A fresh copy of the tiny model directory, to damage."""
    return shutil.copytree(base_model, tmp_path / "model")


def _edit_config(model, **values):
    path = model / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **values}))


def _math_file(tmp_path, name, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _one_line_error(capsys, argv, *names):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for name in names:
        assert name in err, err
    return err


def test_a_string_where_the_config_needs_a_number(model, capsys):
    _edit_config(model, hidden_size="64")  # int("64") reads, but the weights are 32 wide
    _one_line_error(capsys, ["llm", "eval", str(model), *EVAL], "config.json")


def test_a_list_where_the_config_needs_a_number(model, capsys):
    _edit_config(model, hidden_size=[64])
    _one_line_error(capsys, ["llm", "eval", str(model), *EVAL], "config.json", "hidden_size")


@pytest.mark.parametrize("damage", [b"", b"\x00" * 7, b"garbage that is not safetensors"])
def test_damaged_weights(model, capsys, damage):
    (model / "model.safetensors").write_bytes(damage)
    _one_line_error(capsys, ["llm", "eval", str(model), *EVAL], "model.safetensors")


def test_truncated_weights(model, capsys):
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    _one_line_error(capsys, ["llm", "eval", str(model), *EVAL], "model.safetensors")


def test_truncated_task_file(model, capsys):
    (model / "catsim_task.json").write_text(json.dumps(MAZE)[:20])
    _one_line_error(capsys, ["llm", "eval", str(model), *EVAL], "catsim_task.json")


@pytest.mark.parametrize("name, content, says", [
    ("latin1.jsonl", b'{"question": "caf\xe9?", "answer": "1"}\n', "not UTF-8"),
    ("binary.jsonl", b"\xff\xfe\x00\x01" * 10, "not UTF-8"),
    ("cut.jsonl", b'{"question": "1+1", "answer": "2"}\n{"question": "2+', "not valid JSON"),
    ("bad.parquet", b"PAR1 this is not a parquet body PAR1", "not a readable Parquet file"),
    ("empty.parquet", b"", "not a readable Parquet file"),
    ("one.jsonl", b'{"question": "1+1", "answer": "2"}\n', "too few to split"),
    ("same.jsonl", b'{"question": "1+1", "answer": "2"}\n{"question": "1+1", "answer": "2"}\n',
     "too few to split"),
])
def test_damaged_math_files(model, tmp_path, capsys, name, content, says):
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    data = _math_file(tmp_path, name, content)
    _one_line_error(capsys, ["llm", "eval", str(model), "--task", "math", "--data", str(data),
                             "--checker", "exact", *EVAL], name, says)


def test_a_one_record_math_file_is_fine_without_a_held_out_split(tmp_path):
    from catsim.llm.tasks import make_task

    data = _math_file(tmp_path, "one.jsonl", b'{"question": "1+1", "answer": "2"}\n')
    task = make_task("math", path=str(data), checker="exact", heldout_fraction=0.0)
    assert task.num_prompts("train") == 1 and task.num_prompts("heldout") == 0


@pytest.mark.parametrize("flag, value", [("--heads", "0"), ("--layers", "0"), ("--hidden", "-8"),
                                         ("--intermediate", "-1")])
def test_impossible_model_sizes(tmp_path, capsys, monkeypatch, flag, value):
    monkeypatch.chdir(tmp_path)
    _one_line_error(capsys, ["llm", "sft", "--task", "maze", "--size", "5", "--steps", "1",
                             "--out", "run", flag, value], flag)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("value", ["-5", "0"])
def test_eval_batch_size_must_be_positive(model, capsys, value):
    _one_line_error(capsys, ["llm", "eval", str(model), *EVAL, "--batch-size", value], "--batch-size")


def _truncate_weights(model):
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return "model.safetensors"


def _garbage_config(model):
    (model / "config.json").write_text("garbage{")
    return "config.json"


@pytest.mark.parametrize("damage", [_truncate_weights, _garbage_config])
@pytest.mark.parametrize("command", ["eval", "sample", "rl"])
def test_every_command_that_loads_a_model_names_its_damaged_file(model, tmp_path, capsys, damage, command):
    name = damage(model)
    out = tmp_path / "rl"
    argv = {"eval": ["llm", "eval", str(model), *EVAL],
            "sample": ["llm", "sample", "--model", str(model), "--prompt", "UD", "--samples", "1"],
            "rl": ["llm", "rl", "--base", str(model), "--out", str(out), "--steps", "1", "--no-progress"]}[command]
    _one_line_error(capsys, argv, str(model / name))
    assert not out.exists()
