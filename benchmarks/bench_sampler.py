"""CPU time of the simulator's large-N group sampler: bisection vs the tree search.

For each N and policy: 8 runs vmapped (as the engine runs a cell), V = 128,000, `sample_counts`
with the inverse-CDF sampler searching by bisection (`search_right`, the baseline) and by the
tree search (`tree_search`, the default for N > 2048), plus the search alone on the same
(non-decreasing) CDF and uniforms. Prints process CPU ms per run (best of --repeat; CPU time,
since the machine may be shared), the ratio bisection ÷ tree, and checks that both searches
return identical indices. `--policies FILE.npy` adds policies saved as [8, V] arrays. (The
guide-table searches the tree replaced are in git history and docs/simulator.md. In the engine
the search is one part of a step: `bench_vs_jax_loop.py` times whole cells.)

    PYTHONPATH=. python benchmarks/bench_sampler.py
    PYTHONPATH=. python benchmarks/bench_sampler.py --sizes 8192,16384 --repeat 9

Policies: "initial" (the paper's App. J start: anchor 5, correct 3, incorrect 0), "peaked" (most
mass on the correct actions, incorrect ones ~e-16: long runs of tiny actions) and
"wide" (logits ~ N(0, 3²)), each with N(0, 0.3²) noise per run.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from catsim.sim import sampler

V, C, RUNS = 128_000, 10_000, 8


def policies() -> dict:
    rng = np.random.default_rng(0)
    initial = np.zeros(V, np.float32)
    initial[:C], initial[0] = 3.0, 5.0
    peaked = np.full(V, -12.0, np.float32)
    peaked[:C], peaked[0], peaked[C:C + 100] = 4.0, 12.0, 2.0
    wide = rng.normal(0.0, 3.0, V).astype(np.float32)
    out = {}
    for name, z in (("initial", initial), ("peaked", peaked), ("wide", wide)):
        z_RxV = z + rng.normal(0.0, 0.3, (RUNS, V)).astype(np.float32)
        out[name] = jax.nn.softmax(jnp.asarray(z_RxV), axis=-1)
    return out


def cpu_ms_per_run(fn, *args, repeat: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        jax.block_until_ready(fn(*args))
        best = min(best, time.process_time() - t0)
    return 1e3 * best / RUNS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8192,16384,32768,131072")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--policies", default="", help="comma-separated .npy files of [8, V] p")
    args = parser.parse_args()
    pols = policies()
    for path in filter(None, args.policies.split(",")):
        pols[path] = jnp.asarray(np.load(path), jnp.float32)
    keys = jax.random.split(jax.random.key(0), RUNS)
    searches = {"bisect": sampler.search_right, "tree": sampler.tree_search}
    labels = tuple(searches)
    print(f"{'N':>7} {'policy':>8} | {'counts: bisect':>14} {'tree':>6} {'ratio':>6} | "
          f"{'search: bisect':>14} {'tree':>6} {'ratio':>6}")
    for n in (int(s) for s in args.sizes.split(",")):
        for name, p_RxV in pols.items():
            cdf_RxV = jax.jit(jax.vmap(lambda p: sampler.running_max_of_blocks(
                sampler.two_level_cdf(p))))(p_RxV)
            u_RxN = jax.jit(jax.vmap(lambda k, c: jax.random.uniform(k, (n,)) * c[-1]))(  # noqa: B023
                keys, cdf_RxV)
            counts = {}
            for label in labels:
                sampler.SEARCH = label  # read when traced: compile now
                counts[label] = jax.jit(jax.vmap(
                    lambda k, p: sampler.sample_counts(k, p, n, "inverse_cdf")  # noqa: B023
                )).lower(keys, p_RxV).compile()
            sampler.SEARCH = None
            search = {label: jax.jit(jax.vmap(searches[label])) for label in labels}
            found = [np.asarray(search[label](cdf_RxV, u_RxN)) for label in labels]
            if not all(np.array_equal(found[0], other) for other in found[1:]):
                raise SystemExit(f"N = {n}, {name}: the searches differ")
            t = {f"{kind}/{label}": cpu_ms_per_run(f, *a, repeat=args.repeat)
                 for kind, fs, a in (("counts", counts, (keys, p_RxV)),
                                     ("search", search, (cdf_RxV, u_RxN)))
                 for label, f in fs.items()}
            row = [f"{n:>7} {name:>8}"]
            for kind in ("counts", "search"):
                b, tree = (t[f"{kind}/{label}"] for label in labels)
                row.append(f"{b:>14.3f} {tree:>6.3f} {b / tree:>5.2f}x")
            print(" | ".join(row), flush=True)


if __name__ == "__main__":
    main()
