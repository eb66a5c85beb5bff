"""Input checks shared by the objectives modules (private).

Hyper-parameters are usually Python numbers captured at trace time, so they can be checked
eagerly and rejected with a one-line `CatsimError`. Traced values cannot be inspected; for them
the checks are skipped and the docstrings state the valid range.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from catsim.errors import CatsimError


def concrete_float(value) -> float | None:
    """`float(value)` for a concrete scalar, None for a JAX tracer or a non-scalar."""
    if isinstance(value, jax.core.Tracer):
        return None
    try:
        array = np.asarray(value)
    except Exception:  # noqa: BLE001 - anything not array-like is simply not checkable here
        return None
    if array.ndim != 0:
        return None
    return float(array)


def concrete_array(value) -> np.ndarray | None:
    """`np.asarray(value)` for a concrete array, None for a JAX tracer."""
    if isinstance(value, jax.core.Tracer):
        return None
    try:
        return np.asarray(value)
    except Exception:  # noqa: BLE001 - e.g. an abstract value inside a transformation
        return None


# Hyper-parameters meet the rules in float32: "finite" means a finite float32 (1e39 is inf there).
FLOAT32_MAX = float(np.finfo(np.float32).max)
_RANGE = f"(float32: |x| <= {FLOAT32_MAX:.4g})"


def finite32(x: float) -> bool:
    """Whether the float `x` stays finite in float32."""
    return math.isfinite(x) and abs(x) <= FLOAT32_MAX


def check_finite(name: str, value) -> None:
    x = concrete_float(value)
    if x is not None and not finite32(x):
        raise CatsimError(f"{name} must be finite {_RANGE}, got {x:g}")


def check_nonnegative(name: str, value) -> None:
    x = concrete_float(value)
    if x is not None and not (finite32(x) and x >= 0.0):
        raise CatsimError(f"{name} must be a finite number >= 0 {_RANGE}, got {x:g}")


def check_positive(name: str, value) -> None:
    x = concrete_float(value)
    if x is not None and not (finite32(x) and x > 0.0):
        raise CatsimError(f"{name} must be a finite number > 0 {_RANGE}, got {x:g}")


def check_in_closed(name: str, value, low: float, high: float) -> None:
    x = concrete_float(value)
    if x is not None and not (math.isfinite(x) and low <= x <= high):
        raise CatsimError(f"{name} must lie in [{low}, {high}], got {x:g}")


def check_reward_levels(reward_correct, reward_wrong) -> None:
    rc, rw = concrete_float(reward_correct), concrete_float(reward_wrong)
    for name, x in (("reward_correct", rc), ("reward_wrong", rw)):
        if x is not None and not finite32(x):
            raise CatsimError(f"{name} must be finite {_RANGE}, got {x:g}")
    if rc is not None and rw is not None and not rc > rw:
        raise CatsimError(
            f"reward_correct must exceed reward_wrong, got reward_correct={rc}, reward_wrong={rw}"
        )


def check_rank(name: str, array, ranks: int | tuple[int, ...]) -> None:
    allowed = (ranks,) if isinstance(ranks, int) else ranks
    ndim = np.ndim(array)
    if ndim not in allowed:
        want = " or ".join(str(r) for r in allowed)
        raise CatsimError(f"{name} must have rank {want}, got shape {np.shape(array)}")


def check_same_shape(**arrays) -> None:
    shapes = {name: np.shape(a) for name, a in arrays.items() if a is not None}
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"{n}{s}" for n, s in shapes.items())
        raise CatsimError(f"shapes must match: {listing}")
