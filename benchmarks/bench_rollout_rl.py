"""`bench_rollout.py --workload rl`: the static engine against the cascade engine on RL rollouts
(skewed lengths, long shared prompts, uniform lengths), side by side in one run. See
bench_rollout.py's docstring for the workloads and targets."""

from __future__ import annotations

import statistics
import tempfile
import time

import jax
import numpy as np

LAYERS, HIDDEN, VOCAB, HEADS, KV_HEADS = 4, 256, 512, 4, 2


def _model(max_len: int):
    import transformers

    from catsim.llm.model.checkpoint import load_model

    hf_cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                      num_key_value_heads=KV_HEADS, max_position_embeddings=max_len)
    hf_cfg.architectures = ["Qwen2ForCausalLM"]
    model = transformers.Qwen2ForCausalLM(hf_cfg).eval()
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory, safe_serialization=True)
        cfg, params = load_model(directory)
    return model, cfg, params


def main(repeats: int = 3, torch_threads: int | None = None) -> None:
    import torch

    from catsim.llm.plan import rollout_kv_bytes
    from catsim.llm.rollout import SamplingConfig, generate

    if torch_threads:
        torch.set_num_threads(torch_threads)
    torch.manual_seed(0)
    model, cfg, params = _model(1024)
    rng = np.random.default_rng(0)
    stops = tuple(range(VOCAB - VOCAB // 32, VOCAB))  # a row ends w.p. ~1/32 per token (near-uniform logits)

    def batch(prompts: int, samples: int, length: int):
        ids = rng.integers(0, VOCAB - len(stops), size=(prompts, length)).astype(np.int32)
        tokens = np.repeat(ids, samples, axis=0)
        pids = np.repeat(np.arange(prompts, dtype=np.int32), samples)
        sids = np.tile(np.arange(samples, dtype=np.int32), prompts)
        return tokens, np.ones(tokens.shape, bool), pids, sids

    def run(engine, sampling, inputs, seed):
        tokens, mask, pids, sids = inputs
        out = jax.block_until_ready(generate(params, cfg, sampling, tokens, mask, jax.random.key(seed), pids,
                                             sids, engine=engine))
        return jax.device_get(out)

    def compare(name, cases):
        """cases: label -> (engine, sampling, inputs). Warm-up, then `repeats` interleaved rounds."""
        outs, times = {}, {label: [] for label in cases}
        for label, (engine, sampling, inputs) in cases.items():
            outs[label] = run(engine, sampling, inputs, 0)
        for _ in range(repeats):
            for label, (engine, sampling, inputs) in cases.items():
                start = time.perf_counter()
                run(engine, sampling, inputs, 0)
                times[label].append(time.perf_counter() - start)
        result = {}
        for label in cases:
            seconds = statistics.median(times[label])
            useful = int(outs[label].mask_BxN.sum())
            result[label] = (seconds, useful / seconds, outs[label])
            lengths = outs[label].lengths_B
            print(f"  {name:8s} {label:24s} {seconds:7.2f} s  {useful / seconds:9.0f} useful tok/s  "
                  f"(tokens {useful}, mean length {lengths.mean():.1f}, longest {lengths.max()})")
        return result

    print(f"model: Qwen2 shape, {LAYERS} layers, hidden {HIDDEN}, vocab {VOCAB}, {HEADS}/{KV_HEADS} heads, "
          f"{cfg.dtype}; jax {jax.__version__} ({jax.default_backend()}); median of {repeats}, interleaved")
    # skewed lengths
    skewed = SamplingConfig(max_new_tokens=256, temperature=1.0, stop_tokens=stops, pad_token=0)
    capped = SamplingConfig(max_new_tokens=256, temperature=1.0)
    inputs = batch(4, 8, 16)
    r = compare("skewed", {"static, all rows to cap": ("static", capped, inputs),
                           "static, stop set": ("static", skewed, inputs),
                           "cascade, stop set": ("cascade", skewed, inputs)})
    same = np.array_equal(r["static, stop set"][2].tokens_BxN, r["cascade, stop set"][2].tokens_BxN)
    cap_rate = r["static, all rows to cap"][1]
    print(f"  skewed: useful tok/s / all-rows-to-cap tok/s: static {r['static, stop set'][1] / cap_rate:.2f}x, "
          f"cascade {r['cascade, stop set'][1] / cap_rate:.2f}x (target >= 0.7); tokens equal: {same}")
    # long shared prompts
    short = SamplingConfig(max_new_tokens=16, temperature=1.0)
    grouped, distinct = batch(4, 8, 512), batch(32, 1, 512)
    r = compare("shared", {"static, 4 x 8 grouped": ("static", short, grouped),
                           "static, 32 distinct": ("static", short, distinct),
                           "cascade, 4 x 8 grouped": ("cascade", short, grouped),
                           "cascade, 32 distinct": ("cascade", short, distinct)})
    same = np.array_equal(r["static, 4 x 8 grouped"][2].tokens_BxN, r["cascade, 4 x 8 grouped"][2].tokens_BxN)
    print(f"  shared: distinct time / grouped time: static {r['static, 32 distinct'][0] / r['static, 4 x 8 grouped'][0]:.2f}x, "
          f"cascade {r['cascade, 32 distinct'][0] / r['cascade, 4 x 8 grouped'][0]:.2f}x (target >= 1.5); "
          f"tokens equal: {same}")
    grouped_kv, distinct_kv = rollout_kv_bytes(cfg, 4, 8, 512, 16), rollout_kv_bytes(cfg, 32, 1, 512, 16)
    for engine in ("static", "cascade"):
        print(f"  shared: {engine} KV cache {grouped_kv[engine] / 2**20:.1f} MiB grouped, "
              f"{distinct_kv[engine] / 2**20:.1f} MiB distinct (`catsim llm plan`'s rollout_kv_bytes)")
    # uniform lengths, transformers as a column
    inputs = batch(32, 1, 16)
    r = compare("uniform", {"static": ("static", capped, inputs), "cascade": ("cascade", capped, inputs)})
    prompts = torch.tensor(inputs[0].astype(np.int64))

    def run_hf():
        with torch.no_grad():
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                           temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=256, min_new_tokens=256,
                           use_cache=True, eos_token_id=None, pad_token_id=0)

    run_hf()
    hf_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_hf()
        hf_times.append(time.perf_counter() - start)
    hf_rate = 32 * 256 / statistics.median(hf_times)
    same = np.array_equal(r["static"][2].tokens_BxN, r["cascade"][2].tokens_BxN)
    print(f"  uniform  {'transformers generate':24s} {statistics.median(hf_times):7.2f} s  {hf_rate:9.0f} useful tok/s "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"  uniform: cascade / static tok/s {r['cascade'][1] / r['static'][1]:.2f}x (target >= 0.95), "
          f"cascade / transformers {r['cascade'][1] / hf_rate:.2f}x; tokens equal: {same}")
