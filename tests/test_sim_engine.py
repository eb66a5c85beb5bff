"""Engine: metrics vs a direct NumPy computation, jit = eager, bit-reproducibility, chunking,
the paper's initial policy at full size, and clear errors for bad configurations."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.sim import config as C
from catsim.sim import engine, metrics, policy

SMALL = C.SimConfig(policy=C.PolicyConfig(num_actions=300, num_correct=40), group_size=16,
                    steps=6, log_every=3)


def test_state_metrics_match_numpy():
    rng = np.random.default_rng(0)
    v = 500
    correct = np.arange(v) < 60
    p0 = rng.dirichlet(np.ones(v))
    p = rng.dirichlet(np.ones(v))
    m = jax.jit(metrics.state_metrics)(jnp.log(jnp.asarray(p, jnp.float32)),
                                       jnp.asarray(p0, jnp.float32), jnp.asarray(correct))
    qpos = p[correct].sum()
    mret = 1 - np.maximum(p0 - p, 0)[correct].sum() / p0[correct].sum()  # eq. 26
    assert float(m["qpos"]) == pytest.approx(qpos, rel=1e-5)
    assert float(m["mret"]) == pytest.approx(mret, rel=1e-5)
    assert float(m["share_rose"]) == pytest.approx((p > p0)[correct].mean(), abs=1e-6)
    assert float(m["worst_drop"]) == pytest.approx((p0 - p)[correct].max(), rel=1e-4)
    assert float(m["entropy"]) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-5)
    assert float(m["anchor_prob"]) == pytest.approx(p[0], rel=1e-5)
    counts = np.zeros(v)
    counts[[0, 3, 70]] = [2, 1, 1]
    qu = metrics.unsampled_correct_mass(jnp.asarray(p, jnp.float32), jnp.asarray(counts),
                                        jnp.asarray(correct))
    assert float(qu) == pytest.approx(p[correct].sum() - p[0] - p[3], rel=1e-5)


def test_paper_initial_policy_full_size():
    """App. J: Qpos ≈ 0.63, p_anchor ≈ 4.7e-4, other correct ≈ 6.3e-5 at V = 128,000."""
    pol = C.PolicyConfig()
    p = policy.initial_probs(pol)
    z = (np.exp(5.0) + 9999 * np.exp(3.0) + 118000)
    assert p[0] == pytest.approx(np.exp(5) / z, rel=1e-12)
    assert p[:10000].sum() == pytest.approx((np.exp(5) + 9999 * np.exp(3)) / z, rel=1e-12)
    assert p[:10000].sum() == pytest.approx(0.63, abs=0.005)
    assert p[0] == pytest.approx(4.7e-4, rel=0.02) and p[1] == pytest.approx(6.3e-5, rel=0.02)


def test_full_size_few_steps():
    """V = 128,000 and N = 131072 for 3 steps: metrics start at the paper's values and stay sane."""
    cfg = dataclasses.replace(C.scenario("paper"), group_size=131072, steps=3)
    traj = jax.jit(engine.make_run(cfg))(engine.make_constants(cfg), jax.random.key(0), 0.0, 1e-2)
    m = {k: np.asarray(v) for k, v in traj.metrics.items()}
    qpos0 = (np.exp(5) + 9999 * np.exp(3)) / (np.exp(5) + 9999 * np.exp(3) + 118000)
    assert m["qpos"][0] == pytest.approx(qpos0, rel=1e-5) and m["mret"][0] == 1.0
    assert m["qpos"][-1] > m["qpos"][0]  # a group of 131072 raises Qpos
    assert abs(m["mu_hat"][1] - m["qpos"][0]) < 0.01  # μ̂ of a huge group ≈ Qpos
    assert np.all(m["active"][1:] == 1.0) and np.all(np.isfinite(m["mret"]))


def test_other_initialisations():
    for init, extra in (("uniform", {}), ("gaussian", {"gaussian_std": 2.0}),
                        ("zipf", {"zipf_exponent": 1.1}), ("target_qpos", {"target_qpos": 0.2})):
        pol = C.PolicyConfig(num_actions=200, num_correct=20, init=init, **extra)
        p = policy.initial_probs(pol)
        assert p.shape == (200,) and abs(p.sum() - 1) < 1e-12
        if init == "uniform":
            assert p[:20].sum() == pytest.approx(0.1)
        if init == "target_qpos":
            assert p[:20].sum() == pytest.approx(0.2, rel=1e-6)


def _run_small(cfg=SMALL, seed=0):
    return jax.jit(engine.make_run(cfg))(engine.make_constants(cfg), jax.random.key(seed), 1.0, 0.05)


def test_jit_equals_eager_and_bit_reproducible():
    run = jax.jit(engine.make_run(SMALL))
    consts = engine.make_constants(SMALL)
    jitted = run(consts, jax.random.key(0), 1.0, 0.05)
    again = run(consts, jax.random.key(0), 1.0, 0.05)
    with jax.disable_jit():
        eager = engine.make_run(SMALL)(consts, jax.random.key(0), 1.0, 0.05)
    for name in metrics.ALL_METRICS:
        a, b = np.asarray(jitted.metrics[name]), np.asarray(again.metrics[name])
        np.testing.assert_array_equal(a, b)  # same seed, same bits
        np.testing.assert_allclose(np.asarray(eager.metrics[name]), a, rtol=2e-5, atol=1e-6)
    other = run(consts, jax.random.key(1), 1.0, 0.05)
    assert not np.array_equal(np.asarray(other.metrics["qpos"]), np.asarray(jitted.metrics["qpos"]))


def test_batched_and_chunked_equal_single_runs():
    consts = engine.make_constants(SMALL)
    keys = engine.run_keys([0, 3])
    gammas, lrs = jnp.array([0.0, 1.0]), jnp.array([0.05, 0.02])
    batched = engine.make_batched_run(SMALL)(consts, keys, gammas, lrs)
    init, chunk = engine.make_batched_chunked(SMALL, 1)
    state = init(consts, lrs)
    parts = []
    for c in range(2):
        state, recs = chunk(consts, state, keys, gammas, lrs, c)
        parts.append(recs)
    single = jax.jit(engine.make_run(SMALL))(consts, keys[1], gammas[1], lrs[1])
    for name in metrics.ALL_METRICS:
        b = np.asarray(batched.metrics[name])
        # Different compiled programs (one scan vs chunks) may fuse differently: float32 rounding.
        chunked = np.concatenate([np.asarray(p[name]) for p in parts], 1)
        np.testing.assert_allclose(b[:, 1:], chunked, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(b[1], np.asarray(single.metrics[name]), rtol=1e-6, atol=1e-7)


def test_dynamic_sampling_redraws_inactive_groups():
    pol = C.PolicyConfig(num_actions=50, num_correct=45, init="uniform")  # μ = 0.9: N=2 often all-correct
    base = C.SimConfig(policy=pol, group_size=2, steps=40)
    plain = _run_small(base)
    # P(active) ≈ 2μ(1−μ) ≥ 0.09 here, so 300 redraws fail with probability < 1e-12 per step.
    dyn = _run_small(dataclasses.replace(
        base, update=dataclasses.replace(base.update, dynamic_sampling=True, max_resamples=300)))
    assert np.asarray(plain.metrics["active"])[1:].mean() < 0.5
    assert np.all(np.asarray(dyn.metrics["active"])[1:] == 1.0)
    assert np.asarray(dyn.metrics["draws"])[1:].max() > 1


@pytest.mark.parametrize("make,match", [
    (lambda: C.PolicyConfig(num_actions=10, num_correct=10), "smaller than num_actions"),
    (lambda: C.PolicyConfig(num_actions=10, num_correct=0), "num_correct"),
    (lambda: C.SimConfig(group_size=0), "group_size"),
    (lambda: C.UpdateConfig(learning_rate=-1e-3), "learning_rate must be > 0"),
    (lambda: C.UpdateConfig(surrogate="ppo2"), "unknown update rule"),
    (lambda: C.UpdateConfig(optimizer="lion"), "unknown optimizer"),
    (lambda: C.SimConfig(steps=10, log_every=3), "multiple of log_every"),
    (lambda: C.scenario("paper2"), "unknown scenario"),
])
def test_bad_configurations_fail_clearly(make, match):
    with pytest.raises(CatsimError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


def test_shared_group_size_program_is_bit_identical():
    """One program for several N (engine.program_group_size) gives the per-N program's bits."""
    from catsim.sim import sweep

    base = dataclasses.replace(SMALL, steps=6, log_every=3)
    for n in (3, 16):
        cfg = dataclasses.replace(base, group_size=n)
        assert engine.program_group_size(cfg) == engine.SHARED_GROUP_SIZE_BOUNDS[0] > n
        shared = sweep.run_cell(cfg, (0.0, 1.0), (0, 5))
        keys = engine.run_keys([0, 5, 0, 5])
        gammas = jnp.array([0.0, 0.0, 1.0, 1.0])
        lrs = jnp.full(4, cfg.update.learning_rate)
        init, chunk = engine.make_batched_chunked(cfg, 2)  # the program compiled for this N
        _, recs = chunk(engine.make_constants(cfg), init(engine.make_constants(cfg), lrs), keys,
                        gammas, lrs, 0)
        for name in metrics.ALL_METRICS:
            np.testing.assert_array_equal(shared[name][:, :, 1:].reshape(4, -1),
                                          np.asarray(recs[name]))
    # A configuration that needs N statically keeps its own program.
    recompose = dataclasses.replace(base, update=C.UpdateConfig(asym_recompose=True))
    assert engine.program_group_size(recompose) == recompose.group_size
    assert engine.program_group_size(dataclasses.replace(base, group_size=16384)) == 16384


def test_shared_program_only_when_another_size_uses_it():
    """A single N runs its own program (no wasted draws); N values with a common bound share."""
    cfg = dataclasses.replace(SMALL, group_size=1024)
    assert engine.program_group_size(cfg) == 2048
    assert not engine.shares_program(cfg, [1024])
    assert not engine.shares_program(cfg, [1024, 8, 131072])
    assert engine.shares_program(cfg, [1024, 2048])
    assert engine.shares_program(dataclasses.replace(cfg, group_size=2048), [1024, 2048])
    assert not engine.shares_program(dataclasses.replace(cfg, group_size=16384), [16384, 32768])


def test_use_cpu_cores_before_and_after_jax_starts():
    """`use_cpu_cores` adds host devices before JAX starts and leaves a running JAX alone
    (a subprocess: the device count is fixed when JAX starts)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = ("from catsim.sim.engine import use_cpu_cores; "
              "print(use_cpu_cores(2), use_cpu_cores(3))")
    root = str(Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"PYTHONPATH": root}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2].strip() == "2 2"


def test_cli_simulate_records_only_what_it_prints(capsys, tmp_path):
    """`catsim simulate` without --save records only the final step: same final values as a run
    that records every step (different programs: float32 rounding at most)."""
    import json

    from catsim.cli.main import main

    args = ["simulate", "--num-actions", "200", "--num-correct", "20", "--steps", "12", "--group-size",
            "4", "--gamma", "0,1", "--seeds", "2", "--format", "json", "--no-shard"]

    def rows(extra):
        assert main(args + extra) == 0
        out = capsys.readouterr().out.strip().splitlines()
        return {(r["gamma"], r["seed"]): r for r in map(json.loads, out)}

    final_only, every_step = rows([]), rows(["--save", str(tmp_path / "all.npz")])
    assert C.SimConfig().log_every == 1 and len(final_only) == 4
    saved = np.load(tmp_path / "all.npz", allow_pickle=True)
    assert any(v.ndim and v.shape[-1] == 13 for v in saved.values())  # steps 0…12 recorded
    for key, row in final_only.items():
        for name in ("qpos", "mret", "entropy"):
            assert row[name] == pytest.approx(every_step[key][name], rel=1e-5, abs=1e-7)


def test_run_keys_equal_jax_random_key():
    """`run_keys` writes the Threefry key data of small seeds directly: the same keys (and so
    the same draws) as `jax.random.key(seed)`, on both sides of the direct path's limit."""
    seeds = [0, 1, 7, 12345, 2**31 - 1]
    want = np.stack([np.asarray(jax.random.key_data(jax.random.key(s))) for s in seeds])
    got = engine.run_keys(seeds)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got)), want)
    assert jax.random.key_impl(got) == jax.random.key_impl(jax.random.key(0))
    draws = jax.vmap(lambda k: jax.random.uniform(k, (3,)))
    np.testing.assert_array_equal(np.asarray(draws(got)),
                                  np.asarray(draws(jnp.stack([jax.random.key(s) for s in seeds]))))
    big = engine.run_keys([2**31])  # beyond the direct path: jax.random.key itself
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(big)),
                                  np.asarray(jax.random.key_data(jax.random.key(2**31)))[None])


def test_runs_one_by_one_where_each_device_has_about_one_core(monkeypatch):
    """The CPU default: one run after another when the runs are split over devices or the process
    has one core, one vmapped batch on one device with several cores; the flag overrides both.
    Either layout gives the batch's values to float32 rounding."""
    from catsim.sim import devices

    if jax.default_backend() != "cpu":
        pytest.skip("the CPU default")
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0, 1})
    assert devices.runs_one_by_one(object()) and not devices.runs_one_by_one(None)
    monkeypatch.setattr(devices.os, "sched_getaffinity", lambda pid: {0})
    assert devices.runs_one_by_one(None)
    monkeypatch.setattr(devices, "RUNS_ONE_BY_ONE", False)
    assert not devices.runs_one_by_one(object())

    def fn(shared, x, scale):  # a reduction per run, as the engine's softmax has
        return jnp.sum(jnp.exp(x * scale)) + shared, jax.nn.softmax(x * scale)

    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 5000)), jnp.float32)
    scale = jnp.asarray([0.5, 1.0, 2.0], jnp.float32)
    out = {}
    for one_by_one in (False, True):
        monkeypatch.setattr(devices, "RUNS_ONE_BY_ONE", one_by_one)
        out[one_by_one] = jax.jit(devices.over_runs(fn, (None, 0, 0)))(1.0, x, scale)
    for a, b in zip(out[False], out[True]):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)
