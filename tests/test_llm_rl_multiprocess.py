"""RL under `jax.distributed` with 2 processes × 2 host CPU devices (a 2 × 2 data × FSDP mesh) = the
same run in this single process on one device (same seed, same global batch).

The two workers find each other through a coordinator on a free localhost port (CPU collectives
across processes: gloo, JAX's default). They run step 1, stop (each process writes its shards of
the training state, an orbax checkpoint), then a second `run_rl` call resumes from it on both
processes (each reading its own slices) and runs step 2. The
reference runs both steps in one call. Required: identical rewards and active shares in both
steps; loss / gradient norm / entropy / KL / clip shares within rtol 1e-5 in step 1 (all measured
before the first update; sharding sums in another order) and 1e-3 in step 2; final parameters
where fewer than 2% of entries differ by more than 1e-3 of the largest parameter move (Adam turns
rounding of near-zero gradients into steps of up to lr; the tolerances of test_llm_rl_sharded.py,
sharded = unsharded in one process). The multi-process log has each step once (process 0 writes).
"""

from __future__ import annotations

import textwrap

import numpy as np
from multiprocess_harness import launch_pair, wait_all

WORKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    pid, port, root = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    import jax
    jax.distributed.initialize(coordinator_address=f"localhost:{{port}}", num_processes=2, process_id=pid,
                               initialization_timeout=120)
    assert jax.device_count() == 4 and jax.process_count() == 2, (jax.devices(), jax.process_count())
    from llm_rl_helpers import ToyTask
    from catsim.llm import rl
    from catsim.llm.model.sharding import make_mesh

    mesh = make_mesh(data=2, fsdp=2)
    cfg = rl.RLConfig.from_flat(**{cfg!r})
    out = root / "multi"
    # step 1 and stop (both write their shards of the state); then both resume from it for step 2
    first = rl.run_rl(root / "base", out, cfg, task=ToyTask(), progress=False, mesh=mesh, stop_after=1)
    assert first.steps_done == 1 and not first.finished, first
    result = rl.run_rl(root / "base", out, cfg, task=ToyTask(), progress=False, mesh=mesh)
    assert result.finished and result.steps_done == 2, result
    print("WORKER-OK", pid, flush=True)
""")


CFG = dict(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=3, learning_rate=1e-3, gamma=0.5,
           score_truncated=True, kl_coef=0.01)  # one update per step: step 1's metrics all precede it


def test_two_processes_equal_one_process(tmp_path):
    from llm_rl_helpers import ToyTask, make_base_model

    from catsim.llm import rl
    from catsim.llm.model.checkpoint import load_model

    make_base_model(tmp_path / "base", init_std=0.3)
    procs = launch_pair(WORKER.format(cfg=CFG), tmp_path)
    try:  # the reference, here, while the workers start
        rl.run_rl(tmp_path / "base", tmp_path / "single", rl.RLConfig.from_flat(**CFG), task=ToyTask(), progress=False)
    finally:
        wait_all(procs, tmp_path)

    # the training state: orbax checkpoints of both saved steps, each process's shards written by it
    state = tmp_path / "multi" / rl.STATE_FILE
    assert sorted(p.name for p in state.iterdir() if p.name.isdigit()) == ["1", "2"]
    for pid in (0, 1):
        assert any((state / "2" / "state" / f"ocdbt.process_{pid}").rglob("*")), pid
    one, two = rl.read_log(tmp_path / "single"), rl.read_log(tmp_path / "multi")
    assert [r["step"] for r in two] == [1, 2], "the multi-process log must hold each step once"
    for a, b in zip(one, two):
        for key in ("reward", "active_fraction", "response_length", "mean_g", "success_rate"):
            assert a[key] == b[key], (a["step"], key, a[key], b[key])
        # step 1: before any update; step 2: after one Adam step whose near-zero-gradient entries may
        # differ by up to 2·lr (rounding of another reduction order), hence the looser tolerance
        rtol = 1e-5 if a["step"] == 1 else 1e-3
        for key in ("loss", "grad_norm", "entropy", "kl", "clip_low_frac", "clip_high_frac"):
            np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=1e-7, err_msg=f"step {a['step']} {key}")
    flat = [np.concatenate([np.ravel(x) for x in jax_leaves(load_model(d)[1])])
            for d in (tmp_path / "base", tmp_path / "single" / "model", tmp_path / "multi" / "model")]
    p0, pa, pb = flat
    moved = float(np.max(np.abs(pa - p0)))
    off = float(np.mean(np.abs(pa - pb) > 1e-3 * moved))
    assert moved > 1e-3 and off < 0.02, (off, moved)


def jax_leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_process_layout_options_need_distributed(tmp_path, capsys):
    from catsim.cli.main import main

    code = main(["llm", "rl", "--base", str(tmp_path), "--out", str(tmp_path / "o"), "--coordinator", "localhost:1"])
    assert code == 2
    assert "need --distributed" in capsys.readouterr().err
