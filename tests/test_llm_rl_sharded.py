"""Sharded RL = unsharded RL on 8 host CPU devices (data 2 × fsdp 4): one RL step gives the same
rollouts and rewards and the same loss, gradient norm, entropy and KL (float32 rounding of another
reduction order, rtol 1e-5); the mini-batch gradient on a fixed batch agrees to 1e-5 of its
largest entry; after the update, fewer than 2% of parameter entries differ by more than 1e-3 of the
step (Adam's first step lr·g/(|g| + eps) turns rounding of a near-zero gradient into up to lr). Runs in a subprocess: the device count is fixed when JAX starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys
    import jax
    import jax.numpy as jnp
    import numpy as np
    sys.path.insert(0, {tests!r})
    from llm_rl_helpers import ToyTask, make_base_model
    from catsim.llm import rl
    from catsim.llm.rl import step as rl_step
    from catsim.llm.model.checkpoint import load_model
    from catsim.llm.model.sharding import activation_sharding, make_mesh, shard_batch, shard_params
    from pathlib import Path

    assert len(jax.devices()) == 8, jax.devices()
    root = Path({root!r})
    make_base_model(root / "base", init_std=0.3)
    mesh = make_mesh(data=2, fsdp=4)
    cfg = rl.RLConfig.from_flat(steps=1, prompts_per_step=4, group_size=4, max_new_tokens=3, learning_rate=3e-2,
                      gamma=0.5, score_truncated=True, kl_coef=0.01)
    rl.run_rl(root / "base", root / "one", cfg, task=ToyTask(), progress=False)
    rl.run_rl(root / "base", root / "eight", cfg, task=ToyTask(), progress=False, mesh=mesh)
    a, b = rl.read_log(root / "one")[0], rl.read_log(root / "eight")[0]
    for key in ("reward", "active_fraction", "response_length", "mean_g"):
        assert a[key] == b[key], (key, a[key], b[key])
    for key in ("loss", "grad_norm", "entropy", "kl"):  # one update: all measured before it
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-7, err_msg=key)

    # the mini-batch gradient itself, sharded vs one device, on a fixed batch
    model_cfg, params = load_model(root / "base")
    rng = np.random.default_rng(0)
    t = 9
    batch = {{"tokens": rng.integers(4, 7, (16, t)).astype(np.int32), "real": np.ones((16, t), bool),
             "loss_mask": (rng.random((16, t - 1)) < 0.7).astype(np.float32),
             "adv": rng.normal(size=(16, t - 1)).astype(np.float32)}}
    batch["old_logp"] = np.full((16, t - 1), -1.1, np.float32)
    batch["ref_logp"] = np.full((16, t - 1), -1.2, np.float32)
    g1, m1 = rl_step.make_functions(model_cfg, cfg).grads(params, jax.tree.map(jnp.asarray, batch))
    fns = rl_step.make_functions(model_cfg, cfg, activation_sharding(mesh))
    g8, m8 = fns.grads(shard_params(params, model_cfg, mesh), shard_batch(batch, mesh))
    scale = max(float(np.max(np.abs(x))) for x in jax.tree.leaves(g1))
    worst = max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in
                zip(jax.tree.leaves(g1), jax.tree.leaves(g8)))
    assert scale > 1e-3 and worst < 1e-5 * scale, (worst, scale)
    np.testing.assert_allclose(m1["loss"], m8["loss"], rtol=1e-6)

    # parameters after the update: Adam's first step is lr·g/(|g| + eps) per entry, so entries whose
    # gradient is near 0 amplify rounding up to lr; all others must agree, i.e. almost every entry
    pa = np.concatenate([np.ravel(x) for x in jax.tree.leaves(load_model(root / "one" / "model")[1])])
    pb = np.concatenate([np.ravel(x) for x in jax.tree.leaves(load_model(root / "eight" / "model")[1])])
    p0 = np.concatenate([np.ravel(x) for x in jax.tree.leaves(params)])
    moved = float(np.max(np.abs(pa - p0)))
    off = float(np.mean(np.abs(pa - pb) > 1e-3 * moved))
    assert moved > 1e-2 and off < 0.02, (off, moved)
    print("OK", worst / scale, off, moved)
""")


def test_sharded_equals_unsharded(tmp_path):
    tests = str(Path(__file__).parent)
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(Path(tests).parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=tests, root=str(tmp_path))], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "OK" in proc.stdout
