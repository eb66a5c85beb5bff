"""`catsim llm sample` on a tiny model directory (saved by catsim itself: no PyTorch needed)."""

import json

import jax
import pytest
from llm_helpers import save_tokenizer

from catsim.cli.main import main
from catsim.llm.model.checkpoint import save_model
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.tokenizer import Tokenizer
from catsim.llm.model.transformer import init_params


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny")
    cfg = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, eos_token_ids=(3,), pad_token_id=0)
    save_model(directory, cfg, init_params(cfg, jax.random.key(0), init_std=0.5))
    save_tokenizer(directory)
    return directory


def _json_lines(text):
    return [json.loads(line) for line in text.strip().splitlines()]


def test_sample_prints_n_completions_per_prompt(model_dir, capsys):
    args = ["llm", "sample", "--model", str(model_dir), "--prompt", "w5 w6", "--prompt", "w9",
            "--samples", "4", "--max-new-tokens", "6", "--seed", "3", "--format", "json"]
    assert main(args) == 0
    rows = _json_lines(capsys.readouterr().out)
    assert [(r["prompt_id"], r["sample_id"]) for r in rows] == [(p, s) for p in range(2) for s in range(4)]
    for r in rows:
        assert 1 <= len(r["tokens"]) <= 6 and r["logprob"] <= 0
        assert r["finished"] == (r["tokens"][-1] == 3)  # </s> from tokenizer_config.json stops
        assert 3 not in r["tokens"][:-1]
    assert len({tuple(r["tokens"]) for r in rows}) > 1
    # The same seed reproduces; a prompt's samples do not change when it is requested alone.
    assert main(args[:6] + args[8:]) == 0
    alone = _json_lines(capsys.readouterr().out)
    assert [r["tokens"] for r in alone] == [r["tokens"] for r in rows[:4]]


def test_stop_token_is_not_part_of_the_text(model_dir, capsys):
    args = ["llm", "sample", "--model", str(model_dir), "--prompt", "w5", "--samples", "8",
            "--max-new-tokens", "48", "--seed", "1", "--format", "json"]
    assert main(args) == 0
    rows = _json_lines(capsys.readouterr().out)
    finished = [r for r in rows if r["finished"]]
    assert finished  # this seed gives stopped samples; the test is void otherwise
    for r in finished:
        assert r["tokens"][-1] == 3 and "</s>" not in r["text"]
        assert r["text"] == Tokenizer.from_dir(model_dir).decode(r["tokens"][:-1])


def test_sample_text_output(model_dir, capsys):
    """Plain-text output; same seed and (prompt id, sample index) give the same completion."""
    args = ["llm", "sample", "--model", str(model_dir), "--prompt", "w5 w6", "--samples", "2",
            "--max-new-tokens", "6", "--seed", "3"]
    assert main(args) == 0
    blocks = capsys.readouterr().out.split("--- prompt ")[1:]
    assert len(blocks) == 2 and blocks[0].startswith("0 sample 0 (") and blocks[1].startswith("0 sample 1 (")
    assert main(args + ["--format", "json"]) == 0
    rows = _json_lines(capsys.readouterr().out)
    assert [b.split("\n", 1)[1].rstrip("\n") for b in blocks] == [r["text"] for r in rows]


def test_sample_errors_are_one_line(model_dir, capsys):
    assert main(["llm", "sample", "--model", str(model_dir)]) == 2
    assert "give at least one --prompt" in capsys.readouterr().err
    assert main(["llm", "sample", "--model", str(model_dir), "--prompt", "w1", "--top-p", "2"]) == 2
    assert "top_p must be in (0, 1]" in capsys.readouterr().err
    assert main(["llm", "sample", "--model", str(model_dir / "nope"), "--prompt", "w1"]) == 2
    assert "model directory not found" in capsys.readouterr().err
