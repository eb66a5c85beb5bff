"""Per-step metrics of the categorical simulation (paper §5.1, eq. 26; BroRL §4.1).

All functions are pure jnp on one run; the engine vmaps them. V = actions, P = correct set.

State metrics (functions of the policy p_t, the initial policy p_0 and the correct mask):
  qpos        Qpos = Σ_{a∈P} p_t(a)
  mret        Mret = 1 − Σ_{a∈P} max(0, p_0(a) − p_t(a)) / Σ_{a∈P} p_0(a)   (eq. 26, mass-weighted)
  share_rose  share of correct actions with p_t(a) > p_0(a)                   (BroRL Fig. 3)
  worst_drop  max_{a∈P} (p_0(a) − p_t(a)); > 0 is a drop, < 0 means every correct action gained
  entropy     −Σ_a p_t(a) log p_t(a) (nats)
  anchor_prob p_t(anchor), the anchor being action 0
Group metrics (of the update that produced p_t):
  mu_hat      μ̂ = X/N, the group's success rate
  focal       g = (1 − μ̂)^γ_t, the focal weight applied (1 for γ = 0)
  active      1 if the group had a correct and a wrong draw, else 0
  qu_pos_before, qu_pos_after   Qu,pos = Σ_{a∈P, a unsampled} p(a) before / after the update
  draws       groups drawn this step (> 1 only with DAPO dynamic sampling)
"""

from __future__ import annotations

import jax.numpy as jnp

STATE_METRICS = ("qpos", "mret", "share_rose", "worst_drop", "entropy", "anchor_prob")
GROUP_METRICS = ("mu_hat", "focal", "active", "qu_pos_before", "qu_pos_after", "draws")
ALL_METRICS = STATE_METRICS + GROUP_METRICS


def state_metrics(logp_V, p0_V, correct_V):
    """Metrics of one policy. logp_V: [V] log-probabilities; p0_V: [V] initial probabilities;
    correct_V: [V] bool. Returns a dict of [] arrays (names in STATE_METRICS)."""
    p_V = jnp.exp(logp_V)
    correct = correct_V.astype(p_V.dtype)
    loss_V = jnp.maximum(p0_V - p_V, 0.0) * correct
    num_correct = jnp.sum(correct)
    return {
        "qpos": jnp.sum(p_V * correct),
        "mret": 1.0 - jnp.sum(loss_V) / jnp.sum(p0_V * correct),
        "share_rose": jnp.sum((p_V > p0_V) * correct) / num_correct,
        "worst_drop": jnp.max(jnp.where(correct_V, p0_V - p_V, -jnp.inf)),
        # log_softmax is finite for finite logits, so an underflowed p contributes 0·finite = 0.
        "entropy": -jnp.sum(p_V * logp_V),
        "anchor_prob": p_V[0],
    }


def unsampled_correct_mass(p_V, counts_V, correct_V):
    """Qu,pos = Σ_{a∈P, c_a = 0} p(a): correct mass the group did not draw. -> []."""
    return jnp.sum(jnp.where(correct_V & (counts_V == 0), p_V, 0.0))
