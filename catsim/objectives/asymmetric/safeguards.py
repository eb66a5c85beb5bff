"""Host-side safeguards (article §4.2): one-line warning messages, an empty tuple when all is well."""

from __future__ import annotations

from collections.abc import Sequence


def collapse_warning(
    heldout_accuracy: Sequence[float], *, previous_min: float = 0.05, tol: float = 0.0
):
    """Reward collapse (article §4.2): held-out accuracy SUDDENLY at zero.

    Warns when the latest accuracy is ≤ tol while the one before was ≥ previous_min. Returns a
    tuple of one-line messages (empty when nothing is wrong or the history is too short).
    """
    acc = [float(a) for a in heldout_accuracy]
    if len(acc) < 2:
        return ()
    if acc[-1] <= tol and acc[-2] >= previous_min:
        return (
            f"reward collapse: held-out accuracy fell from {acc[-2]:.4g} to {acc[-1]:.4g}; "
            "check the negative weights (raise the smoothing eps, or use the 'text' reading)",
        )
    return ()


def stagnation_warning(
    step: int,
    total_steps: int,
    temperature: float,
    tau_min: float,
    *,
    early_fraction: float = 0.5,
    pass_at_k: Sequence[float] | None = None,
    window: int = 5,
    min_gain: float = 1e-3,
):
    """Exploration stagnation (article §4.2): the rollout temperature sits at its floor too early.

    Warns when temperature ≤ τ_min (relative tolerance 1e-6: a float32 schedule value counts) before
    `early_fraction`·total_steps and — if a
    pass@k history is given — pass@k gained less than `min_gain` over the last `window` entries.
    The article's remedy: lengthen the cosine period to 50% of training.
    """
    at_floor = temperature <= tau_min * (1 + 1e-6) + 1e-12
    early = step < early_fraction * total_steps
    if not (at_floor and early):
        return ()
    if pass_at_k is not None:
        hist = [float(x) for x in pass_at_k]
        if len(hist) < window + 1 or max(hist[-window:]) - hist[-window - 1] >= min_gain:
            return ()
    frozen = "" if pass_at_k is None else f" and pass@k has not improved over the last {window} values"
    return (
        f"exploration stagnation: temperature at its floor {tau_min:g} at step {step} of "
        f"{total_steps} (before {early_fraction:.0%} of training){frozen}; consider a longer cosine "
        "period (fraction=0.5)",
    )
