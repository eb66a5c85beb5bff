"""Loading a Hugging Face checkpoint directory: catsim's `load_model` against a baseline checkout
of catsim and against `transformers.AutoModelForCausalLM.from_pretrained`, each in a fresh process.

The model is a random Qwen2 written by `transformers` (default: Qwen2.5-0.5B's widths and
vocabulary with 4 layers, float32, sharded into several safetensors files with an index).
Reported per loader: wall time of the load (until the arrays are ready) and the process's peak
resident memory during the load (Linux VmHWM, reset just before it through /proc/self/clear_refs),
also minus the memory held after the imports ("load peak"); ratios are against this checkout's
catsim. The safetensors files are read through memory maps, so file pages touched count too.

    python benchmarks/bench_llm_load.py --baseline /work/main --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
kind, path = sys.argv[1], sys.argv[2]
def status_mb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
def start():
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current RSS
    return status_mb("VmRSS")
def rss_mb():
    return status_mb("VmHWM")
if kind == "torch":
    import torch, transformers
    before = start()
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    seconds = time.perf_counter() - t0
    n = sum(p.numel() for p in model.parameters())
else:
    import jax
    from catsim.llm.model.checkpoint import load_model
    before = start()
    t0 = time.perf_counter()
    cfg, params = load_model(path, dtype="float32")
    jax.block_until_ready(params)
    seconds = time.perf_counter() - t0
    n = sum(x.size for x in jax.tree.leaves(params))
print(json.dumps({"seconds": seconds, "peak_mb": rss_mb(), "before_mb": before, "params": int(n)}))
"""


def write_model(directory: Path, hidden: int, layers: int, vocab: int, shard: str) -> None:
    import torch
    import transformers

    cfg = transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=int(hidden * 5.43) // 64 * 64,
        num_hidden_layers=layers, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, tie_word_embeddings=True, rope_theta=1000000.0)
    cfg.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(directory, max_shard_size=shard, safe_serialization=True)


def run_child(kind: str, path: Path, pythonpath: str | None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    check = "import catsim, sys; print(catsim.__file__)"
    if pythonpath is not None:
        where = subprocess.run([sys.executable, "-c", check], env=env, check=True, text=True,
                               capture_output=True, cwd=path.parent).stdout.strip()
        if not where.startswith(pythonpath):
            raise SystemExit(f"PYTHONPATH={pythonpath} imports catsim from {where}")
    # cwd outside any checkout: `python -c` puts the working directory first on sys.path
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], env=env, check=True,
                         capture_output=True, text=True, cwd=path.parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--shard", default="300MB", help="max_shard_size when writing (default: %(default)s)")
    ap.add_argument("--model-dir", type=Path, default=None, help="reuse/write the model here")
    ap.add_argument("--baseline", default=None, help="path of another catsim checkout to compare")
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes per loader (best time)")
    args = ap.parse_args()

    tmp = None
    directory = args.model_dir
    if directory is None:
        tmp = tempfile.TemporaryDirectory()
        directory = Path(tmp.name) / "model"
    if not (directory / "config.json").is_file():
        write_model(directory, args.hidden, args.layers, args.vocab, args.shard)
    here = str(Path(__file__).resolve().parents[1])
    loaders = {"catsim": ("catsim", here)}
    if args.baseline:
        loaders["catsim baseline"] = ("catsim", str(Path(args.baseline).resolve()))
    loaders["transformers"] = ("torch", None)
    results = {}
    for label, (kind, pythonpath) in loaders.items():
        runs = [run_child(kind, directory, pythonpath) for _ in range(args.repeats)]
        results[label] = {"seconds": min(r["seconds"] for r in runs),
                          "peak_mb": min(r["peak_mb"] for r in runs),
                          "load_peak_mb": min(r["peak_mb"] - r["before_mb"] for r in runs),
                          "params": runs[0]["params"]}
    files = sorted(p.name for p in directory.glob("*.safetensors"))
    size_mb = sum(p.stat().st_size for p in directory.glob("*.safetensors")) / 2**20
    print(f"model: {results['catsim']['params'] / 1e6:.1f}M parameters, {size_mb:.0f} MiB in "
          f"{len(files)} safetensors files; best of {args.repeats} fresh processes")
    base = results["catsim"]
    print(f"{'loader':<16} {'seconds':>8} {'peak RSS MiB':>13} {'load peak MiB':>14} "
          f"{'time ratio':>11} {'load-peak ratio':>16}")
    for label, r in results.items():
        print(f"{label:<16} {r['seconds']:>8.2f} {r['peak_mb']:>13.0f} {r['load_peak_mb']:>14.0f} "
              f"{r['seconds'] / base['seconds']:>10.2f}x {r['load_peak_mb'] / base['load_peak_mb']:>15.2f}x")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
