"""catsim against PyTorch/transformers on a Qwen2.5-0.5B-shaped model: load, generation, RL step, memory.

    python benchmarks/bench_llm_scale.py                    # 4 layers (minutes on a small CPU)
    python benchmarks/bench_llm_scale.py --layers 24        # the full 0.5B depth (494M parameters)
    python benchmarks/bench_llm_scale.py --json out.json    # also write the numbers
    python benchmarks/bench_llm_scale.py --repeat 3         # best of 3 fresh processes per side

The model: a random `Qwen2ForCausalLM` written by `transformers` (`save_pretrained`, safetensors,
float32) with Qwen2.5-0.5B's published shape (hidden 896, MLP 4864, 14 query / 2 key-value heads,
vocabulary 151,936, tied embeddings) and `--layers` blocks. Both sides do the same work, each phase
in a fresh process (so its peak resident memory, VmHWM, is its own):

- load: read the checkpoint directory into the framework's parameters;
- generate: greedy decoding of `--batch` rows × (`--prompt` random prompt tokens + `--new` new
  tokens), timed on the second call (the first compiles / warms up); the generated tokens are
  compared position by position. catsim lays the parameters out as `catsim llm sample` does
  (`rollout.decode_params`: on the CPU the stacked layers split once, the stack released); that
  one-time split is timed apart and printed;
- step: RL gradient steps on `--batch` × `--seq` tokens (the last half are the response): the
  token-mean PPO-clip loss (ε = 0.2, no KL, no entropy), its gradient, global-norm clipping and
  one AdamW update. catsim runs `catsim.llm.rl.step.make_functions(...).update` (the training
  step of `catsim llm rl`), PyTorch the same loss on `model(...).logits` with `torch.optim.AdamW`;
  the first step compiles / warms up, then the median of `--steps` steps (default 3; the first of
  them writes into fresh memory and reads slow on both sides).

Ratios are catsim ÷ PyTorch for time and memory (below 1: catsim faster / leaner) and catsim ×
for generation throughput (above 1: catsim faster).

`--repeat K` runs every phase K times per side in fresh processes, the two sides alternating, and
reports each side's fastest run (and its lowest peak); the medians are printed and every time is in
the JSON. Use it on a virtual machine: there the first touch of fresh memory costs what the host
makes it cost (on the 2-core VM of docs/llm-scale.md a new process filled 785 MB in 0.06–1.2 s from
one run to the next), and catsim's load writes its weights into its own buffers while
transformers' memory map touches none of them at load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
                  vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643)


def write_model(directory: Path, layers: int) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(num_hidden_layers=layers, **QWEN25_05B)
    Qwen2ForCausalLM(config).to(torch.float32).save_pretrained(directory, safe_serialization=True)


def _peak_mb() -> float:
    """This process's peak resident memory (MB): VmHWM, which starts afresh at exec. (Linux keeps
    `ru_maxrss` across exec, so a phase process forked from this 1.7 GB parent would report at
    least the parent's size.)"""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _inputs(args):
    import numpy as np

    rng = np.random.default_rng(0)
    prompts = rng.integers(0, 151643, (args.batch, args.prompt)).astype(np.int32)
    tokens = rng.integers(0, 151643, (args.batch, args.seq)).astype(np.int32)
    adv = rng.normal(size=(args.batch, 1)).astype(np.float32)
    return prompts, tokens, adv


# ----------------------------------------------------------------------------- catsim side
def catsim_phase(model: Path, phase: str, args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from catsim.llm.model.checkpoint import load_model

    t0 = time.perf_counter()
    cfg, params = load_model(model, donatable=phase == "step")  # as `catsim llm rl` loads it
    jax.block_until_ready(params)
    out = {"load_s": time.perf_counter() - t0}
    prompts, tokens, adv = _inputs(args)
    if phase == "generate":
        from catsim.llm.rollout import SamplingConfig, decode_params, generate

        t0 = time.perf_counter()
        params = decode_params(params)  # as `catsim llm sample` lays them out
        jax.block_until_ready(params)
        out["layout_s"] = time.perf_counter() - t0
        sampling = SamplingConfig(max_new_tokens=args.new, temperature=0.0)
        mask = jnp.ones(prompts.shape, bool)
        run = lambda: jax.block_until_ready(generate(params, cfg, sampling, jnp.asarray(prompts), mask,  # noqa: E731
                                                     jax.random.key(0)))
        run()
        t0 = time.perf_counter()
        rollout = run()
        out["generate_s"] = time.perf_counter() - t0
        out["tokens"] = np.asarray(rollout.tokens_BxN).tolist()
    elif phase == "step":
        from catsim.llm.rl import RLConfig
        from catsim.llm.rl.step import make_functions

        rl = RLConfig.from_flat(prompts_per_step=args.batch, group_size=1, adv_std="population",
                                kl_coef=0.0, entropy_coef=0.0, learning_rate=1e-6, grad_clip=1.0, clip_low=0.2, clip_high=0.2)
        fns = make_functions(cfg, rl)
        opt_state = fns.optimizer.init(params)
        real = np.ones(tokens.shape, bool)
        loss_mask = np.zeros((args.batch, args.seq - 1), np.float32)
        loss_mask[:, args.seq // 2 - 1:] = 1.0
        old = fns.logp(params, jnp.asarray(tokens), jnp.asarray(real))[0]
        batch = {"tokens": jnp.asarray(tokens), "real": jnp.asarray(real), "loss_mask": jnp.asarray(loss_mask),
                 "adv": jnp.asarray(adv * loss_mask), "old_logp": old, "ref_logp": old}
        state = (params, opt_state)
        times = []
        for _ in range(1 + args.steps):
            t0 = time.perf_counter()
            p, o, metrics = fns.update(*state, batch)
            jax.block_until_ready((p, o, metrics))
            times.append(time.perf_counter() - t0)
            state = (p, o)
        out.update(_step_times(times))
        out["loss"] = float(metrics["loss"])
    out["peak_mb"] = _peak_mb()
    return out


def _step_times(times: list[float]) -> dict:
    """The first (compiling / warming) step apart; `step_s` the median of the others. The second
    step of a process is the first to write its results into fresh memory (first touch, on this VM
    from 0.06 to 1.2 s per 785 MB), so a single timed step reads slow on both sides."""
    return {"step_first_s": times[0], "step_s": statistics.median(times[1:]), "step_times": times[1:]}


# ----------------------------------------------------------------------------- PyTorch side
def torch_phase(model: Path, phase: str, args) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    t0 = time.perf_counter()
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    out = {"load_s": time.perf_counter() - t0}
    prompts, tokens, adv = _inputs(args)
    if phase == "generate":
        net.eval()
        ids = torch.as_tensor(prompts, dtype=torch.long)

        def run():
            with torch.no_grad():
                return net.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=args.new, min_new_tokens=args.new, pad_token_id=0)

        run()
        t0 = time.perf_counter()
        result = run()
        out["generate_s"] = time.perf_counter() - t0
        out["tokens"] = result[:, args.prompt:].tolist()
    elif phase == "step":
        net.train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.0)
        ids = torch.as_tensor(tokens, dtype=torch.long)
        mask = torch.zeros(args.batch, args.seq - 1)
        mask[:, args.seq // 2 - 1:] = 1.0
        advantage = torch.as_tensor(adv) * mask

        def logp_of():
            logits = net(ids, attention_mask=torch.ones_like(ids)).logits[:, :-1].float()
            return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

        with torch.no_grad():
            old = logp_of()
        times = []
        for _ in range(1 + args.steps):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            logp = logp_of()
            ratio = torch.exp(logp - old)
            per_token = -torch.minimum(ratio * advantage, torch.clamp(ratio, 0.8, 1.2) * advantage)
            loss = (per_token * mask).sum() / mask.sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            times.append(time.perf_counter() - t0)
        out.update(_step_times(times))
        out["loss"] = float(loss)
    out["peak_mb"] = _peak_mb()
    return out


# ----------------------------------------------------------------------------- driver
def _run_worker(side: str, phase: str, model: Path, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", side, "--phase", phase, "--model", str(model),
           "--batch", str(args.batch), "--prompt", str(args.prompt), "--new", str(args.new),
           "--seq", str(args.seq), "--steps", str(args.steps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
    if proc.returncode != 0:
        raise SystemExit(f"{side} {phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


_PHASE_TIME = {"load": "load_s", "generate": "generate_s", "step": "step_s"}


def _best(runs: list[dict], phase: str) -> dict:
    """The fastest of a phase's runs; its peak memory the lowest of them, every run's time and
    the median kept beside it."""
    key = _PHASE_TIME[phase]
    best = dict(min(runs, key=lambda r: r[key]))
    best["peak_mb"] = min(r["peak_mb"] for r in runs)
    best[f"{key}_all"] = [r[key] for r in runs]
    best[f"{key}_median"] = statistics.median(best[f"{key}_all"])
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (0.5B has 24; default 4)")
    parser.add_argument("--batch", type=int, default=4, help="rows of generation and of the RL step")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens per row (generation)")
    parser.add_argument("--new", type=int, default=64, help="new tokens per row (generation)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per row of the RL step")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed RL steps after the compiling one, median reported (default 3)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="fresh processes per side and phase, alternating; the best is reported")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    parser.add_argument("--worker", choices=["catsim", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=["load", "generate", "step"], help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help="use this model directory instead of writing one")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.worker:
        fn = catsim_phase if args.worker == "catsim" else torch_phase
        print(json.dumps(fn(Path(args.model), args.phase, args)))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(args.model) if args.model else Path(tmp) / "qwen25-05b-shape"
        if not args.model:
            write_model(model, args.layers)
        runs = {side: {phase: [] for phase in _PHASE_TIME} for side in ("catsim", "torch")}
        for phase in _PHASE_TIME:
            for _ in range(args.repeat):  # the two sides alternate, so a slow spell hits both
                for side in runs:
                    runs[side][phase].append(_run_worker(side, phase, model, args))
        results = {side: {phase: _best(phase_runs, phase) for phase, phase_runs in by_phase.items()}
                   for side, by_phase in runs.items()}
    c, t = results["catsim"], results["torch"]
    gen_tokens = args.batch * args.new
    equal = sum(a == b for ra, rb in zip(c["generate"]["tokens"], t["generate"]["tokens"]) for a, b in zip(ra, rb))
    rows = [
        ("load (s)", c["load"]["load_s"], t["load"]["load_s"], c["load"]["load_s"] / t["load"]["load_s"]),
        ("load peak memory (MB)", c["load"]["peak_mb"], t["load"]["peak_mb"], c["load"]["peak_mb"] / t["load"]["peak_mb"]),
        ("generation (tok/s)", gen_tokens / c["generate"]["generate_s"], gen_tokens / t["generate"]["generate_s"],
         t["generate"]["generate_s"] / c["generate"]["generate_s"]),
        ("generation peak memory (MB)", c["generate"]["peak_mb"], t["generate"]["peak_mb"],
         c["generate"]["peak_mb"] / t["generate"]["peak_mb"]),
        ("RL step (s)", c["step"]["step_s"], t["step"]["step_s"], c["step"]["step_s"] / t["step"]["step_s"]),
        ("RL step peak memory (MB)", c["step"]["peak_mb"], t["step"]["peak_mb"],
         c["step"]["peak_mb"] / t["step"]["peak_mb"]),
    ]
    print(f"Qwen2.5-0.5B shape, {args.layers} layers; generation {args.batch} x ({args.prompt} + {args.new}); "
          f"RL step {args.batch} x {args.seq}")
    print(f"{'':26s} {'catsim':>12s} {'PyTorch':>12s} {'ratio':>8s}")
    for name, a, b, r in rows:
        print(f"{name:26s} {a:12.2f} {b:12.2f} {r:8.2f}")
    if args.repeat > 1:
        print(f"best of {args.repeat} fresh processes per side; medians (s): " + ", ".join(
            f"{phase} {c[phase][key + '_median']:.2f} vs {t[phase][key + '_median']:.2f}"
            for phase, key in _PHASE_TIME.items()))
    print(f"catsim's one-time decode layout (split layers) {c['generate']['layout_s']:.2f} s")
    print(f"greedy tokens equal: {equal}/{gen_tokens}; RL step loss catsim {c['step']['loss']:.6g}, "
          f"PyTorch {t['step']['loss']:.6g}; catsim first (compiling) step {c['step']['step_first_s']:.1f} s")
    if args.json:
        for side in results.values():
            side["generate"].pop("tokens")
        from catsim.files import write_text

        write_text(args.json, json.dumps({"args": vars(args), "results": results, "tokens_equal": equal,
                                          "tokens": gen_tokens, "ratios": {name: r for name, _, _, r in rows}},
                                         indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
