"""The straightforward JAX program of the paper's simulator: the baseline catsim is timed against.

For each N, one `jax.jit(jax.vmap(run))` over the (γ, seed) pairs; `run` is a `lax.scan` over steps
of: softmax of the logits, `cumsum`, N uniforms scaled by the last cumulative value,
`searchsorted`, scatter-add into counts, k = correct draws, w = c·(R − (2k − N)/N), gradient
(w − Σw·p)/N·(1 − k/N)^γ, an `optax.adam(1e-2)` update. Only the final Qpos and Mret are kept.
Same policy as catsim's `paper` scenario (V = 128,000, C = 10,000, logits 5 / 3 / 0).

    python benchmarks/jax_loop_baseline.py --n 8,1024 --steps 1000      # one JSON line per run
    python benchmarks/jax_loop_baseline.py --full-grid                  # N = 2 … 131072

It prints one JSON object per (N, γ, seed) with `qpos` and `mret`, like
`catsim simulate --format json`. No catsim import: it is what a user would write from scratch.
"""

from __future__ import annotations

import argparse
import json

V, C = 128_000, 10_000
FULL_GRID = tuple(2**k for k in range(1, 18))


def make_run(n: int, steps: int):
    import jax
    import jax.numpy as jnp
    import optax

    correct = jnp.arange(V) < C
    z0 = jnp.where(correct, 3.0, 0.0).at[0].set(5.0)
    p0 = jax.nn.softmax(z0)
    tx = optax.adam(1e-2)

    def run(key, gamma):
        def step(carry, t):
            z, opt_state = carry
            p = jax.nn.softmax(z)
            cdf = jnp.cumsum(p)
            u = jax.random.uniform(jax.random.fold_in(key, t), (n,)) * cdf[-1]
            idx = jnp.minimum(jnp.searchsorted(cdf, u), V - 1)
            c = jnp.zeros(V).at[idx].add(1.0)
            k = jnp.sum(jnp.where(correct, c, 0.0))
            r = jnp.where(correct, 1.0, -1.0)
            w = c * (r - (2 * k - n) / n)
            # ascent on (1/N)·Σ_j w_j log p(o_j)·g: descend its negative
            grad = -(w - jnp.sum(w) * p) / n * (1 - k / n) ** gamma
            updates, opt_state = tx.update(grad, opt_state, z)
            return (optax.apply_updates(z, updates), opt_state), None

        (z, _), _ = jax.lax.scan(step, (z0, tx.init(z0)), jnp.arange(steps))
        p = jax.nn.softmax(z)
        qpos = jnp.sum(jnp.where(correct, p, 0.0))
        mret = 1 - jnp.sum(jnp.where(correct, jnp.maximum(p0 - p, 0.0), 0.0)) / jnp.sum(
            jnp.where(correct, p0, 0.0))
        return qpos, mret

    return jax.jit(jax.vmap(run))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="8", help="group sizes, comma-separated")
    parser.add_argument("--full-grid", action="store_true", help="N = 2, 4, …, 131072")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--gammas", default="0,1")
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    sizes = FULL_GRID if args.full_grid else tuple(int(x) for x in args.n.split(","))
    pairs = [(float(g), s) for g in args.gammas.split(",") for s in range(args.seeds)]
    keys = jnp.stack([jax.random.key(s) for _, s in pairs])
    gammas = jnp.asarray([g for g, _ in pairs], jnp.float32)
    for n in sizes:
        qpos, mret = jax.device_get(make_run(n, args.steps)(keys, gammas))
        for (g, s), q, m in zip(pairs, qpos, mret):
            print(json.dumps({"n": n, "gamma": g, "seed": s, "steps": args.steps,
                              "qpos": float(q), "mret": float(m)}), flush=True)


if __name__ == "__main__":
    main()
