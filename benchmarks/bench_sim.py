"""Speed of the JAX simulator vs a straightforward NumPy implementation of the same update.

Both run the `paper` scenario's update (V = 128,000, C = 10,000; N i.i.d. draws; mean-centred ±1
rewards; focal weight (1 − μ̂)^γ; Adam at 1e-2 on the log-prob objective) for the same cells:
one cell = one N with its 8 runs (γ ∈ {0, 1} × 4 seeds). NumPy runs the 8 runs one after the
other with `rng.choice(V, N, p=p)` (one core); JAX runs them as one jitted, vmapped scan whose run
axis is split over one host device per CPU core (`--cpu-devices`, as `catsim sweep` does). Times
are per run-step (one policy update of one run), wall clock, JAX without compilation (reported
separately); CPU seconds are printed too, so a shared machine can be read.

    PYTHONPATH=. python benchmarks/bench_sim.py                 # cells N = 8, 256, 8192, 131072
    PYTHONPATH=. python benchmarks/bench_sim.py --cpu-devices 1 # JAX on one device (one core)
    PYTHONPATH=. python benchmarks/bench_sim.py --full-sweep    # + wall time of the Fig. 2 sweep

On a shared machine the numbers are noisy; read the ratio, and run it when the machine is quiet.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

import numpy as np


def numpy_run(n: int, gamma: float, seed: int, steps: int, lr: float = 1e-2) -> float:
    """The straightforward NumPy loop (float32 like the JAX engine). Returns final Qpos."""
    v, c = 128_000, 10_000
    z = np.zeros(v, np.float32)
    z[:c], z[0] = 3.0, 5.0
    correct = np.arange(v) < c
    m = np.zeros(v, np.float32)
    s = np.zeros(v, np.float32)
    b1, b2, eps = 0.9, 0.999, 1e-8
    rng = np.random.default_rng(seed)
    for t in range(1, steps + 1):
        p = np.exp(z - z.max())
        p /= p.sum()
        draws = rng.choice(v, n, p=p.astype(np.float64) / p.sum(dtype=np.float64))
        counts = np.bincount(draws, minlength=v).astype(np.float32)
        mu = counts[correct].sum() / n
        adv = np.where(correct, 2.0 * (1.0 - mu), -2.0 * mu).astype(np.float32)
        adv *= (1.0 - mu) ** gamma
        # loss = −(1/N) Σ_j A_j log p_{o_j};  ∇ = −(1/N)(c∘A − (Σ c∘A)·p)
        ca = counts * adv
        grad = -(ca - ca.sum() * p) / n
        m = b1 * m + (1 - b1) * grad
        s = b2 * s + (1 - b2) * grad * grad
        z = z - lr * (m / (1 - b1**t)) / (np.sqrt(s / (1 - b2**t)) + eps)
    p = np.exp(z - z.max())
    return float(p[correct].sum() / p.sum())


def time_numpy(n: int, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds per run-step of the NumPy loop over the cell's 8 runs."""
    t0, c0 = time.perf_counter(), time.process_time()
    for gamma in (0.0, 1.0):
        for seed in range(4):
            numpy_run(n, gamma, seed, steps)
    return (time.perf_counter() - t0) / (8 * steps), (time.process_time() - c0) / (8 * steps)


def time_jax(n: int, steps: int, log_every: int) -> tuple[float, float, float]:
    """(wall, CPU) seconds per run-step of the JAX cell, and the wall seconds of compilation."""
    import jax

    from catsim.sim import config as C
    from catsim.sim import sweep

    cfg = dataclasses.replace(C.scenario("paper"), group_size=n, steps=steps, log_every=log_every)
    shard = len(jax.devices()) > 1
    t0 = time.perf_counter()
    sweep.run_cell(cfg, (0.0, 1.0), range(4), shard=shard)  # compiles and runs once
    first = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    sweep.run_cell(cfg, (0.0, 1.0), range(4), shard=shard)
    jax.effects_barrier()
    per = (time.perf_counter() - t0) / (8 * steps)
    per_cpu = (time.process_time() - c0) / (8 * steps)
    return per, per_cpu, max(first - per * 8 * steps, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="8,256,8192,131072", help="group sizes of the cells")
    parser.add_argument("--steps", type=int, default=100, help="steps per run for JAX")
    parser.add_argument("--numpy-steps", type=int, default=20, help="steps per run for NumPy")
    parser.add_argument("--log-every", type=int, default=10,
                        help="JAX: record metrics every k steps (the sweep's default, 10)")
    parser.add_argument("--cpu-devices", type=int, default=None,
                        help="JAX host devices, one per core (default: all cores; 1 = one device)")
    parser.add_argument("--full-sweep", action="store_true", help="also time the full Fig. 2 sweep")
    args = parser.parse_args()
    if args.steps % args.log_every:
        parser.error("--steps must be a multiple of --log-every")

    import jax

    from catsim.sim.engine import use_cpu_cores

    devices = use_cpu_cores(args.cpu_devices)
    print(f"JAX {jax.__version__}, {devices} host device(s); NumPy {np.__version__}, one core; "
          f"os.getloadavg() at start: {os.getloadavg()}")
    print(f"{'N':>7} | {'NumPy ms/run-step':>17} | {'JAX ms/run-step':>15} | {'ratio':>6} | "
          f"{'NumPy CPU ms':>12} | {'JAX CPU ms':>10} | {'CPU ratio':>9} | JAX compile s")
    for n in (int(x) for x in args.n.split(",")):
        t_np, c_np = time_numpy(n, args.numpy_steps)
        t_jax, c_jax, compile_s = time_jax(n, args.steps, args.log_every)
        print(f"{n:>7} | {t_np * 1e3:>17.3f} | {t_jax * 1e3:>15.3f} | {t_np / t_jax:>6.1f} | "
              f"{c_np * 1e3:>12.3f} | {c_jax * 1e3:>10.3f} | {c_np / c_jax:>9.1f} | {compile_s:.1f}",
              flush=True)
    if args.full_sweep:
        from catsim.sim import config as C
        from catsim.sim import sweep

        cfg = dataclasses.replace(C.scenario("paper"), log_every=10)
        with tempfile.TemporaryDirectory() as tmp:
            t0, c0 = time.perf_counter(), time.process_time()
            sweep.sweep(cfg, tmp, progress=True, shard=devices > 1)
            print(f"full Fig. 2 sweep (17 N × 2 γ × 4 seeds × 1000 steps, V=128,000): "
                  f"{time.perf_counter() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU, "
                  f"compilation included; load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
