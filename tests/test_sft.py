"""Supervised warm-up: masking, determinism, resume after a stop, HF output dir, CLI, sampling."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.llm.checkpoint import load_model
from catsim.llm.sft import (
    STATE_FILE,
    Batch,
    ModelSize,
    SFTConfig,
    make_batch,
    run_sft,
    sft_loss,
    task_tokenizer,
)
from catsim.llm.tasks import make_task
from catsim.llm.tasks.answer_mass import answer_probabilities
from catsim.llm.tasks.char_tokenizer import BOS_ID, EOS_ID, PAD_ID
from catsim.llm.tasks.sampling import model_logprob_fn
from catsim.llm.tokenizer import Tokenizer

TINY = ModelSize(hidden_size=16, num_layers=1, num_heads=2)
TASK = make_task("maze", size=5, n_heldout=8)
CFG = SFTConfig(steps=6, batch_size=4, save_every=2, warmup_steps=2)  # one compiled step for all tests


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished tiny run (with evaluation) shared by the tests that only read its output."""
    out = tmp_path_factory.mktemp("sft") / "full"
    result = run_sft(TASK, CFG, TINY, out, eval_prompts=4, eval_samples=2, progress=False)
    return out, result


def test_batches_are_deterministic_and_masked():
    tok = task_tokenizer(TASK)
    cfg = SFTConfig(batch_size=4, seed=3)
    a, b = make_batch(TASK, tok, cfg, 7), make_batch(TASK, tok, cfg, 7)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a.tokens_BxT, make_batch(TASK, tok, cfg, 8).tokens_BxT)
    tokens, real, target = (np.asarray(x) for x in a)
    assert tokens.shape[1] % 32 == 0
    for row in range(4):
        ids = tokens[row][real[row]]
        text = tok.decode(ids, skip_special_tokens=True)
        prompt_text, answer = text.split(">")
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert np.all(tokens[row][~real[row]] == PAD_ID)
        # the target is exactly the answer and <eos>: the prompt carries no loss
        assert tok.decode(tokens[row][target[row]], skip_special_tokens=True) == answer
        assert target[row].sum() == len(answer) + 1
        assert TASK.reward(TASK.prompt("train", 0, 0), answer) in (0.0, 1.0)


def test_loss_is_the_mean_nll_of_target_tokens_only():
    from catsim.llm.model import forward, init_params

    tok = task_tokenizer(TASK)
    batch = make_batch(TASK, tok, SFTConfig(batch_size=3), 0)
    cfg = TINY.model_config(tok.vocab_size)
    params = init_params(cfg, jax.random.key(0), init_std=0.5)
    loss, _ = jax.jit(sft_loss, static_argnums=1)(params, cfg, batch)
    logits = np.asarray(jax.jit(forward, static_argnums=1)(params, cfg, batch.tokens_BxT), np.float64)
    tokens, target = np.asarray(batch.tokens_BxT), np.asarray(batch.target_BxT)
    nll = []  # by hand: -log softmax(logits at t-1)[token t] for every target token t
    for r in range(tokens.shape[0]):
        for t in range(1, tokens.shape[1]):
            if target[r, t]:
                z = logits[r, t - 1]
                nll.append(np.log(np.sum(np.exp(z - z.max()))) + z.max() - z[tokens[r, t]])
    assert len(nll) == target.sum()
    assert float(loss) == pytest.approx(np.mean(nll), rel=1e-5)
    no_target = Batch(batch.tokens_BxT, batch.real_BxT, jnp.zeros_like(batch.target_BxT))
    assert float(jax.jit(sft_loss, static_argnums=1)(params, cfg, no_target)[0]) == 0.0


def test_stop_then_resume_equals_uninterrupted(trained, tmp_path):
    cfg = CFG
    full_dir, full = trained
    assert full.finished and full.steps_done == 6
    part = run_sft(TASK, cfg, TINY, tmp_path / "split", stop_after=3, eval_prompts=0, progress=False)
    assert not part.finished and part.steps_done == 3
    assert not (tmp_path / "split" / "model.safetensors").exists()
    rest = run_sft(TASK, cfg, TINY, tmp_path / "split", eval_prompts=0, progress=False)
    assert rest.finished and rest.steps_done == 6
    _, p_full = load_model(full_dir)
    _, p_split = load_model(tmp_path / "split")
    for a, b in zip(jax.tree.leaves(p_full), jax.tree.leaves(p_split)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    log = [json.loads(x) for x in (tmp_path / "split" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]
    log_full = [json.loads(x) for x in (full_dir / "train_log.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in log] == [r["loss"] for r in log_full]
    # a different configuration in the same directory is refused, not silently mixed
    with pytest.raises(CatsimError, match="different settings"):
        run_sft(TASK, SFTConfig(steps=6, batch_size=4, learning_rate=1e-2), TINY, tmp_path / "split",
                eval_prompts=0, progress=False)


def test_output_is_a_loadable_hf_model_dir(trained):
    out, result = trained
    for name in ("config.json", "model.safetensors", "tokenizer.json", "catsim_task.json", "loss.png",
                 "eval.json", STATE_FILE):
        assert (out / name).is_file(), name
    cfg, params = load_model(out)
    tok = Tokenizer.from_dir(out)
    assert cfg.vocab_size == tok.vocab_size and cfg.eos_token_ids == (EOS_ID,)
    assert tok.eos_token_id == EOS_ID
    assert set(result.eval) >= {"greedy_pass_rate", "sampled_pass_at_1"}
    assert 0.0 <= result.eval["greedy_pass_rate"] <= 1.0


def test_teacher_forced_answer_mass_is_a_probability(trained):
    # the maze model shares the grid alphabet, so it scores shortest-path answers too
    task = make_task("paths", height=3, width=3, obstacle_density=0.0, n_heldout=2, max_answers=6)
    cfg, params = load_model(trained[0])
    tok = Tokenizer.from_dir(trained[0])
    fn = model_logprob_fn(params, cfg)
    prompt = task.prompt("heldout", 0, 0)
    probs = answer_probabilities(fn, tok.backend, task, prompt, EOS_ID)
    assert set(probs) == set(prompt.answers)
    assert 0.0 < sum(probs.values()) < 1.0
    # compare one answer against a direct chain-rule product from the full-sequence logits
    from catsim.llm.model import forward

    answer = prompt.answers[0]
    ids = tok.backend.encode(prompt.text).ids + tok.backend.encode(answer, add_special_tokens=False).ids + [EOS_ID]
    logp = jax.nn.log_softmax(forward(params, cfg, jnp.asarray([ids]))[0])
    start = len(tok.backend.encode(prompt.text).ids)
    direct = sum(float(logp[t - 1, ids[t]]) for t in range(start, len(ids)))
    assert probs[answer] == pytest.approx(np.exp(direct), rel=1e-4)


def test_cli_sft_and_errors(tmp_path, capsys):
    out = tmp_path / "cli"
    rc = main(["llm", "sft", "--task", "maze", "--size", "5", "--n-heldout", "8", "--steps", "6",
               "--batch-size", "4", "--save-every", "2", "--warmup-steps", "2", "--hidden", "16",
               "--layers", "1", "--heads", "2", "--out", str(out), "--stop-after", "2",
               "--eval-prompts", "0", "--no-progress", "--format", "json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert not summary["finished"] and summary["steps_done"] == 2
    assert main(["llm", "sft", "--task", "maze", "--size", "6", "--out", str(tmp_path / "x")]) == 2
    assert "odd" in capsys.readouterr().err
    assert main(["llm", "sft", "--task", "maze", "--out", str(tmp_path / "y"), "--steps", "0"]) == 2
    with pytest.raises(CatsimError, match="alphabet"):
        task_tokenizer(make_task("math", path=str(tmp_path / "nothing.jsonl"), checker="exact"))
