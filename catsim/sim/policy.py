"""Initial logits of the categorical policy (paper App. J and exploration variants).

Layout convention used everywhere in `catsim.sim`: actions 0..C−1 are correct, C..V−1 incorrect,
and action 0 is the anchor (the single high-probability correct action of App. J).
"""

from __future__ import annotations

import numpy as np

from catsim.sim.config import PolicyConfig


def correct_mask(policy: PolicyConfig) -> np.ndarray:
    """[V] bool, True on the correct actions 0..C−1."""
    return np.arange(policy.num_actions) < policy.num_correct


def initial_logits(policy: PolicyConfig) -> np.ndarray:
    """[V] float32 initial logits z_0 (host-side, deterministic given the config).

    - "paper": anchor 5.0, other correct 3.0, incorrect 0.0 (App. J; Qpos ≈ 0.63, p_anchor ≈ 4.7e-4).
    - "uniform": all logits 0 (Qpos = C/V).
    - "gaussian": z ~ N(0, std²), i.i.d., from `init_seed`.
    - "zipf": p(rank r) ∝ r^(−s), r = 1..V, ranks given to actions in a random order (`init_seed`).
    - "target_qpos": uniform within each set, total correct mass = target_qpos.
    """
    v, c = policy.num_actions, policy.num_correct
    kind = policy.init
    if kind == "paper":
        z = np.full(v, policy.incorrect_logit, dtype=np.float64)
        z[:c] = policy.correct_logit
        z[0] = policy.anchor_logit
    elif kind == "uniform":
        z = np.zeros(v)
    elif kind == "gaussian":
        z = np.random.default_rng(policy.init_seed).normal(0.0, policy.gaussian_std, size=v)
    elif kind == "zipf":
        ranks = np.random.default_rng(policy.init_seed).permutation(v) + 1
        z = -policy.zipf_exponent * np.log(ranks)
    else:  # "target_qpos"
        z = np.empty(v)
        z[:c] = np.log(policy.target_qpos / c)
        z[c:] = np.log((1.0 - policy.target_qpos) / (v - c))
    return z.astype(np.float32)


def initial_probs(policy: PolicyConfig) -> np.ndarray:
    """[V] float64 softmax(z_0), computed in NumPy float64 (reference for metrics and tests)."""
    z = initial_logits(policy).astype(np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()
