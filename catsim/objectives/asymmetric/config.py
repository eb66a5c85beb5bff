"""Hyper-parameters of asymmetric GRPO (`AsymmetricConfig`), checked at construction."""

from __future__ import annotations

import dataclasses

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

KL_DIRECTIONS = ("uniform_to_policy", "policy_to_uniform")
NEGATIVE_READINGS = ("text", "formula")


@dataclasses.dataclass(frozen=True)
class AsymmetricConfig:
    """Hyper-parameters of asymmetric GRPO, with the defaults chosen in docs/asymmetric-grpo.md."""

    baseline: float = 0.3  # b in b + (1−b)·sigmoid(−KL) (article §2.1 code)
    kl_direction: str = "uniform_to_policy"  # article's code: KL(uniform‖p); or "policy_to_uniform"
    positive_tau: float = 1.0  # τ in w⁺(r) = min(1, r/τ); a reward scale, NOT the temperature
    negative_reading: str = "text"  # "text": w⁻ falls with π (article's words); "formula": grows
    negative_d: float = 1.0  # D in w⁻; probabilities live in [0, 1] so D = 1 (odds for "formula")
    negative_eps: float = 1e-2  # ε smoothing in w⁻ (article §4.2 against reward collapse)
    top_k: int = 1  # mixed groups: how many positives are amplified (article gives no number)
    amplify: float = 1.5  # mixed groups: factor on the top-k positives (article gives no number)
    delta: float = 2.0  # mixed groups / clustering: distance threshold δ (article §5.1, geometry)
    rich_positives: int = 3  # recomposition: ≥ this many positives → keep only the best positive
    top_negatives: int = (
        3  # recomposition: 1…rich−1 positives → all positives + this many negatives
    )

    def __post_init__(self):
        v.check_in_closed("baseline", self.baseline, 0.0, 1.0)
        if self.kl_direction not in KL_DIRECTIONS:
            raise CatsimError(
                f"kl_direction must be one of {', '.join(KL_DIRECTIONS)}, got {self.kl_direction!r}"
            )
        if self.negative_reading not in NEGATIVE_READINGS:
            raise CatsimError(
                f"negative_reading must be one of {', '.join(NEGATIVE_READINGS)}, "
                f"got {self.negative_reading!r}"
            )
        v.check_positive("positive_tau", self.positive_tau)
        v.check_positive("negative_d", self.negative_d)
        v.check_nonnegative("negative_eps", self.negative_eps)
        v.check_nonnegative("amplify", self.amplify)
        v.check_nonnegative("delta", self.delta)
        for name in ("top_k", "rich_positives", "top_negatives"):
            value = getattr(self, name)
            if int(value) != value or value < 0:
                raise CatsimError(f"{name} must be a whole number >= 0, got {value}")
        if self.rich_positives < 1:
            raise CatsimError(f"rich_positives must be >= 1, got {self.rich_positives}")
