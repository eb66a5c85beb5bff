"""Supervised warm-up: masking, determinism, resume after a stop, HF output dir, CLI, sampling."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.cli.main import main
from catsim.errors import CatsimError
from catsim.llm.model.checkpoint import load_model
from catsim.llm.model.tokenizer import Tokenizer
from catsim.llm.scoring import answer_logprob_fn as model_logprob_fn
from catsim.llm.sft import (
    STATE_FILE,
    ModelSize,
    SFTConfig,
    init_state,
    make_batch,
    run_sft,
    step_fn,
    task_tokenizer,
)
from catsim.llm.tasks import make_task
from catsim.llm.tasks.answer_mass import answer_probabilities
from catsim.llm.tasks.char_tokenizer import BOS_ID, EOS_ID, PAD_ID

TINY = ModelSize(hidden_size=16, num_layers=1, num_heads=2)
TASK = make_task("maze", size=5, n_heldout=8)
CFG = SFTConfig(steps=6, batch_size=4, save_every=2, warmup_steps=2)  # one compiled step for all tests


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished tiny run (with evaluation) shared by the tests that only read its output."""
    out = tmp_path_factory.mktemp("sft") / "full"
    result = run_sft(TASK, CFG, TINY, out, eval_prompts=4, eval_samples=0, progress=False)
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
    """The step's loss equals the token-mean NLL of the answer+<eos> tokens computed by teacher
    forcing through an independent code path (`model_logprob_fn`, prompt as pure context)."""
    tok = task_tokenizer(TASK)
    model_cfg = TINY.model_config(tok.vocab_size)
    state = init_state(model_cfg, CFG)
    params = jax.tree.map(jnp.copy, state.params)  # train_step donates its input state
    batch = make_batch(TASK, tok, CFG, 0)
    _, metrics = step_fn(model_cfg, CFG)(state, batch)
    fn = model_logprob_fn(params, model_cfg)
    tokens, real, target = (np.asarray(x) for x in batch)
    total, count = 0.0, 0
    for row in range(tokens.shape[0]):
        first = int(np.argmax(target[row]))
        assert not target[row, :first].any()  # prompt tokens carry no loss
        completion = tokens[row][target[row]]
        total -= fn(list(tokens[row, :first]), [list(completion)])[0]
        count += len(completion)
    assert float(metrics["loss"]) == pytest.approx(total / count, rel=1e-5)


def test_stop_then_resume_equals_uninterrupted(trained, tmp_path):
    cfg = CFG
    full_dir, full = trained
    assert full.finished and full.steps_done == 6
    part = run_sft(TASK, cfg, TINY, tmp_path / "split", stop_after=3, eval_prompts=0, progress=False)
    assert not part.finished and part.steps_done == 3
    assert not (tmp_path / "split" / "model.safetensors").exists()
    # what a kill during step 4's save leaves behind: an unfinished checkpoint and a cut log line
    unfinished = tmp_path / "split" / STATE_FILE / "4.orbax-checkpoint-tmp-1"
    unfinished.mkdir()
    (unfinished / "state").write_bytes(b"\x00" * 100)
    with (tmp_path / "split" / "train_log.jsonl").open("a") as log:
        log.write('{"step": 4, "loss": 0.1}\n{"step": 5, "lo')
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
    for name in ("config.json", "model.safetensors", "tokenizer.json", "catsim_task.json", "eval.json"):
        assert (out / name).is_file(), name
    assert not (out / "loss.png").exists()  # the runner draws nothing; its callers do (catsim.experiments.warm_up)
    assert (out / STATE_FILE / "6").is_dir()
    cfg, params = load_model(out)
    tok = Tokenizer.from_dir(out)
    assert cfg.vocab_size == tok.vocab_size and cfg.eos_token_ids == (EOS_ID,)
    assert tok.eos_token_id == EOS_ID
    assert result.eval["heldout_prompts"] == 4
    assert 0.0 <= result.eval["greedy_pass_rate"] <= 1.0


def test_teacher_forced_log_probs_normalise_and_chain(trained):
    cfg, params = load_model(trained[0])
    tok = Tokenizer.from_dir(trained[0])
    fn = model_logprob_fn(params, cfg)
    prompt_ids = tok.backend.encode(TASK.prompt("heldout", 0, 0).text).ids
    vocab = range(cfg.vocab_size)
    one = np.exp(fn(prompt_ids, [[v] for v in vocab]))
    assert one.sum() == pytest.approx(1.0, abs=1e-5)  # a distribution over the next token
    a = int(np.argmax(one))
    two = np.exp(fn(prompt_ids, [[a, w] for w in vocab]))
    assert two.sum() == pytest.approx(one[a], rel=1e-4)  # chain rule: sum_w p(a, w) = p(a)


def test_answer_mass_of_the_many_solution_task(trained):
    # the maze model shares the grid alphabet, so it scores shortest-path answers too
    task = make_task("paths", n_heldout=3)
    cfg, params = load_model(trained[0])
    tok = Tokenizer.from_dir(trained[0])
    fn = model_logprob_fn(params, cfg)
    for prompt in task.prompts("heldout", 0):
        probs = answer_probabilities(fn, tok.backend, task, prompt, EOS_ID)
        assert list(probs) == list(prompt.answers)
        assert 0.0 < sum(probs.values()) < 1.0
        answer = prompt.answers[-1]
        ids = tok.backend.encode(answer, add_special_tokens=False).ids + [EOS_ID]
        assert probs[answer] == pytest.approx(np.exp(fn(tok.backend.encode(prompt.text).ids, [ids])[0]),
                                              rel=1e-5)


def test_cli_sft_and_errors(tmp_path, capsys):
    out = tmp_path / "cli"
    rc = main(["llm", "sft", "--task", "maze", "--size", "5", "--n-heldout", "8", "--steps", "6",
               "--batch-size", "4", "--save-every", "2", "--warmup-steps", "2", "--hidden", "16",
               "--layers", "1", "--heads", "2", "--out", str(out), "--stop-after", "2",
               "--eval-prompts", "0", "--no-progress", "--format", "json"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert not summary["finished"] and summary["steps_done"] == 2
    assert (out / "loss.png").stat().st_size > 0  # the CLI draws the loss curve of a stopped run too
    # a rerun into it with another learning rate is refused naming that setting with both values
    rc = main(["llm", "sft", "--task", "maze", "--size", "5", "--n-heldout", "8", "--steps", "6",
               "--batch-size", "4", "--save-every", "2", "--warmup-steps", "2", "--hidden", "16",
               "--layers", "1", "--heads", "2", "--out", str(out), "--lr", "0.02", "--eval-prompts", "0",
               "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "different settings (sft.learning_rate" in err and "0.02 here" in err, err
    assert len(err.strip().splitlines()) == 1
    # bfloat16 compute over float32 master weights: the model is written from the float32 masters
    rc = main(["llm", "sft", "--task", "maze", "--size", "5", "--n-heldout", "8", "--steps", "2",
               "--batch-size", "4", "--hidden", "16", "--layers", "1", "--heads", "2", "--dtype",
               "bfloat16", "--out", str(tmp_path / "bf16"), "--eval-prompts", "0", "--no-progress",
               "--format", "json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["finished"]
    _, params = load_model(tmp_path / "bf16")
    assert all(x.dtype == np.float32 for x in jax.tree.leaves(params))
    assert main(["llm", "sft", "--task", "maze", "--size", "6", "--out", str(tmp_path / "x")]) == 2
    assert "odd" in capsys.readouterr().err
    assert main(["llm", "sft", "--task", "maze", "--out", str(tmp_path / "y"), "--steps", "0"]) == 2
    with pytest.raises(CatsimError, match="alphabet"):
        task_tokenizer(make_task("math", path=str(tmp_path / "nothing.jsonl"), checker="exact"))


def test_cli_sample_task_prints_rewards(trained, capsys):
    out, result = trained
    rc = main(["llm", "sample", "--model", str(out), "--task", "maze", "--samples", "2", "--task-prompts", "2",
               "--temperature", "0", "--format", "json"])
    assert rc == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [(r["prompt_index"], r["sample_index"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in rows:  # the task (5x5, from catsim_task.json) re-scores every printed completion
        prompt = TASK.prompt("heldout", 0, r["prompt_index"])
        assert r["reference"] == prompt.answers[0]
        assert r["reward"] == (TASK.reward(prompt, r["completion"]) if r["finished"] else 0.0)
    assert "mean reward" in captured.err
    assert main(["llm", "sample", "--model", str(out), "--task", "maze", "--prompt", "x"]) == 2


def test_optimizer_is_optax_adamw_with_a_traced_learning_rate():
    import optax

    from catsim.llm.sft import _decay_mask, make_optimizer

    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32), "b": jnp.asarray(rng.normal(size=2), jnp.float32)}
    ours, ref = make_optimizer(1e9, 0.01, 0.0), optax.adamw(3e-3, weight_decay=0.01, mask=_decay_mask)
    s_ours, s_ref = ours.init(params), ref.init(params)
    p_ours = p_ref = params
    for _ in range(3):
        g = jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
        u_ours, s_ours = make_optimizer(1e9, 0.01, jnp.float32(3e-3)).update(g, s_ours, p_ours)
        u_ref, s_ref = ref.update(g, s_ref, p_ref)
        p_ours, p_ref = optax.apply_updates(p_ours, u_ours), optax.apply_updates(p_ref, u_ref)
    for a, b in zip(jax.tree.leaves(p_ours), jax.tree.leaves(p_ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
