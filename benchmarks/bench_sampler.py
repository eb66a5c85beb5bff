"""CPU time of the simulator's large-N group sampler: bisection vs tree vs block search vs guide table.

For each N and policy: 8 runs vmapped (as the engine runs a cell), V = 128,000, `sample_counts`
with the inverse-CDF sampler searching by bisection (`search_right`, the baseline), by the tree
search (`tree_search`, the default for 2048 < N <= 32768), by the block search
(`block_guide_search`, the default for 32768 < N < 131072) and by the guide table over all V
entries (`guide_table_search`, from N = 131072), plus the search alone on the same
(non-decreasing) CDF and uniforms. Prints process CPU ms per run (best of --repeat; CPU time,
since the machine may be shared), the ratios bisection ÷ tree / block / table, checks that the
four searches return identical indices, and the share of draws in crowded cells of the full
table. `--policies FILE.npy` adds policies saved as [8, V] arrays. (In the engine the search is
one part of a step; `bench_vs_jax_loop.py` times whole cells.)

    PYTHONPATH=. python benchmarks/bench_sampler.py
    PYTHONPATH=. python benchmarks/bench_sampler.py --sizes 8192,16384 --repeat 9

Policies: "initial" (the paper's App. J start: anchor 5, correct 3, incorrect 0), "peaked" (most
mass on the correct actions, incorrect ones ~e-16: long runs of tiny actions share a cell) and
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
    labels = ("bisect", "tree", "block", "table")
    searches = {"bisect": sampler.search_right, "tree": sampler.tree_search,
                "block": sampler.block_guide_search, "table": sampler.guide_table_search}
    head = " ".join(f"{label:>6}" for label in labels[1:])
    print(f"{'N':>7} {'policy':>8} | {'counts: bisect':>14} {head} {'ratios':>16} | "
          f"{'search: bisect':>14} {head} {'ratios':>16} | crowded draws")
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
                b, *others = (t[f"{kind}/{label}"] for label in labels)
                ratios = "/".join(f"{b / o:.2f}" for o in others)
                row.append(f"{b:>14.3f} " + " ".join(f"{o:>6.3f}" for o in others)
                           + f" {ratios:>15}x")
            print(" | ".join(row) + f" | {_crowded_fraction(cdf_RxV, u_RxN):.4f}", flush=True)


def _crowded_fraction(cdf_RxV, u_RxN) -> float:
    """Share of draws whose guide-table cell holds more than GUIDE_SCAN_WIDTH CDF entries."""
    cdf, u = np.asarray(cdf_RxV, np.float32), np.asarray(u_RxN, np.float32)
    cells = 1 << (cdf.shape[1] - 1).bit_length()
    scale = np.float32(cells) / cdf[:, -1:]
    cell_cdf = np.minimum(np.floor(cdf * scale), cells - 1).astype(np.int64)
    cell_u = np.minimum(np.floor(u * scale), cells - 1).astype(np.int64)
    runs = np.stack([np.bincount(c, minlength=cells)[g] for c, g in zip(cell_cdf, cell_u)])
    return float(np.mean(runs > sampler.GUIDE_SCAN_WIDTH))


if __name__ == "__main__":
    main()
