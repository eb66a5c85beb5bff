"""Dual-threshold gradient clipping as an optax transformation (asymmetric-GRPO article §3.3).

The article's PyTorch recipe: `norm = clip_grad_norm_(params, max_norm)`, then, if the norm
(measured BEFORE clipping, as `clip_grad_norm_` returns it) is below a lower threshold (0.1),
amplify the gradient by 1.5. Above the lower threshold this is exactly
`optax.clip_by_global_norm(max_norm)` (tested).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

__all__ = ["dual_threshold_clip"]


def dual_threshold_clip(
    max_norm: float, lower_threshold: float = 0.1, amplification: float = 1.5
) -> optax.GradientTransformation:
    """Clip the global norm to `max_norm`; multiply by `amplification` when it is < `lower_threshold`.

    Args:
      max_norm: global-norm ceiling (> 0); updates with norm ≥ max_norm are rescaled to max_norm,
        with optax's rule g·max_norm/‖g‖.
      lower_threshold: below this global norm (≥ 0, < max_norm) the update is amplified.
      amplification: the factor (> 0; the article uses 1.5).

    Returns:
      A stateless `optax.GradientTransformation`; chain it before the optimiser, e.g.
      `optax.chain(dual_threshold_clip(1.0), optax.adamw(1e-6, weight_decay=0.01))`.
    """
    v.check_positive("max_norm", max_norm)
    v.check_nonnegative("lower_threshold", lower_threshold)
    v.check_positive("amplification", amplification)
    if not lower_threshold < max_norm:
        raise CatsimError(
            f"lower_threshold must be below max_norm, got lower_threshold={lower_threshold}, "
            f"max_norm={max_norm}"
        )

    def init_fn(params):
        del params
        return optax.EmptyState()

    def update_fn(updates, state, params=None):
        del params
        g_norm = optax.tree.norm(updates)
        keep = g_norm < max_norm
        amplify = g_norm < lower_threshold

        def scale(t):
            # the same expression as optax.clip_by_global_norm, so the two agree bit for bit
            clipped = jax.lax.select(keep, t, (t / g_norm.astype(t.dtype)) * max_norm)
            return jax.lax.select(amplify, t * jnp.asarray(amplification, t.dtype), clipped)

        return jax.tree.map(scale, updates), state

    return optax.GradientTransformation(init_fn, update_fn)
