"""Rollout throughput: catsim's jitted KV-cache sampler vs Hugging Face `transformers` generate
(PyTorch CPU, KV cache on) on the same tiny random model, in the same run.

    PYTHONPATH=. python benchmarks/bench_rollout.py [--batch 8 --prompt-len 16 --new-tokens 64]

Both sides sample (temperature 1, no top-p/top-k, no early stop: exactly batch x new-tokens tokens),
after one warm-up call each (catsim's warm-up includes compilation). Prints tokens/s of each and
the ratio catsim / transformers (target >= 2).

    PYTHONPATH=. python benchmarks/bench_rollout.py --workload rl [--repeats 3]

The RL rollout's workloads on a 4-layer, 256-wide random model, the static engine (one batch to
the longest row) against the cascade engine (one prefill per prompt, shared prompt cache,
compaction), timed interleaved in one run (median of --repeats after a warm-up):
  skewed   32 rows (4 prompts x 8 samples, 16-token prompts), up to 256 new tokens, a stop set of
           1/32 of the vocabulary (a row ends w.p. ~1/32 per token); useful tokens/s against a
           batch whose rows all run to the cap (target: cascade >= 0.7x of it);
  shared   4 prompts x 8 samples of 512-token prompts, 16 new tokens, against 32 distinct prompts
           (target: the group >= 1.5x faster);
  uniform  32 rows x 256 new tokens, no stop (target: cascade >= 0.95x static), with transformers'
           generate as a column.
Tokens of the two engines are compared; "KV" is the rollout's key/value cache, computed from the
shapes each engine allocates (the CPU backend reports no peak device memory).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="Qwen2ForCausalLM",
                        choices=["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", choices=["hf", "rl"], default="hf",
                        help="hf: catsim vs transformers generate (default); rl: static vs cascade engine")
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="torch.set_num_threads for transformers (default: PyTorch's choice)")
    args = parser.parse_args()
    if args.workload == "rl":
        from bench_rollout_rl import main as rl_main

        rl_main(args.repeats, args.torch_threads)
        return

    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    import transformers

    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.rollout import SamplingConfig, generate

    torch.manual_seed(0)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    config_cls = {"LlamaForCausalLM": transformers.LlamaConfig, "Qwen2ForCausalLM": transformers.Qwen2Config,
                  "Qwen3ForCausalLM": transformers.Qwen3Config}[args.arch]
    hf_cfg = config_cls(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=2 * args.hidden,
                        num_hidden_layers=args.layers, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=args.prompt_len + args.new_tokens + 8)
    hf_cfg.architectures = [args.arch]
    model = getattr(transformers, args.arch)(hf_cfg).eval()
    prompts = np.random.default_rng(0).integers(0, args.vocab, size=(args.batch, args.prompt_len))
    n_tokens = args.batch * args.new_tokens

    def run_hf() -> None:
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor(prompts), attention_mask=torch.ones_like(
                torch.tensor(prompts)), do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, use_cache=True,
                eos_token_id=None, pad_token_id=0)
        assert out.shape == (args.batch, args.prompt_len + args.new_tokens)

    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory, safe_serialization=True)
        cfg, params = load_model(directory)
    sampling = SamplingConfig(max_new_tokens=args.new_tokens, temperature=1.0)
    tokens, mask = jnp.asarray(prompts, jnp.int32), jnp.ones(prompts.shape, bool)

    def run_catsim(seed: int) -> None:
        out = generate(params, cfg, sampling, tokens, mask, jax.random.key(seed))
        jax.block_until_ready(out)
        assert int(out.mask_BxN.sum()) == n_tokens

    def timed(fn, *a) -> float:
        start = time.perf_counter()
        fn(*a)
        return time.perf_counter() - start

    compile_s = timed(run_catsim, 0)
    timed(run_hf)
    hf_s = statistics.median(timed(run_hf) for _ in range(args.repeats))
    catsim_s = statistics.median(timed(run_catsim, i + 1) for i in range(args.repeats))
    print(f"model: {args.arch}, hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; "
          f"batch {args.batch} x prompt {args.prompt_len} + {args.new_tokens} new tokens; "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), transformers "
          f"{transformers.__version__}, jax {jax.__version__} ({jax.default_backend()})")
    print(f"catsim      : {n_tokens / catsim_s:10.0f} tokens/s  (median of {args.repeats}; first call "
          f"incl. compile {compile_s:.1f} s)")
    print(f"transformers: {n_tokens / hf_s:10.0f} tokens/s  (median of {args.repeats})")
    print(f"ratio catsim / transformers: {hf_s / catsim_s:.1f}x")


if __name__ == "__main__":
    main()
