"""benchmarks/bench_sim_parts.py times catsim's parts of a simulator step against the loop's
counterparts: each timed pair computes the same draws, and a run produces every row."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from catsim.sim import engine, sampler, threefry

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_sim_parts.py"
spec = importlib.util.spec_from_file_location("bench_sim_parts", SCRIPT)
parts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(parts)

N = 4096


def _keys():
    return jax.vmap(jax.random.fold_in)(engine.run_keys(range(parts.RUNS)), jnp.arange(parts.RUNS))


def test_the_timed_draws_are_the_same_draws():
    p = parts.trained_policy(N, 0)
    keys = _keys()
    ours = jax.vmap(lambda k, p: sampler.sample_draws(k, p, N)[0])(keys, p)
    theirs = jax.vmap(lambda k, p: parts.loop_draw(k, p, N))(keys, p)
    # Same uniforms (threefry.uniform is bit-identical to jax.random.uniform); the two CDFs round
    # differently (float32 sums in another order), which shifts a draw among the many tiny
    # actions of equal mass by a few places, but not across the correct/incorrect boundary.
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert np.mean(ours == theirs) > 0.9
    assert np.max(np.abs(ours - theirs)) <= 64
    correct = 10_000
    np.testing.assert_array_equal((ours < correct).sum(1), (theirs < correct).sum(1))


def test_the_timed_searches_agree_on_one_cdf():
    p = parts.trained_policy(N, 0)
    cdf = jax.vmap(sampler.two_level_cdf)(p)
    u = jax.vmap(lambda k: threefry.uniform(k, N, jnp.float32))(_keys()) * cdf[:, -1:]
    ours = jax.vmap(sampler.inverse_cdf_search)(cdf, u)
    theirs = jax.vmap(lambda c, u: jnp.searchsorted(c, u, side="right"))(cdf, u)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_a_run_gives_every_part():
    rows = parts.bench(N, 0, parts._timer(calls=1, repeat=1))
    names = [name for name, _, _ in rows]
    assert names[0] == f"draw a group of N = {N}" and len(rows) == 7
    assert all(ours > 0 and (theirs is None or theirs > 0) for _, ours, theirs in rows)
