"""The literal App. J reading (plain gradient ascent on the linear surrogate, η = 1e-2) in float64.

The JAX engine runs in float32, where this rule's per-step logit changes (≈ η·p_i/N ≤ 1e-6) fall
below the resolution of a logit of 3.0 (2.4e-7) for most N, so the float32 policy does not move
at all. This NumPy float64 loop measures how much it moves in exact-enough arithmetic.

    PYTHONPATH=. python benchmarks/literal_float64.py [--n 2,32,256,8192,131072] [--steps 1000]
"""

from __future__ import annotations

import argparse

import numpy as np


def literal_run(n: int, gamma: float, seed: int, steps: int, lr: float = 1e-2):
    v, c = 128_000, 10_000
    z = np.zeros(v)
    z[:c], z[0] = 3.0, 5.0
    correct = np.arange(v) < c
    p0 = np.exp(z - z.max())
    p0 /= p0.sum()
    rng = np.random.default_rng(seed)
    p = p0
    for _ in range(steps):
        counts = np.bincount(rng.choice(v, n, p=p), minlength=v)
        mu = counts[correct].sum() / n
        adv = np.where(correct, 2.0 * (1.0 - mu), -2.0 * mu) * (1.0 - mu) ** gamma
        cap = counts * adv * p  # ascent on (1/N)Σ_j A_j p_{o_j}: ∇ = (1/N)(c∘A∘p − (Σ c∘A∘p)·p)
        z = z + lr * (cap - cap.sum() * p) / n
        p = np.exp(z - z.max())
        p /= p.sum()
    qpos0, qpos = p0[correct].sum(), p[correct].sum()
    mret = 1.0 - np.maximum(p0 - p, 0.0)[correct].sum() / p0[correct].sum()
    return qpos0, qpos, mret, np.abs(z - np.log(p0 / p0[-1])).max()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", default="2,32,256,8192,131072")
    parser.add_argument("--gamma", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    print(f"{'N':>7} | {'Qpos_0':>9} | {'Qpos_T − Qpos_0':>15} | {'1 − Mret_T':>10} | max |Δz|")
    for n in (int(x) for x in args.n.split(",")):
        q0, q, m, dz = literal_run(n, args.gamma, 0, args.steps)
        print(f"{n:>7} | {q0:>9.6f} | {q - q0:>15.3e} | {1 - m:>10.3e} | {dz:.3e}", flush=True)


if __name__ == "__main__":
    main()
