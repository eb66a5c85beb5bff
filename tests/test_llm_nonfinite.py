"""Non-finite numbers are errors, never results: a training step whose loss, gradient norm or
parameters turn NaN stops the run (one line, exit code 2, naming the step and the quantity) with the
last good state kept, and a model with NaN weights is refused by rl, eval, sample and advise before
anything is printed or written."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from catsim.cli.main import main
from catsim.llm import safeguards
from catsim.llm.safeguards import NonFinite

TINY_RL = ["--group-size", "4", "--prompts-per-step", "1", "--max-new-tokens", "4", "--save-every", "1", "--no-progress"]
EVAL = ["--samples", "2", "--prompts", "2", "--max-new-tokens", "4", "--no-progress"]


def _one_line_error(capsys, *needles) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    assert captured.out == "", captured.out  # nothing printed before the refusal
    return err


@pytest.fixture(scope="module")
def paths_base(tmp_path_factory):
    from llm_rl_helpers import make_paths_base

    return make_paths_base(tmp_path_factory.mktemp("nonfinite") / "base")


@pytest.fixture(scope="module")
def nan_base(paths_base, tmp_path_factory):
    """The tiny base with one weight NaN and one infinite (the rest as they were)."""
    from safetensors.numpy import load_file, save_file

    out = shutil.copytree(paths_base, tmp_path_factory.mktemp("nonfinite") / "nan")
    weights = out / "model.safetensors"
    tensors = load_file(weights)
    name = next(k for k in tensors if k.endswith("norm.weight"))
    tensors[name] = np.full_like(tensors[name], np.nan)
    tensors["model.embed_tokens.weight"][0, 0] = np.inf
    save_file(tensors, weights, metadata={"format": "pt"})
    return out


# ----------------------------------------------------------------------------- the checks themselves
def test_check_step_names_the_step_the_quantity_and_the_kept_state():
    safeguards.check_step("RL", 3, {"loss": 0.5, "grad_norm": 2.0}, 2, "run/rl_state")  # finite: silent
    with pytest.raises(NonFinite, match=r"^RL step 3: the loss is not finite \(nan\); the last good state "
                                        r"\(step 2\) is kept in run/rl_state$"):
        safeguards.check_step("RL", 3, {"loss": float("nan"), "grad_norm": 2.0}, 2, "run/rl_state")
    with pytest.raises(NonFinite, match=r"^SFT step 1: the gradient norm is not finite \(inf\); no step was saved"):
        safeguards.check_step("SFT", 1, {"loss": 0.5, "grad_norm": float("inf")}, 0, "run/train_state")


def test_non_finite_leaves_names_each_bad_array():
    tree = {"embed": np.ones((2, 3), np.float32), "layers": {"wq": np.array([[1.0, np.inf]], np.float32),
                                                              "wk": np.array([np.nan], np.float32)}}
    assert safeguards.non_finite_leaves(tree) == ["layers/wk", "layers/wq"]
    with pytest.raises(NonFinite, match=r"^m: the model's weights are not finite \(NaN or infinity in layers/wk, "
                                        r"layers/wq\)$"):
        safeguards.check_model(tree, "m")
    with pytest.raises(NonFinite, match=r"^RL step 4: the parameters are not finite \(layers/wk, layers/wq\)"):
        safeguards.check_params("RL", 4, tree, 3, "r")
    safeguards.check_model({"embed": tree["embed"]}, "m")


# ----------------------------------------------------------------------------- training that diverges
def test_rl_that_diverges_stops_with_its_last_good_state_kept(paths_base, tmp_path, capsys):
    """lr 1e30: step 1 moves the weights to ~1e30 (finite), step 2's gradient is NaN. The run
    stops there: rc 2, one line naming the step and quantity; no final model, no state past the
    last good one, and that state resumes (to a finite model)."""
    out = tmp_path / "rl"
    argv = ["llm", "rl", "--base", str(paths_base), "--out", str(out), "--advantage", "nsr",
            "--lr", "1e30", *TINY_RL]
    assert main([*argv, "--steps", "3"]) == 2
    err = _one_line_error(capsys, "catsim llm rl: error: RL step ")
    found = re.fullmatch(r"catsim llm rl: error: RL step (\d+): the (loss|gradient norm) is not finite \(nan\); "
                         r"the last good state \(step (\d+)\) is kept in (.*)", err)
    assert found, err
    step, good = int(found[1]), int(found[3])
    assert good == step - 1 >= 1 and found[4] == str(out / "rl_state")
    assert not (out / "model").exists()  # the diverged policy is not saved as the result
    assert sorted(int(p.name) for p in (out / "rl_state").iterdir()) == list(range(max(1, good - 1), good + 1))
    assert [r["step"] for r in map(json.loads, (out / "rl_log.jsonl").read_text().splitlines())] == \
        list(range(1, good + 1))
    # the kept state resumes: asking for the steps it holds writes its (finite) model
    assert main([*argv, "--steps", str(good)]) == 0
    capsys.readouterr()
    assert main(["llm", "eval", str(out / "model"), *EVAL]) == 0


def test_rl_refuses_to_resume_a_saved_state_that_is_not_finite(paths_base, tmp_path, capsys, monkeypatch):
    """A run directory written before the checks existed can hold a NaN state at its last step: a
    rerun resumes there, runs no step and would save that state as the final model. It is refused."""
    out = tmp_path / "rl"
    argv = ["llm", "rl", "--base", str(paths_base), "--out", str(out), "--advantage", "nsr",
            "--lr", "1e30", "--steps", "3", *TINY_RL]
    with monkeypatch.context() as m:  # the code before the checks
        m.setattr(safeguards, "check_step", lambda *a, **k: None)
        m.setattr(safeguards, "check_params", lambda *a, **k: None)
        assert main(argv) == 0
    shutil.rmtree(out / "model")
    capsys.readouterr()
    assert main(argv) == 2
    _one_line_error(capsys, "catsim llm rl: error: RL run: the state saved at step 3 in ", "is not finite",
                    "--overwrite")
    assert not (out / "model").exists()


def test_rl_refuses_a_base_with_nan_weights(nan_base, tmp_path, capsys):
    out = tmp_path / "rl"
    assert main(["llm", "rl", "--base", str(nan_base), "--out", str(out), "--steps", "2", *TINY_RL]) == 2
    _one_line_error(capsys, f"{nan_base}: the model's weights are not finite", "embed")
    assert not out.exists()


def test_sft_that_diverges_stops_with_its_last_good_state_kept(tmp_path, capsys):
    from catsim.llm import rundir
    from catsim.llm.sft import (
        LOG_FILE,
        STATE_FILE,
        ModelSize,
        SFTConfig,
        fingerprint,
        init_state,
        task_tokenizer,
    )
    from catsim.llm.tasks import make_task

    out = tmp_path / "sft"
    assert main(["llm", "sft", "--task", "maze", "--size", "5", "--n-train", "8", "--n-heldout", "4",
                 "--steps", "4", "--batch-size", "4", "--lr", "1e30", "--warmup-steps", "0", "--schedule", "constant",
                 "--save-every", "1", "--hidden", "16", "--layers", "1", "--heads", "2", "--eval-prompts", "0",
                 "--no-progress", "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    found = re.fullmatch(r"catsim llm sft: error: SFT step (\d+): the (loss|gradient norm|parameters) is not "
                         r"finite \(.*\); the last good state \(step (\d+)\) is kept in .*train_state", err)
    assert found and int(found[3]) == int(found[1]) - 1 >= 1, err
    good = int(found[3])
    assert not (out / "config.json").exists()  # no model written from the diverged weights
    # the kept state is the step-`good` state, every parameter finite
    task = make_task("maze", size=5, n_train=8, n_heldout=4)
    cfg = SFTConfig(steps=4, batch_size=4, learning_rate=1e30, warmup_steps=0, lr_schedule="constant", save_every=1)
    model_cfg = ModelSize(16, 1, 2).model_config(task_tokenizer(task).vocab_size).replace(weight_dtype="float32")
    run = rundir.RunDir(out, state_dir=STATE_FILE, log_file=LOG_FILE, fingerprint=fingerprint(task, cfg, model_cfg),
                        what="run")
    with run.locked():
        state, step = run.resume(init_state(model_cfg, cfg))
    assert step == good and safeguards.non_finite_leaves(state.params) == []


# ----------------------------------------------------------------------------- a NaN model is refused
@pytest.mark.parametrize("argv", [
    ["llm", "eval", "{nan}", *EVAL],
    ["llm", "eval", "{good}", "{nan}", *EVAL],  # the good model's row is not printed before the refusal
    ["llm", "eval", "{good}", "--base", "{nan}", *EVAL],
    ["llm", "sample", "--model", "{nan}", "--prompt", "ab", "--format", "json", "--max-new-tokens", "2"],
    ["llm", "sample", "--model", "{nan}", "--task", "paths", "--task-prompts", "1", "--format", "json", "--max-new-tokens", "2"],
    ["llm", "advise", "--model", "{nan}", "--samples", "2", "--prompts", "2", "--figure", "none", "--format", "json"],
])
def test_a_model_with_nan_weights_is_refused(argv, paths_base, nan_base, capsys):
    argv = [a.format(nan=nan_base, good=paths_base) for a in argv]
    assert main(argv) == 2
    _one_line_error(capsys, f"{nan_base}: the model's weights are not finite (NaN or infinity in ", "embed")


# ----------------------------------------------------------------------------- llm eval's refusals
def test_eval_names_a_folder_that_is_not_a_model(paths_base, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["llm", "eval", str(tmp_path / "empty"), *EVAL]) == 2
    _one_line_error(capsys, "empty: not a model directory (no config.json)")
    assert main(["llm", "eval", str(paths_base), str(tmp_path / "nowhere"), *EVAL]) == 2
    _one_line_error(capsys, "nowhere: no such model directory")
    assert main(["llm", "eval", str(paths_base), "--base", str(tmp_path / "empty"), *EVAL]) == 2
    _one_line_error(capsys, "empty: not a model directory")


def test_eval_prints_no_table_when_a_later_model_is_refused(paths_base, tmp_path, capsys):
    """Every model is loaded and scored before the table's first line: a damaged second model
    leaves stdout empty (it used to get the header and the first model's row)."""
    broken = shutil.copytree(paths_base, tmp_path / "broken")
    (broken / "model.safetensors").write_bytes(b"garbage")
    assert main(["llm", "eval", str(paths_base), str(broken), *EVAL]) == 2
    _one_line_error(capsys, "model.safetensors")
