"""`catsim llm sft`, `eval` and `sample` under `jax.distributed` with 2 processes × 2 host CPU
devices (a 2 × 2 data × FSDP mesh) = the same commands in this single process on one device.

One job (two workers, `multiprocess_harness`) runs, in order: `llm sft` stopped after 2 of 4 steps
and rerun to finish (a resume from the orbax shards both processes wrote; then its greedy held-out
evaluation), `llm sample --json` and `llm eval --json` through the CLI with the multi-process
options, `llm sample --task` on the sft model's held-out prompts, then the evaluation library
(pass@k, the rare set, ΔNLL_rare, retained answer mass) on a toy task whose random base model
solves ~10% of its samples. The references run here: sft
uninterrupted and sample while the workers run, then eval on the workers' sft model, and the
library on the same models. About 2 min on the shared 2-core machine (the sft, sample, eval and
library checks share the job's start-up and compilations: ~30 s each).

Required: sampled tokens, rewards and pass@k counts identical (the sampler's randomness is keyed by
prompt and sample, not by layout); teacher-forced NLLs (~1–3 nats) and answer probabilities within
rtol 1e-5 (float32 sums in another order); sft step-1 loss within rtol 1e-5 and later steps within
1e-3 (Adam turns rounding of near-zero gradients into steps of up to lr), final parameters as in
test_llm_rl_multiprocess.py; and every file and every line of output written once, by process 0.
The last tests check the multi-process options of every command (one-line errors before any
work) and the writer-only guards of the pipeline's results and the CLI's output, in one process.
"""

from __future__ import annotations

import contextlib
import io
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
from multiprocess_harness import launch_pair, wait_all

SFT = ["llm", "sft", "--task", "maze", "--size", "5", "--n-heldout", "8", "--steps", "4", "--batch-size", "8",
       "--hidden", "32", "--layers", "2", "--heads", "2", "--warmup-steps", "0", "--save-every", "2",
       "--eval-prompts", "4", "--eval-samples", "0", "--no-progress", "--format", "json"]  # greedy eval only
# the sampler shapes of library_eval's pass@k (8 rows, 6 new tokens): one compiled program for both
SAMPLE = ["llm", "sample", "--prompt", "UDU>", "--prompt", "DDU>", "--samples", "4", "--max-new-tokens", "6", "--format", "json"]
EVAL = ["llm", "eval", "--samples", "2", "--prompts", "4", "--batch-size", "8"]
# the task's held-out prompts through `llm sample --task` (the model's own task file)
SAMPLE_TASK = ["llm", "sample", "--task", "maze", "--task-prompts", "2", "--samples", "2", "--max-new-tokens", "6",
               "--format", "json", "--no-progress"]

WORKER = textwrap.dedent("""
    import contextlib, io, json, sys
    from pathlib import Path
    pid, port, root = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    import jax
    # joined here with a long timeout; each command's --distributed then finds the job running
    jax.distributed.initialize(coordinator_address=f"localhost:{{port}}", num_processes=2, process_id=pid,
                               initialization_timeout=120)
    assert jax.device_count() == 4 and jax.process_count() == 2, (jax.devices(), jax.process_count())
    from catsim.cli.main import main
    from catsim.llm.model.sharding import make_mesh
    from test_llm_multiprocess import library_eval

    layout = ["--distributed", "--coordinator", f"localhost:{{port}}", "--num-processes", "2",
              "--process-id", str(pid), "--mesh", "2x2"]

    def cli(name, argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(argv + layout)
        assert code == 0, (name, code)
        (root / f"{{name}}-{{pid}}.out").write_text(out.getvalue())

    cli("sft-stop", {sft!r} + ["--out", str(root / "multi-sft"), "--stop-after", "2"])
    cli("sft", {sft!r} + ["--out", str(root / "multi-sft")])
    cli("sample", {sample!r} + ["--model", str(root / "base")])
    cli("eval", {eval!r} + [str(root / "multi-sft"), "--save", str(root / f"eval-{{pid}}.json")])
    cli("sample-task", {sample_task!r} + ["--model", str(root / "multi-sft")])
    (root / f"library-{{pid}}.json").write_text(json.dumps(library_eval(root, make_mesh(data=2, fsdp=2))))
    print("WORKER-OK", pid, flush=True)
""").format(sft=SFT, sample=SAMPLE, eval=EVAL, sample_task=SAMPLE_TASK)


def library_eval(root: Path, mesh) -> dict:
    """The evaluation library on the toy task: pass@k and the rare set of `base`, ΔNLL_rare and
    retained answer mass of `other` against it (random models; `base` solves ~10% of its samples)."""
    from llm_rl_helpers import ToyTask

    from catsim.llm import evaluate as ev

    task = ToyTask()
    base, other = ev.load_policy(root / "base", mesh=mesh), ev.load_policy(root / "other", mesh=mesh)
    passk = ev.evaluate_passk(base, task, n=4, ks=[1, 4], n_prompts=8, max_new_tokens=6, batch_size=8)
    rare = ev.rare_correct_set(base, task, n_prompts=8, n=4, rare_quantile=0.25, max_new_tokens=6, batch_size=8)
    prompts = ev.eval_prompts(task, "heldout", 0, 4)
    base_mass, other_mass = ev.answer_mass_table(base, task, prompts), ev.answer_mass_table(other, task, prompts)
    return {"num_correct": passk["num_correct"], "pass_at_k": passk["pass_at_k"],
            "rare_tokens": rare.tokens.tolist(), "rare_base_nll": rare.base_nll.tolist(),
            "delta_nll_rare": ev.delta_nll_rare(other, rare, batch_size=8),
            "answer_mass": [m.tolist() for m in base_mass + other_mass],
            "mret": ev.retained_mass(base_mass, other_mass)["mret"]}


def _cli(argv: list[str]) -> str:
    from catsim.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0, argv
    return out.getvalue()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(directory, reference outputs) after the 2-process job and the single-process references."""
    from llm_rl_helpers import make_base_model

    root = tmp_path_factory.mktemp("multiprocess")
    make_base_model(root / "base", init_std=0.3)
    make_base_model(root / "other", seed=1, init_std=0.3)
    procs = launch_pair(WORKER, root)
    try:  # the references that need nothing from the workers, here, while they run
        single = {"sft": _cli(SFT + ["--out", str(root / "single-sft")]),
                  "sample": _cli(SAMPLE + ["--model", str(root / "base")]),
                  "library": library_eval(root, None)}
    finally:
        wait_all(procs, root)
    single["eval"] = _cli(EVAL + [str(root / "multi-sft"), "--save", str(root / "eval-single.json")])
    single["sample-task"] = _cli(SAMPLE_TASK + ["--model", str(root / "multi-sft")])
    return root, single


@pytest.mark.slow
def test_sft_two_processes_with_resume_equal_one_process(job):
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.rundir import read_log
    from catsim.llm.sft import LOG_FILE, STATE_FILE

    root, single = job
    assert (root / "sft-stop-1.out").read_text() == (root / "sft-1.out").read_text() == ""
    assert json.loads((root / "sft-stop-0.out").read_text())["steps_done"] == 2
    multi, one = json.loads((root / "sft-0.out").read_text()), json.loads(single["sft"])
    assert multi["finished"] and multi["steps_done"] == 4
    assert multi["eval"] == one["eval"] == json.loads((root / "multi-sft" / "eval.json").read_text())
    state = root / "multi-sft" / STATE_FILE
    assert sorted(p.name for p in state.iterdir() if p.name.isdigit()) == ["2", "4"]
    for pid in (0, 1):  # each process wrote its own shards
        assert any((state / "4" / "state" / f"ocdbt.process_{pid}").rglob("*")), pid
    a, b = read_log(root / "single-sft" / LOG_FILE), read_log(root / "multi-sft" / LOG_FILE)
    assert [r["step"] for r in b] == [1, 2, 3, 4], "each step logged once, by process 0"
    for x, y in zip(a, b):
        assert x["lr"] == y["lr"]
        rtol = 1e-5 if x["step"] == 1 else 1e-3  # step 1 precedes every update
        for key in ("loss", "token_accuracy", "grad_norm"):
            np.testing.assert_allclose(x[key], y[key], rtol=rtol, err_msg=f"step {x['step']} {key}")
    import jax

    from catsim.llm.sft import SFTConfig, init_state

    cfg, pa = load_model(root / "single-sft")
    p0 = init_state(cfg, SFTConfig()).params  # seed 0, as both runs
    p0, pa, pb = (np.concatenate([np.ravel(x) for x in jax.tree.leaves(p)])
                  for p in (p0, pa, load_model(root / "multi-sft")[1]))
    moved = float(np.max(np.abs(pa - p0)))
    assert moved > 1e-3 and np.mean(np.abs(pa - pb) > 1e-3 * moved) < 0.02, moved


@pytest.mark.slow
def test_sample_two_processes_equal_one_process(job):
    root, single = job
    assert (root / "sample-1.out").read_text() == ""
    one = [json.loads(line) for line in single["sample"].splitlines()]
    two = [json.loads(line) for line in (root / "sample-0.out").read_text().splitlines()]
    assert len(one) == len(two) == 8
    for x, y in zip(one, two):
        assert (x["prompt_id"], x["sample_id"], x["tokens"], x["text"], x["finished"]) == \
               (y["prompt_id"], y["sample_id"], y["tokens"], y["text"], y["finished"])
        assert y["logprob"] == pytest.approx(x["logprob"], rel=1e-5)  # a few nats in float32


@pytest.mark.slow
def test_task_sampling_two_processes_equal_one_process(job):
    """`llm sample --task` on the 2 × 2 mesh prints what one process prints, from process 0 only."""
    root, single = job
    assert (root / "sample-task-1.out").read_text() == ""
    lines = single["sample-task"].splitlines()
    assert len([line for line in lines if line.startswith("{")]) == 4  # 2 prompts × 2 samples
    assert (root / "sample-task-0.out").read_text() == single["sample-task"]


@pytest.mark.slow
def test_eval_two_processes_equal_one_process(job):
    root, single = job
    assert (root / "eval-1.out").read_text() == "" and not (root / "eval-1.json").exists()
    assert (root / "eval-0.out").read_text() == single["eval"]
    one = json.loads((root / "eval-single.json").read_text())
    two = json.loads((root / "eval-0.json").read_text())
    assert two["models"][str(root / "multi-sft")] == one["models"][str(root / "multi-sft")]


@pytest.mark.slow
def test_evaluation_library_two_processes_equal_one_process(job):
    root, single = job
    one = single["library"]
    for pid in (0, 1):  # every process holds every number
        two = json.loads((root / f"library-{pid}.json").read_text())
        assert two["num_correct"] == one["num_correct"] and 0 < sum(one["num_correct"]) < 32
        assert two["pass_at_k"] == json.loads(json.dumps(one["pass_at_k"]))
        assert two["rare_tokens"] == one["rare_tokens"]
        np.testing.assert_allclose(two["rare_base_nll"], one["rare_base_nll"], rtol=1e-5)
        scale = max(np.abs(one["rare_base_nll"]))  # ΔNLL is a difference of NLLs of this size
        assert abs(two["delta_nll_rare"] - one["delta_nll_rare"]) < 2e-5 * scale
        for x, y in zip(one["answer_mass"], two["answer_mass"]):
            np.testing.assert_allclose(y, x, rtol=1e-5)
        assert two["mret"] == pytest.approx(one["mret"], rel=1e-5, abs=1e-6)


# ----------------------------------------------------------------------------- options and writer guards
COMMANDS = {  # each command's required arguments, with --out (where it has one) under {out}
    "rl": ["llm", "rl", "--base", "{out}/base", "--out", "{out}/o"],
    "sft": ["llm", "sft", "--task", "maze", "--out", "{out}/o"],
    "eval": ["llm", "eval", "{out}/model"],
    "sample": ["llm", "sample", "--model", "{out}/model", "--prompt", "hi"],
    "pipeline": ["llm", "pipeline", "--out", "{out}/o"],
}
BAD = [(["--coordinator", "localhost:1"], "need --distributed"),
       (["--process-id", "0"], "need --distributed"),
       (["--distributed", "--num-processes", "2", "--process-id", "2"], "below --num-processes = 2"),
       (["--distributed", "--num-processes", "0"], "--num-processes must be positive"),
       (["--distributed", "--process-id", "-1"], "--process-id must be >= 0"),
       (["--distributed", "--coordinator", "node0"], "--coordinator must be HOST:PORT"),
       (["--distributed", "--coordinator", "node0:99999"], "--coordinator must be HOST:PORT"),
       (["--mesh", "2by2"], "--mesh must be auto, none or DATAxFSDP"),
       (["--mesh", "0x4"], "--mesh must be auto, none or DATAxFSDP")]


CASES = ([("sft", extra, message) for extra, message in BAD]
         + [(command, extra, message) for command in sorted(COMMANDS) if command != "sft"
            for extra, message in (BAD[0], BAD[2], BAD[7])])


@pytest.mark.parametrize("command,extra,message", CASES)
def test_bad_process_layout_is_one_line_before_any_work(command, extra, message, tmp_path, capsys):
    from catsim.cli.main import main

    argv = [a.format(out=tmp_path) for a in COMMANDS[command]] + extra
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (tmp_path / "o").exists()  # checked before any file is written


def test_joining_a_running_job_again_is_a_no_op_or_a_clear_error(monkeypatch):
    import jax

    from catsim.errors import CatsimError
    from catsim.llm.model import sharding

    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: pytest.fail("initialized twice"))
    sharding.initialize_distributed(num_processes=1, process_id=0)  # this one-process session itself
    with pytest.raises(CatsimError, match="already runs as process 0 of 1"):
        sharding.initialize_distributed(num_processes=2, process_id=1)


@pytest.mark.parametrize("primary", [True, False])
def test_pipeline_results_are_written_by_process_zero_only(primary, tmp_path, monkeypatch):
    from catsim.experiments import llm_pipeline

    drawn = []
    monkeypatch.setattr(llm_pipeline, "is_primary", lambda: primary)
    monkeypatch.setattr(llm_pipeline, "write_report", lambda results, out: drawn.append(out))
    results = {"config": {}, "tasks": {}}
    path = llm_pipeline.write_results(results, tmp_path)
    assert path == tmp_path / "report.md"
    assert (tmp_path / "results.json").exists() == primary and drawn == ([tmp_path] if primary else [])
    if primary:
        assert json.loads((tmp_path / "results.json").read_text()) == results


@pytest.mark.parametrize("primary", [True, False])
def test_cli_prints_on_process_zero_only(primary, monkeypatch, capsys):
    from catsim.cli.llm import _distributed
    from catsim.llm.model import sharding

    monkeypatch.setattr(sharding, "is_primary", lambda: primary)
    _distributed.writer_print()("line")
    assert capsys.readouterr().out == ("line\n" if primary else "")
