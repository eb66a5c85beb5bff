"""RL step speed: `catsim llm rl` against TRL's `GRPOTrainer` on the same model, prompts, verifier
and settings, back to back in one run, each in a fresh process as a user runs it.

    pip install -e ".[bench]"                                  # TRL (benchmark-only extra)
    python benchmarks/bench_rl_vs_trl.py                       # tiny maze warm-up model (made here)
    python benchmarks/bench_rl_vs_trl.py --model DIR           # any catsim model dir of the maze task
    python benchmarks/bench_rl_vs_trl.py --large               # + a 0.5B-width model (2 layers)
    python benchmarks/bench_rl_vs_trl.py --model figures/maze-study/cpu/s0/base --steps 160 \
        --prompts 32 --group 8 --max-new 25                    # the Maze study's workload

Work per step on both sides: 8 prompts x 8 rollouts, at most 32 new tokens, temperature 1, AdamW
(0.9, 0.999, weight decay 0.01) at a constant lr 1e-4, global-norm clip 1, ε = 0.2, no KL
(β = 0), token-mean loss (TRL `loss_type="dapo"`), one optimiser step per step, 40 steps; rewards
from catsim's own maze verifier (TRL receives it as its reward function). TRL 1.16, PyTorch CPU,
no vLLM, no gradient checkpointing (TRL's default recomputes the forward pass in the backward;
catsim's default does not). Reported: mean seconds per step over steps 2..S (the first includes
compilation / warm-up), the first step, and the whole process; ratios catsim ÷ TRL (below 1:
catsim faster). Each side runs `--repeats` times, alternating; the median is reported. The median
step (2..S) and the mean of steps 21..S show the steady state: catsim's mean over 2..S also carries
the first use of each completion width and decode grid (a trace, a lowering and a cache load, once
per shape and process, nearly all within the first 20 steps).

Compilation cache: catsim keeps compiled programs in a persistent cache (`catsim` CLI default).
The benchmark gives it a cache of its own under the working directory and fills it with one
untimed catsim run first, so the timed runs start from a warm cache; `--cold` turns the cache off
(CATSIM_NO_COMPILE_CACHE=1), so every run compiles from scratch.

Threads: `--threads N` gives both sides N intra-op threads (PyTorch `set_num_threads`, XLA's CPU
runtime `intra_op_parallelism_threads`); 0 (default) keeps each library's own choice. On a
loaded machine the libraries' default spinning thread pools slow both down erratically: use 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _env(args, side: str) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
        if side == "catsim":
            flags = (f"--xla_cpu_multi_thread_eigen={'true' if args.threads > 1 else 'false'} "
                     f"intra_op_parallelism_threads={args.threads}")
            env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    if side == "catsim":
        if args.cold:
            env["CATSIM_NO_COMPILE_CACHE"] = "1"
        else:
            env["JAX_COMPILATION_CACHE_DIR"] = str(Path(args.work_dir) / "jax-cache")
    return env


SETTLED = 20  # steps after which a process's first uses (new shapes: traces, cache loads) are over


def _step_stats(steps: list[float]) -> dict:
    """The first step, the mean and median of steps 2..S, and the mean of steps SETTLED+1..S."""
    return {"first": steps[0], "per_step": statistics.mean(steps[1:]), "median_step": statistics.median(steps[1:]),
            "settled_step": statistics.mean(steps[SETTLED:]) if len(steps) > SETTLED else float("nan")}


def _catsim_run(model: Path, out: Path, args) -> dict:
    cmd = [sys.executable, "-m", "catsim", "llm", "rl", "--base", str(model), "--out", str(out),
           "--overwrite", "--no-progress", "--steps", str(args.steps), "--prompts-per-step", str(args.prompts),
           "--group-size", str(args.group), "--max-new-tokens", str(args.max_new), "--temperature", "1",
           "--lr", "1e-4", "--grad-clip", "1", "--clip-low", "0.2", "--clip-high", "0.2",
           "--kl-coef", "0", "--weight-decay", "0.01", "--method", "grpo", "--seed", "0",
           "--save-every", str(args.steps)]  # TRL saves nothing; catsim saves its state once, at the end
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=_env(args, "catsim"))
    total = time.perf_counter() - t0
    log = [json.loads(line) for line in (out / "rl_log.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["step_seconds"] for r in log]
    return {"total": total, **_step_stats(steps), "steps": steps,
            "reward": statistics.mean(r["reward"] for r in log),
            "length": statistics.mean(r["response_length"] for r in log)}


TRL_WORKER = r'''
import json, statistics, sys, time
t_start = time.perf_counter()
import torch
args = json.loads(sys.argv[3])
if args["threads"]:
    torch.set_num_threads(args["threads"])
from datasets import Dataset
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from catsim.llm.tasks import make_task
spec = json.loads(open(sys.argv[1] + "/catsim_task.json").read())
task = make_task(spec["task"], **spec.get("config", {}))
seed = spec.get("data_seed", 0)
n = min(task.num_prompts("train"), args["prompts"] * args["steps"])
prompts = [task.prompt("train", seed, i % task.num_prompts("train")) for i in range(n)]
by_text = {}
for p in prompts:
    by_text.setdefault(p.text, p)
tok = PreTrainedTokenizerFast(tokenizer_file=sys.argv[1] + "/tokenizer.json")
special = json.load(open(sys.argv[1] + "/tokenizer_config.json"))
tok.bos_token, tok.eos_token, tok.pad_token = special["bos_token"], special["eos_token"], special["pad_token"]
tok.padding_side = "left"
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
def reward(prompts, completions, **kw):
    return [task.reward(by_text[p.replace(tok.bos_token, "", 1) if p.startswith(tok.bos_token) else p], c)
            for p, c in zip(prompts, completions)]
times = []
class Timer(TrainerCallback):
    def on_step_begin(self, a, s, c, **kw): self.t = time.perf_counter()
    def on_step_end(self, a, s, c, **kw): times.append(time.perf_counter() - self.t)
cfg = GRPOConfig(output_dir=sys.argv[2], per_device_train_batch_size=args["prompts"] * args["group"],
                 num_generations=args["group"], max_completion_length=args["max_new"], temperature=1.0,
                 learning_rate=1e-4, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.01,
                 max_grad_norm=1.0, epsilon=0.2, beta=0.0, loss_type="dapo", num_iterations=1,
                 gradient_accumulation_steps=1, max_steps=args["steps"], logging_steps=1, save_strategy="no",
                 report_to="none", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0,
                 top_k=0, top_p=1.0, disable_dropout=True, gradient_checkpointing=False)
ds = Dataset.from_dict({"prompt": [p.text for p in prompts]})
trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok,
                      callbacks=[Timer()])
trainer.train()
rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
print(json.dumps({"steps": times, "total": time.perf_counter() - t_start,
                  "reward": statistics.mean(rewards) if rewards else None,
                  "length": statistics.mean(float(h["completions/mean_length"]) for h in trainer.state.log_history
                                        if "completions/mean_length" in h)}))
'''


def _trl_run(model: Path, out: Path, args) -> dict:
    payload = json.dumps({"prompts": args.prompts, "group": args.group, "max_new": args.max_new,
                          "steps": args.steps, "threads": args.threads})
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", TRL_WORKER, str(model), str(out), payload], check=True,
                          capture_output=True, text=True, env=_env(args, "trl"))
    total = time.perf_counter() - t0
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    steps = res["steps"]
    return {"total": total, **_step_stats(steps), "steps": steps, "reward": res["reward"],
            "length": res["length"]}


def _warm_up(out: Path, args, large: bool) -> Path:
    if (out / "config.json").is_file():
        return out
    cmd = [sys.executable, "-m", "catsim", "llm", "sft", "--task", "maze", "--out", str(out), "--no-progress"]
    if large:  # the Qwen2.5-0.5B width (hidden 896, 14 heads, MLP 4864) at 2 layers; briefly trained
        cmd += ["--hidden", "896", "--layers", "2", "--heads", "14", "--intermediate", "4864", "--steps", "20"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def _compare(name: str, model: Path, args, work: Path) -> dict:
    rows = {"catsim": [], "trl": []}
    if not args.cold:  # fill the compilation cache: the timed runs start warm
        _catsim_run(model, work / f"catsim-{name}-prime", args)
    for r in range(args.repeats):
        rows["catsim"].append(_catsim_run(model, work / f"catsim-{name}-{r}", args))
        rows["trl"].append(_trl_run(model, work / f"trl-{name}-{r}", args))
    med = {side: {k: statistics.median(x[k] for x in runs) for k in ("per_step", "median_step", "settled_step", "first", "total")}
           for side, runs in rows.items()}
    print(f"\n{name}: {args.steps} steps x {args.prompts} prompts x {args.group} rollouts, "
          f"<= {args.max_new} new tokens (median of {args.repeats})")
    print(f"{'':28}{'catsim':>10}{'TRL':>10}{'catsim ÷ TRL':>14}")
    for key, label in (("per_step", "seconds per step (2..S)"), ("median_step", "median step (2..S)"),
                       ("settled_step", f"seconds per step ({SETTLED + 1}..S)"),
                       ("first", "first step"), ("total", "whole process")):
        c, t = med["catsim"][key], med["trl"][key]
        print(f"{label:28}{c:10.3f}{t:10.3f}{c / t:14.2f}")
    print(f"{'speed-up per step (TRL ÷ catsim)':36}{med['trl']['per_step'] / med['catsim']['per_step']:.2f}x"
          f"  (steps {SETTLED + 1}..S: {med['trl']['settled_step'] / med['catsim']['settled_step']:.2f}x)")
    print(f"mean training reward: catsim {statistics.mean(x['reward'] for x in rows['catsim']):.3f}, "
          f"TRL {statistics.mean(x['reward'] or 0 for x in rows['trl']):.3f}; mean completion length: "
          f"catsim {statistics.mean(x['length'] for x in rows['catsim']):.1f}, "
          f"TRL {statistics.mean(x['length'] for x in rows['trl']):.1f} tokens")
    return {"median": med, "runs": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="catsim model dir of the maze task (default: a warm-up made here)")
    parser.add_argument("--large", action="store_true", help="also the 0.5B-width, 2-layer model")
    parser.add_argument("--skip-tiny", action="store_true", help="only the --large model")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="catsim without its persistent compilation cache")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads of both sides (0: each library's default)")
    parser.add_argument("--work", default=None, help="working directory (default: a temporary one)")
    parser.add_argument("--json", help="write all timings to this file")
    args = parser.parse_args()
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("TRL is not installed: pip install -e '.[bench]'") from None
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-rl-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    args.work_dir = str(work)
    report = {}
    if not args.skip_tiny:
        model = Path(args.model) if args.model else _warm_up(work / "maze-sft", args, large=False)
        report["tiny"] = _compare("tiny maze model", model, args, work)
    if args.large:
        report["large"] = _compare("0.5B-width model (2 layers)", _warm_up(work / "maze-large", args, True),
                                   args, work)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
