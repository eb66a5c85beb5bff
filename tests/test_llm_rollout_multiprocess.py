"""The cascade rollout engine under `jax.distributed` with 2 processes × 1 host CPU device = the same
rollout in this single process.

Rows are independent, so each process decodes the rows of the batch's shards on its own device
(`rollout.cascade.generate_cascade_per_process`) with the weights gathered from their FSDP shards
(the mesh's "fsdp" axis spans both processes); the result is a global array sharded like the batch,
which `to_host` all-gathers. The batch is 3 prompts × 4 samples, so one prompt's rows are split
between the processes (each process sees another grid than the one-process run), sampled with a
stop token (rows end early: the grids are compacted) and greedily. Required: every process holds
every row; tokens, masks, lengths and finished flags identical to the one-process run; log-probs
within 1e-5 (float32 rounding of other grid shapes); each process decoded its 6 rows with the
cascade engine, never the static one. About 30 s on the shared 2-core machine.
"""

from __future__ import annotations

import textwrap

import numpy as np
from multiprocess_harness import free_port, launch, wait_all

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    pid, port, root = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    import jax
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=pid,
                               initialization_timeout=120)
    assert jax.device_count() == 2 and jax.process_count() == 2, (jax.devices(), jax.process_count())
    import numpy as np
    from catsim.llm.model.sharding import make_mesh, shard_batch, shard_params, to_host
    from catsim.llm.rollout import cascade, engines, generate
    from test_llm_rollout_multiprocess import CFG, KEY_SEED, SAMPLINGS, inputs, params

    decoded = []
    run_local = cascade.generate_cascade

    def counted(params, cfg, sampling, prompt_BxP, *args, **kwargs):
        decoded.append(prompt_BxP.shape[0])
        return run_local(params, cfg, sampling, prompt_BxP, *args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("the static engine ran")

    cascade.generate_cascade, engines.generate_static = counted, refused
    mesh = make_mesh()  # fsdp = 2: each process holds half of the weights
    sharded = shard_params(params(), CFG, mesh)
    out = {}
    tokens, mask, prompt_ids, sample_ids = shard_batch(inputs(), mesh)  # 6 rows on each process
    for name, sampling in SAMPLINGS.items():
        rollout = generate(sharded, CFG, sampling, tokens, mask, jax.random.key(KEY_SEED), prompt_ids, sample_ids)
        for field, value in to_host(rollout)._asdict().items():
            out[f"{name}-{field}"] = value
    assert decoded == [6] * len(SAMPLINGS), decoded
    np.savez(root / f"rollout-{pid}.npz", **out)
    print("WORKER-OK", pid, flush=True)
""")


def _model():
    from catsim.llm.model.config import ModelConfig

    return ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=8, architecture="Qwen3ForCausalLM", qk_norm=True)


def _samplings():
    from catsim.llm.sampling import SamplingConfig

    return {"sampled": SamplingConfig(max_new_tokens=24, temperature=1.0, top_p=0.95, stop_tokens=(3,), pad_token=1),
            "greedy": SamplingConfig(max_new_tokens=8, temperature=0.0)}


CFG, SAMPLINGS, KEY_SEED = _model(), _samplings(), 42
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]


def params():
    import jax

    from catsim.llm.model.transformer import init_params

    return init_params(CFG, jax.random.key(0), init_std=0.3)


def inputs() -> tuple[np.ndarray, ...]:
    """3 prompts × 4 samples, rows prompt-major: (tokens, mask, prompt ids, sample ids)."""
    from catsim.llm.rollout import left_pad

    rows = [(p, s) for p in range(3) for s in range(4)]
    tokens, mask = left_pad([PROMPTS[p] for p, _ in rows])
    return (np.asarray(tokens), np.asarray(mask), np.asarray([p for p, _ in rows], np.int32),
            np.asarray([s for _, s in rows], np.int32))


def test_cascade_engine_on_two_processes_equals_one_process(tmp_path):
    import jax

    from catsim.llm.rollout import generate

    port = free_port()
    procs = {pid: launch(WORKER, tmp_path, pid, port, devices=1) for pid in (0, 1)}
    try:  # the reference, here, while the workers start
        one = {name: jax.device_get(generate(params(), CFG, sampling, *inputs()[:2], jax.random.key(KEY_SEED),
                                             *inputs()[2:], engine="cascade"))
               for name, sampling in SAMPLINGS.items()}
    finally:
        wait_all(procs, tmp_path, timeout=300)
    for pid in (0, 1):  # every process holds every row
        two = np.load(tmp_path / f"rollout-{pid}.npz")
        for name, ref in one.items():
            for field in ("tokens_BxN", "mask_BxN", "lengths_B", "finished_B"):
                np.testing.assert_array_equal(two[f"{name}-{field}"], getattr(ref, field), err_msg=f"{pid} {name} {field}")
            for field in ("logprobs_BxN", "model_logprobs_BxN"):
                np.testing.assert_allclose(two[f"{name}-{field}"], getattr(ref, field), atol=1e-5, rtol=0,
                                           err_msg=f"{pid} {name} {field}")
    lengths = one["sampled"].lengths_B  # rows ended early and at different steps: grids were compacted
    assert one["sampled"].finished_B.sum() >= 6 and lengths.min() < 12 and lengths.max() > 16, lengths
