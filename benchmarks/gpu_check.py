"""The LLM half of `benchmarks/gpu_check.sh`: rollout speed, RL step time and peak device memory of a
Qwen2.5-0.5B-shaped model against what `catsim llm plan` predicts for the same step.

    python benchmarks/gpu_check.py --out DIR               # on an accelerator (the real check)
    python benchmarks/gpu_check.py --out DIR --cpu-smoke   # tiny sizes: that the code runs, anywhere

The model is random (initialised here, no download) with Qwen2.5-0.5B's published shape; the
work is one RL step's: `--prompts` prompts × `--samples` samples of `--prompt-len` random tokens +
`--new` new tokens at temperature 1 (no stop token, so every row is full length), then one update of
the whole batch (remat, micro-batches of `--micro-batch` rows, bf16 compute), run through
`catsim.llm.rl.step.make_functions` as `catsim llm rl` runs it. Each is timed on its second call
(the first compiles). Peak device memory is the device's `peak_bytes_in_use` after the RL step
(measured before any generation, so the KV cache is not in it), compared with the plan's
`per_device_bytes` for the same step. Writes DIR/llm_check.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from plan_recipes import config_path  # noqa: E402 - the published configs, written once (configs/)

QWEN25_05B = json.loads(config_path("Qwen2.5-0.5B").read_text())
SMOKE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512}


def _peak_bytes():
    stats = __import__("jax").devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def _timed_twice(fn):
    import jax

    times, out = [], None
    for _ in range(2):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return out, times


def run_check(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from catsim.llm.model.config import ModelConfig
    from catsim.llm.model.transformer import init_params
    from catsim.llm.plan import plan_rl_step
    from catsim.llm.rl import RLConfig
    from catsim.llm.rl.loop import needs_reference
    from catsim.llm.rl.step import make_functions
    from catsim.llm.rollout import SamplingConfig, generate

    hf = {**QWEN25_05B, **(SMOKE if args.cpu_smoke else {})}
    model_cfg = ModelConfig.from_hf_dict(hf, dtype=args.dtype).replace(remat=True)
    rows, seq = args.prompts * args.samples, args.prompt_len + args.new
    rl_cfg = RLConfig.from_flat(prompts_per_step=args.prompts, group_size=args.samples,
                                micro_batch_size=args.micro_batch, max_new_tokens=args.new, kl_coef=0.0)
    report = {"backend": jax.default_backend(), "device": str(jax.devices()[0]), "params": model_cfg.num_params,
              "dtype": args.dtype, "rows": rows, "seq": seq, "micro_batch": args.micro_batch,
              "cpu_smoke": bool(args.cpu_smoke)}

    t0 = time.perf_counter()
    plan = plan_rl_step(model_cfg, rl_cfg, seq=seq)
    report["plan"] = plan.to_dict()
    report["plan_seconds"] = time.perf_counter() - t0

    params = init_params(model_cfg, jax.random.key(0))
    fns = make_functions(model_cfg, rl_cfg)
    opt_state = fns.optimizer.init(params)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.integers(0, hf["vocab_size"], (rows, seq)), jnp.int32)
    real = jnp.ones((rows, seq), bool)
    loss_mask = np.zeros((rows, seq - 1), np.float32)
    loss_mask[:, args.prompt_len - 1:] = 1.0
    adv = rng.normal(size=(rows, 1)).astype(np.float32) * loss_mask
    ref = params if needs_reference(rl_cfg) else None
    old, logp_times = _timed_twice(lambda: fns.logp(params, tokens, real)[0])
    batch = {"tokens": tokens, "real": real, "loss_mask": jnp.asarray(loss_mask), "adv": jnp.asarray(adv),
             "old_logp": old}
    if ref is not None:
        batch["ref_logp"] = fns.logp(ref, tokens, real)[0]
    state = {"params": params, "opt": opt_state}

    def step():
        new_params, new_opt, metrics = fns.update(state["params"], state["opt"], batch)
        state["params"], state["opt"] = new_params, new_opt
        return metrics

    metrics, step_times = _timed_twice(step)
    report["logp_seconds"] = logp_times[1]
    report["rl_step_seconds"], report["rl_step_first_seconds"] = step_times[1], step_times[0]
    report["rl_step_loss"] = float(metrics["loss"])
    report["rl_step_tokens_per_second"] = rows * seq / step_times[1]
    peak = _peak_bytes()
    report["peak_device_bytes_rl_step"] = peak
    report["plan_over_measured"] = None if not peak else plan.per_device_bytes / peak

    prompts = tokens[:, :args.prompt_len]
    sampling = SamplingConfig(max_new_tokens=args.new, temperature=1.0)
    rollout, gen_times = _timed_twice(lambda: generate(state["params"], model_cfg, sampling, prompts,
                                                       jnp.ones(prompts.shape, bool), jax.random.key(1)))
    generated = int(np.asarray(rollout.mask_BxN).sum())
    report["rollout_seconds"], report["rollout_first_seconds"] = gen_times[1], gen_times[0]
    report["rollout_tokens"] = generated
    report["rollout_tokens_per_second"] = generated / gen_times[1]
    report["peak_device_bytes_total"] = _peak_bytes()
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for llm_check.json")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model and sizes (runs on any CPU)")
    parser.add_argument("--prompts", type=int, default=None, help="prompts (default 8; smoke 2)")
    parser.add_argument("--samples", type=int, default=None, help="samples per prompt (default 8; smoke 2)")
    parser.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default 128; smoke 8)")
    parser.add_argument("--new", type=int, default=None, help="new tokens (default 1024; smoke 8)")
    parser.add_argument("--micro-batch", type=int, default=None, help="rows per micro-batch (default 8; smoke 2)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    args = parser.parse_args(argv)
    defaults = dict(prompts=2, samples=2, prompt_len=8, new=8, micro_batch=2) if args.cpu_smoke else \
        dict(prompts=8, samples=8, prompt_len=128, new=1024, micro_batch=8)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = run_check(args)
    (out / "llm_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    gib = 2**30
    peak = report["peak_device_bytes_rl_step"]
    print(f"{report['device']}: {report['params']:,} parameters ({report['dtype']}), "
          f"{report['rows']} rows x {report['seq']} tokens")
    print(f"rollout: {report['rollout_tokens_per_second']:,.0f} tok/s ({report['rollout_tokens']} tokens in "
          f"{report['rollout_seconds']:.2f} s; first call {report['rollout_first_seconds']:.1f} s)")
    print(f"RL step: {report['rl_step_seconds']:.2f} s ({report['rl_step_tokens_per_second']:,.0f} tok/s; "
          f"first call {report['rl_step_first_seconds']:.1f} s)")
    print(f"peak device memory after the RL step: "
          f"{'n/a (no memory stats on this backend)' if not peak else f'{peak / gib:.2f} GiB'}; "
          f"plan per_device_bytes {report['plan']['per_device_bytes'] / gib:.2f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
