"""Where a simulator step's time goes: catsim's parts against the straightforward loop's.

For each N, on the paper scenario's policy after `--trained-steps` steps of catsim training at
that N (the policy a Fig. 2 cell spends most of its steps on; 0 = the initial policy), it times
each part of one step for 8 runs vmapped on one device, in microseconds per run:

  * the draw of a group, as each side does it: catsim's `sampler.sample_draws` (blocked up to
    N = 2048, else the two-level CDF, the unrolled Threefry uniforms and the tree search) against
    `jnp.cumsum` + `jax.random.uniform` + `jnp.searchsorted` (`jax_loop_baseline.py`), with the
    ratio; for N > 2048 also each of the three parts against its counterpart;
  * the parts both sides pay alike: the scatter of the draws into counts, the softmax over V and
    one `optax.adam` update over V.

    PYTHONPATH=. python benchmarks/bench_sim_parts.py                      # N = 8, 1024, 4096, 65536, 131072
    PYTHONPATH=. python benchmarks/bench_sim_parts.py --n 4096 --trained-steps 0 --repeat 7

Wall clock of compiled programs (compilation excluded), best of `--repeat` rounds of `--calls`
calls; on a shared machine read the ratios. The whole-step comparison, start-up included, is
`bench_vs_jax_loop.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import jax
import jax.numpy as jnp
import optax

from catsim.sim import engine, sampler, threefry
from catsim.sim.config import scenario

RUNS = 8


def _timer(calls: int, repeat: int):
    def time_us(fn, *args) -> float:
        jax.block_until_ready(fn(*args))  # compile
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(calls):
                out = fn(*args)
            jax.block_until_ready(out)
            best = min(best, (time.perf_counter() - t0) / calls)
        return best / RUNS * 1e6

    return time_us


def trained_policy(n: int, steps: int) -> jax.Array:
    """[RUNS, V] probabilities: the paper policy after `steps` catsim steps at group size n
    (γ ∈ {0, 1} × 4 seeds), or the initial policy when steps = 0."""
    base = dataclasses.replace(scenario("paper"), group_size=n, steps=max(steps, 1),
                               log_every=max(steps, 1))
    consts = engine.make_constants(base)
    if steps == 0:
        return jnp.broadcast_to(jax.nn.softmax(consts.z0), (RUNS, consts.z0.shape[0]))
    keys = engine.run_keys([s % 4 for s in range(RUNS)])
    gamma = jnp.asarray([0.0] * 4 + [1.0] * 4, jnp.float32)
    lr = jnp.full((RUNS,), base.update.learning_rate, jnp.float32)
    z = engine.make_batched_run(base)(consts, keys, gamma, lr).final_logits
    return jax.nn.softmax(z, axis=-1)


def loop_draw(key, p, n):
    cdf = jnp.cumsum(p)
    u = jax.random.uniform(key, (n,)) * cdf[-1]
    return jnp.minimum(jnp.searchsorted(cdf, u), p.shape[0] - 1)


def bench(n: int, steps: int, time_us) -> list[tuple[str, float, float | None]]:
    p = trained_policy(n, steps)
    keys = jax.vmap(jax.random.fold_in)(engine.run_keys(range(RUNS)), jnp.arange(RUNS) + 12345)
    ours = jax.jit(jax.vmap(lambda k, p: sampler.sample_draws(k, p, n)[0]))
    theirs = jax.jit(jax.vmap(lambda k, p: loop_draw(k, p, n)))
    rows = [(f"draw a group of N = {n}", time_us(ours, keys, p), time_us(theirs, keys, p))]
    if sampler.choose_sampler("auto", n) == "inverse_cdf":
        cdf = jax.jit(jax.vmap(sampler.two_level_cdf))(p)
        u = jax.jit(jax.vmap(lambda k: threefry.uniform(k, n, jnp.float32)))(keys) * cdf[:, -1:]
        rows += [
            ("  CDF over V (two-level | cumsum)", time_us(jax.jit(jax.vmap(sampler.two_level_cdf)), p),
             time_us(jax.jit(jax.vmap(jnp.cumsum)), p)),
            ("  uniforms (unrolled | jax.random)",
             time_us(jax.jit(jax.vmap(lambda k: threefry.uniform(k, n, jnp.float32))), keys),
             time_us(jax.jit(jax.vmap(lambda k: jax.random.uniform(k, (n,)))), keys)),
            ("  search (inverse_cdf_search | searchsorted)",
             time_us(jax.jit(jax.vmap(sampler.inverse_cdf_search)), cdf, u),
             time_us(jax.jit(jax.vmap(jnp.searchsorted)), cdf, u)),
        ]
    actions = ours(keys, p)
    tx = optax.adam(1e-2)
    z = jnp.log(p)
    opt_state = jax.vmap(tx.init)(z)
    adam = jax.vmap(lambda z, s: optax.apply_updates(z, tx.update(z - z.mean(), s, z)[0]))
    rows += [
        ("  both: scatter of the draws", time_us(jax.jit(jax.vmap(
            lambda a: jnp.zeros(p.shape[1]).at[a].add(1.0))), actions), None),
        ("  both: softmax over V", time_us(jax.jit(jax.vmap(jax.nn.softmax)), z), None),
        ("  both: Adam update over V", time_us(jax.jit(adam), z, opt_state), None),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="8,1024,4096,65536,131072", help="group sizes N")
    parser.add_argument("--trained-steps", type=int, default=300,
                        help="catsim steps before timing (0: the initial policy)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per timing (best kept)")
    parser.add_argument("--calls", type=int, default=20, help="calls per round")
    args = parser.parse_args()
    sizes = [int(x) for x in args.n.split(",")]
    if any(n < 1 for n in sizes) or args.trained_steps < 0 or args.repeat < 1 or args.calls < 1:
        parser.error("--n, --repeat and --calls must be >= 1, --trained-steps >= 0")
    time_us = _timer(args.calls, args.repeat)
    print(f"cpus {os.cpu_count()}, devices {jax.devices()[0].platform} × {len(jax.devices())}, "
          f"policy after {args.trained_steps} steps; µs per run ({RUNS} runs vmapped)")
    print(f"{'part':40s} {'catsim':>9s} {'loop':>9s} {'loop÷catsim':>11s}")
    for n in sizes:
        for name, ours, theirs in bench(n, args.trained_steps, time_us):
            other = "" if theirs is None else f"{theirs:9.1f} {theirs / ours:10.2f}x"
            print(f"{name:40s} {ours:9.1f} {other}", flush=True)


if __name__ == "__main__":
    main()
