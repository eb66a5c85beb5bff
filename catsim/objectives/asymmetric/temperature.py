"""Rollout temperature schedules: cosine and staircase from τ_max down to τ_min (article §3.1, §5.2)."""

from __future__ import annotations

import jax.numpy as jnp

from catsim.errors import CatsimError
from catsim.objectives import _validate as v


def cosine_temperature(step, total_steps, *, tau_max=1.0, tau_min=0.2, fraction=0.3):
    """τ_t = τ_min + ½(τ_max − τ_min)(1 + cos(π·t/T_max)), T_max = fraction·total_steps; τ_min
    after T_max (article §3.1; fraction 0.3, or 0.5 when exploration stalls)."""
    _check_temperature_args(total_steps, tau_max, tau_min, fraction)
    t_max = fraction * total_steps
    t = jnp.clip(jnp.asarray(step, dtype=jnp.result_type(float)), 0.0, t_max)
    return tau_min + 0.5 * (tau_max - tau_min) * (1.0 + jnp.cos(jnp.pi * t / t_max))


def stepwise_temperature(step, total_steps, *, tau_max=1.0, tau_min=0.2, fraction=0.3, stages=4):
    """Staircase from τ_max to τ_min in `stages` equal drops, reaching τ_min at T_max =
    fraction·total_steps (the article's advice for code generation, §5.2):
    τ_t = τ_max − (τ_max − τ_min)·min(⌊stages·t/T_max⌋, stages)/stages."""
    _check_temperature_args(total_steps, tau_max, tau_min, fraction)
    if int(stages) != stages or stages < 1:
        raise CatsimError(f"stages must be a whole number >= 1, got {stages}")
    t_max = fraction * total_steps
    t = jnp.maximum(jnp.asarray(step, dtype=jnp.result_type(float)), 0.0)
    level = jnp.minimum(jnp.floor(stages * t / t_max), stages)
    return tau_max - (tau_max - tau_min) * level / stages


def _check_temperature_args(total_steps, tau_max, tau_min, fraction):
    v.check_positive("total_steps", total_steps)
    v.check_positive("tau_min", tau_min)
    v.check_positive("tau_max", tau_max)
    lo, hi = v.concrete_float(tau_min), v.concrete_float(tau_max)
    if lo is not None and hi is not None and lo > hi:
        raise CatsimError(f"tau_min must not exceed tau_max, got tau_min={lo}, tau_max={hi}")
    f = v.concrete_float(fraction)
    if f is not None and not 0.0 < f <= 1.0:
        raise CatsimError(f"fraction must lie in (0, 1], got {f}")
