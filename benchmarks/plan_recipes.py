"""The GPU recipes' memory table of docs/llm-rl.md, computed by `catsim llm plan`.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/plan_recipes.py

For Qwen2.5-0.5B, 1.5B and 7B (config.json values as published with the models, in configs/), on 1
device and on an 8-device FSDP mesh (1x8), it plans the recipe's RL update: a mini-batch of 64
sequences × 2304 tokens (256 prompt + 2048 new), remat, bf16, micro-batches of 8 sequences, no KL
(so no reference, when the step skips it), and prints a markdown table. Compiled for the CPU here:
XLA's GPU compiler fuses differently, so the numbers estimate, they do not measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# configs/<name>/config.json: the config.json values as published with the models; the docs point
# `catsim llm plan --model` at the same files.
QWEN25 = ("Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-7B")


def config_path(name: str) -> Path:
    return HERE / "configs" / name / "config.json"


def main(argv=None) -> int:
    import jax

    from catsim.llm.model.config import ModelConfig
    from catsim.llm.plan import GIB, parse_mesh, plan_rl_step
    from catsim.llm.rl import RLConfig

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=2304)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--models", default=",".join(QWEN25))
    parser.add_argument("--meshes", default="none,1x8")
    args = parser.parse_args(argv)
    rl = RLConfig.from_flat(prompts_per_step=args.batch, group_size=1, micro_batch_size=args.micro_batch,
                            adv_std="population")  # rows as groups of one; the std is not compiled in
    print(f"{args.batch} x {args.seq} tokens per update, micro-batch {args.micro_batch}, remat, bf16, "
          f"kl_coef 0; compiled on {jax.default_backend()} (jax {jax.__version__})\n")
    print("| model | params | devices | params+Adam per device | XLA temp (update) | peak per device "
          "| fits 80 GiB | fits 139 GiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        hf = json.loads(config_path(name).read_text())
        cfg = ModelConfig.from_hf_dict(hf, dtype="bfloat16").replace(remat=True)
        for mesh_text in args.meshes.split(","):
            plan = plan_rl_step(cfg, rl, seq=args.seq, mesh=parse_mesh(mesh_text))
            state = (plan.param_bytes_per_device + plan.optimizer_bytes_per_device) / GIB
            peak = plan.per_device_bytes / GIB
            print(f"| {name} | {plan.params / 1e9:.2f} B | {plan.devices} | {state:.1f} GiB | "
                  f"{plan.update_temp_bytes / GIB:.1f} GiB | {peak:.1f} GiB | {'yes' if peak <= 80 else 'no'} | "
                  f"{'yes' if peak <= 139 else 'no'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
