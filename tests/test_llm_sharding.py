"""catsim.llm.model.sharding: on 8 host CPU devices (mesh data=2 x fsdp=4) the sharded forward pass and
sampling agree with a single device. Runs in a subprocess because the device count is fixed when
JAX starts."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from catsim.llm.model.config import ModelConfig
    from catsim.llm.model.transformer import forward, init_params
    from catsim.llm.rollout import SamplingConfig, generate, left_pad
    from catsim.llm.model.sharding import (activation_sharding, make_mesh, param_specs, shard_batch,
                                     shard_params)
    from catsim.llm.model.checkpoint import load_model, save_model

    assert jax.device_count() == 8, jax.devices()
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, architecture="Qwen2ForCausalLM", qkv_bias=True)
    params = init_params(cfg, jax.random.key(0), init_std=0.3)
    tokens = jax.random.randint(jax.random.key(1), (8, 12), 0, 64)
    single = jax.device_put(params, jax.devices()[0])
    ref = forward(single, cfg, jax.device_put(tokens, jax.devices()[0]))

    mesh = make_mesh(data=2, fsdp=4)
    specs = param_specs(cfg, mesh)
    assert specs["embed"] == jax.sharding.PartitionSpec("fsdp", None), specs["embed"]
    assert specs["layers"]["w_gate"] == jax.sharding.PartitionSpec(None, None, "fsdp")
    sharded = shard_params(params, cfg, mesh)
    assert len(sharded["embed"].sharding.device_set) == 8
    assert sharded["embed"].addressable_shards[0].data.shape == (16, 32)  # V=64 split over fsdp=4
    act = activation_sharding(mesh)
    out = forward(sharded, cfg, shard_batch(tokens, mesh), activation_sharding=act)
    assert out.sharding.spec[0] == ("data", "fsdp"), out.sharding
    err = float(np.abs(np.asarray(out) - np.asarray(ref)).max())
    assert err <= 1e-5, err

    # Loading straight into the mesh gives the same sharded parameters, and each distinct slice is
    # read from the files once: every parameter element exactly once in total (the "data" replicas
    # share a read), no read larger than one device's quarter of the embedding.
    import tempfile
    import catsim.llm.model.checkpoint as ckpt
    real_st = ckpt._safetensors()
    reads = []

    class Slice:
        def __init__(self, view): self.view = view
        def __getattr__(self, name): return getattr(self.view, name)
        def __getitem__(self, index):
            out = self.view[index]
            reads.append(out.size)
            return out

    class Handle:
        def __init__(self, handle): self.handle = handle
        def __enter__(self): self.handle.__enter__(); return self
        def __exit__(self, *exc): return self.handle.__exit__(*exc)
        def keys(self): return self.handle.keys()
        def get_slice(self, name): return Slice(self.handle.get_slice(name))

    class CountingSafetensors:
        numpy = real_st.numpy
        @staticmethod
        def safe_open(*args, **kwargs): return Handle(real_st.safe_open(*args, **kwargs))

    class File:  # counts the rows read straight from the file (no transpose, same dtype)
        def __init__(self, f): self.f = f
        def __enter__(self): self.f.__enter__(); return self
        def __exit__(self, *exc): return self.f.__exit__(*exc)
        def __getattr__(self, name): return getattr(self.f, name)
        def readinto(self, buf):
            n = self.f.readinto(buf)
            reads.append(n // 4)  # float32 elements
            return n

    real_open = open
    with tempfile.TemporaryDirectory() as d:
        save_model(d, cfg, params, max_shard_size=20_000)  # several files and an index
        ckpt._safetensors = lambda: CountingSafetensors
        ckpt.open = lambda *a, **k: File(real_open(*a, **k))
        _, loaded = load_model(d, mesh=mesh)
        ckpt._safetensors = lambda: real_st
        del ckpt.open
    assert loaded["layers"]["wq"].sharding == sharded["layers"]["wq"].sharding
    for got, want in zip(jax.tree.leaves(loaded), jax.tree.leaves(params)):
        assert np.array_equal(np.asarray(got), np.asarray(want))
    assert sum(reads) == sum(x.size for x in jax.tree.leaves(params)), (sum(reads), len(reads))
    assert max(reads) <= params["embed"].size // 4, max(reads)

    # Sampling: same tokens on 8 devices as on 1 (randomness keyed by prompt id and sample index).
    sampling = SamplingConfig(max_new_tokens=8, temperature=1.0, top_p=0.9)
    prompts, mask = left_pad([[5, 6, 7], [8, 9], [10, 11, 12, 13]] * 2 + [[14], [15, 16]])
    pids, sids = jnp.arange(8) // 2, jnp.arange(8) % 2
    key = jax.random.key(7)
    one = generate(single, cfg, sampling, prompts, mask, key, pids, sids)
    many = generate(sharded, cfg, sampling, *shard_batch((prompts, mask), mesh), key,
                    *shard_batch((pids, sids), mesh), activation_sharding=act)
    assert np.array_equal(np.asarray(one.tokens_BxN), np.asarray(many.tokens_BxN))
    assert np.abs(np.asarray(one.logprobs_BxN) - np.asarray(many.logprobs_BxN)).max() <= 1e-5
    print("SHARDING-OK", err)
""")


def test_sharded_forward_and_sampling_match_single_device():
    root = Path(__file__).resolve().parents[1]
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SHARDING-OK" in proc.stdout
