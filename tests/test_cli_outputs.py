"""What a command prints and where its files go: a one-seed row shows no spread, `llm sample`'s
header, a reader that closes the pipe early, `llm rl`'s closing summary."""

from __future__ import annotations

import subprocess
import sys

import pytest

from catsim.cli.main import main
from catsim.experiments import published as src
from catsim.experiments.maze import arms_report as maze_arms_report
from catsim.experiments.maze import report as maze_report

SIM = ["--group-size", "2,8", "--gamma", "0,1", "--steps", "100", "--num-actions", "300", "--num-correct", "40",
       "--no-progress"]


@pytest.fixture(scope="module")
def maze_model(tmp_path_factory):
    from llm_rl_helpers import make_base_model

    spec = {"task": "maze", "config": {"size": 5, "n_train": 8, "n_heldout": 4}, "data_seed": 0}
    return make_base_model(tmp_path_factory.mktemp("outputs") / "model", task_spec=spec)


# ---- one seed: no "± 0.0" ----------------------------------------------------------------------


def test_a_one_seed_sweep_table_shows_each_value_alone(tmp_path, capsys):
    assert main(["sweep", *SIM, "--seeds", "1", "--out", str(tmp_path / "one")]) == 0
    table = (tmp_path / "one" / "table.txt").read_text()
    assert "±" not in table and "over 1 seed (no spread)" in table
    assert "±" not in capsys.readouterr().out
    parsed = src.parse_fig2_table(table)  # `catsim reproduce` still reads it
    assert len(parsed) == 2 * 4 and {(sd, n) for _, sd, n in parsed.values()} == {(0.0, 1)}
    assert main(["sweep", *SIM, "--seeds", "2", "--out", str(tmp_path / "two")]) == 0
    two = (tmp_path / "two" / "table.txt").read_text()
    assert two.count("±") == 1 + 2 * 4 and "mean ± std over 2 seed(s)" in two


@pytest.mark.parametrize("spread", [maze_report._spread, maze_arms_report._spread])
def test_a_one_seed_maze_row_shows_its_value_alone(spread):
    one = {"seeds": [0], "pass_at_k": {"1": 0.25}, "pass_at_k_std": {"1": 0.0}}
    assert spread(one, "1") == "25.0"
    two = {"seeds": [0, 1], "pass_at_k": {"1": 0.25}, "pass_at_k_std": {"1": 0.0}}
    assert spread(two, "1") == "25.0 ± 0.0"  # two seeds that agree: a spread of 0, shown


# ---- a reader that stops early: the command ends quietly ---------------------------------------


def _head_1(argv: list[str]) -> tuple[bytes, str, int]:
    """`catsim ARGV | head -1` in a real pipe: (the line read, stderr, exit code)."""
    proc = subprocess.Popen([sys.executable, "-m", "catsim", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    line = proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    return line, stderr, proc.wait(timeout=300)


def test_simulate_json_into_a_closed_pipe_ends_quietly():
    # 1,200 JSON lines (about 300 kB): more than the pipe holds, so the writer meets the closed pipe
    line, stderr, code = _head_1(["simulate", "--group-size", "2,4", "--gamma", "0,1", "--steps", "10",
                                  "--seeds", "300", "--num-actions", "50", "--num-correct", "5", "--format", "json"])
    assert line.startswith(b'{"method": ') and (code, stderr) == (141, ""), stderr


def test_llm_sample_into_a_closed_pipe_ends_quietly(maze_model):
    line, stderr, code = _head_1(["llm", "sample", "--model", str(maze_model), "--prompt", "UD>", "--samples", "1500",
                                  "--max-new-tokens", "8", "--format", "json"])
    assert line.startswith(b'{"prompt_id": 0') and (code, stderr) == (141, ""), stderr


# ---- llm sample's header; llm rl's closing summary --------------------------------------------


def test_llm_sample_task_header_is_a_line_then_the_prompt(maze_model, capsys):
    from catsim.llm.tasks import make_task

    assert main(["llm", "sample", "--model", str(maze_model), "--task", "maze", "--task-prompts", "1",
                 "--samples", "1", "--max-new-tokens", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    prompt = make_task("maze", size=5, n_train=8, n_heldout=4).prompt("heldout", 0, 0)
    assert "\\n" not in out  # was "=== maze heldout prompt 0\n..S" with a backslash and an n
    assert out.startswith(f"=== maze heldout prompt 0\n{prompt.text}\n  sample 0: ")


def test_llm_rl_ends_with_its_final_metrics_and_its_files(maze_model, tmp_path, capsys):
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(maze_model), "--out", str(out), "--steps", "2", "--group-size", "2",
                 "--prompts-per-step", "2", "--max-new-tokens", "4", "--heldout-every", "2", "--no-progress"]) == 0
    from catsim.llm.rl import read_log

    last = read_log(out)[-1]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("GRPO N=2: finished after 2 steps in ")
    assert lines[1] == (f"step 2: reward {last['reward']:.3f}, success rate {last['success_rate']:.3f}, active groups "
                        f"{last['active_fraction']:.2f} (Lemma 3.1 at every group's own success rate: "
                        f"{last['active_pred_groups']:.2f}; at the batch's mean: {last['active_pred_pooled']:.2f}), entropy "
                        f"{last['entropy']:.3f}, response length {last['response_length']:.1f} tokens")
    assert lines[2].startswith("last 2 steps: mean reward ")
    assert lines[3] == f"held-out accuracy {last['heldout_accuracy']:.3f} (step 2, one sample per prompt)"
    assert lines[4:] == ["saved:", f"  {out / 'model'}  the final policy (a model directory: catsim llm eval / "
                         "sample read it)", f"  {out / 'rl_log.jsonl'}  every step's metrics, one JSON line each"]


# ---- files go under --out, never into the current folder ---------------------------------------


@pytest.mark.parametrize("study,module,full", [("fig2", "catsim.experiments.fig2", "is_full_sweep"),
                                               ("horizons", "catsim.experiments.horizons", "is_full_horizons")])
def test_a_published_grid_given_out_writes_its_figures_under_it(study, module, full, tmp_path, monkeypatch,
                                                                 capsys):
    """The paper's full grid writes the published figures into figures/ when run without --out; given
    --out, everything goes under it (before, figures/ appeared in the current folder)."""
    import importlib

    monkeypatch.setattr(importlib.import_module(module), full, lambda *a, **k: True)  # a tiny grid read as the paper's
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["sweep", "--study", study, *SIM, "--seeds", "1", "--log-every", "10", "--out", str(out)]) == 0
    assert list(cwd.iterdir()) == []
    assert any(p.suffix == ".png" for p in out.iterdir())
