"""The rollout part of `benchmarks/gpu_check.sh`: the RL rollout at the paper's shape (64 prompts x 8
samples, skewed lengths) on Qwen2.5-0.5B- and 1.5B-shaped random models, each engine's time beside
the HBM roofline of the same work.

    python benchmarks/gpu_rollout.py --out DIR               # on a GPU (the real check)
    python benchmarks/gpu_rollout.py --out DIR --cpu-smoke   # tiny model and sizes, any CPU

Skewed lengths without a trained model: near-uniform random logits and a stop set of 1/`--mean`
of the vocabulary end a row with probability ~1/mean per token (geometric lengths, capped at
`--new`: most answers short, a few run to the cap). Roofline: every decode step must read the
weights once (compute dtype) and the keys/values its live rows attend to (each live prompt's
cache once, each live row's own tokens); the sum over the measured lengths divided by the
device's memory bandwidth is the time no engine can beat. The goal on a GPU is >= 50 % of it.
Writes DIR/rollout_check.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from plan_recipes import config_path  # noqa: E402 - the published configs (configs/)

SMOKE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512}
# HBM bandwidth (bytes/s) by device name, published figures; others need --bandwidth
BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "L40S": 0.864e12, "A10": 0.6e12}


def roofline_seconds(weight_bytes: int, kv_per_token: int, prompt_len: int, lengths, rows_per_prompt: int,
                     bandwidth: float) -> float:
    """Σ over decode steps t of (weights + KV of the live prompts + Σ live rows' t own tokens) / bandwidth."""
    import numpy as np

    lengths = np.asarray(lengths).reshape(-1, rows_per_prompt)
    total = 0.0
    for t in range(int(lengths.max())):
        live = lengths > t
        if not live.any():
            break
        total += weight_bytes + kv_per_token * (live.any(axis=1).sum() * prompt_len + live.sum() * t)
    return total / bandwidth


def check(name: str, hf: dict, args, bandwidth: float | None) -> dict:
    import jax
    import numpy as np

    from catsim.llm.model.config import ModelConfig
    from catsim.llm.model.transformer import init_params
    from catsim.llm.rollout import SamplingConfig, generate

    cfg = ModelConfig.from_hf_dict(hf, dtype=args.dtype)
    params = init_params(cfg, jax.random.key(0))  # stored in the compute dtype (no float32 masters)
    vocab = hf["vocab_size"]
    stops = tuple(range(vocab - max(1, vocab // args.mean), vocab))
    sampling = SamplingConfig(max_new_tokens=args.new, temperature=1.0, stop_tokens=stops, pad_token=0)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab - len(stops), (args.prompts, args.prompt_len)).astype(np.int32)
    tokens, mask = np.repeat(ids, args.samples, axis=0), np.ones((args.prompts * args.samples, args.prompt_len), bool)
    pids = np.repeat(np.arange(args.prompts, dtype=np.int32), args.samples)
    sids = np.tile(np.arange(args.samples, dtype=np.int32), args.prompts)
    report = {"model": name, "params": cfg.num_params, "rows": len(tokens), "prompt_len": args.prompt_len,
              "new": args.new}
    itemsize = np.dtype(cfg.dtype).itemsize
    kv_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize
    for engine in args.engines.split(","):
        times, out = [], None
        for _ in range(2):  # the first call compiles
            t0 = time.perf_counter()
            out = jax.device_get(generate(params, cfg, sampling, tokens, mask, jax.random.key(1), pids, sids,
                                          engine=engine))
            times.append(time.perf_counter() - t0)
        lengths = out.lengths_B
        entry = {"seconds": times[1], "first_seconds": times[0], "useful_tokens": int(lengths.sum()),
                 "mean_length": float(lengths.mean()), "max_length": int(lengths.max()),
                 "useful_tokens_per_second": float(lengths.sum() / times[1])}
        if bandwidth:
            roof = roofline_seconds(cfg.num_params * itemsize, kv_per_token, args.prompt_len, lengths, args.samples,
                                    bandwidth)
            entry.update(roofline_seconds=roof, fraction_of_roofline=roof / times[1])
        report[engine] = entry
        roof_text = (f"; HBM roofline {entry['roofline_seconds']:.2f} s = {100 * entry['fraction_of_roofline']:.0f} %"
                     if bandwidth else "; roofline n/a (unknown bandwidth: --bandwidth)")
        print(f"rollout {name} {engine}: {times[1]:.2f} s, {entry['useful_tokens_per_second']:,.0f} useful tok/s "
              f"({report['rows']} rows, mean length {entry['mean_length']:.0f}, longest {entry['max_length']}; "
              f"first call {times[0]:.1f} s){roof_text}", flush=True)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for rollout_check.json")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model and sizes (runs on any CPU)")
    parser.add_argument("--models", default="Qwen2.5-0.5B,Qwen2.5-1.5B", help="Qwen2.5 shapes (plan_recipes names)")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new", type=int, default=2048, help="new tokens at most (the cap)")
    parser.add_argument("--mean", type=int, default=512, help="~ mean completion length (stop set 1/mean of V)")
    parser.add_argument("--engines", default="cascade,static")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--bandwidth", type=float, default=None, help="HBM bytes/s (default: by device name)")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        args.prompts, args.samples, args.prompt_len, args.new, args.mean = 4, 2, 8, 16, 8
        args.models = args.models.split(",")[0]
    import jax

    device = jax.devices()[0]
    bandwidth = args.bandwidth or next((b for key, b in BANDWIDTH.items() if key in str(device.device_kind)), None)
    reports = {"device": str(device), "backend": jax.default_backend(), "bandwidth": bandwidth,
               "cpu_smoke": bool(args.cpu_smoke), "models": []}
    for name in args.models.split(","):
        hf = {**json.loads(config_path(name).read_text()), **(SMOKE if args.cpu_smoke else {})}
        reports["models"].append(check(name, hf, args, bandwidth))
    from catsim.files import write_text

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "rollout_check.json", json.dumps(reports, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
