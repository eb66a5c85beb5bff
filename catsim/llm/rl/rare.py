"""The trainer's rare-solution advantage overrides: MaxRL, Pass@k Training, PKPO, the best-sample
pass@k rule (catsim.objectives.advantages) and the NSR positive-sample weight λ
(catsim.objectives.losses.positive_sample_weight), as one section of `RLConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from catsim.errors import CatsimError
from catsim.objectives import _validate as v

# group advantages a run may override its method's with: GRPO, Dr.GRPO and the binary-reward rules
RL_ADVANTAGES = ("grpo", "dr_grpo", "maxrl", "passk_training", "pkpo", "passk_best")


@dataclass(frozen=True)
class RareConfig:
    """Advantage override (None = the method's), k of the pass@k rules, NSR λ (1 = off)."""

    advantage: str | None = None  # one of RL_ADVANTAGES; the binary rules read score > 1/2 as correct
    passk_k: int = 4  # k of passk_training and pkpo
    positive_weight: float = 1.0  # λ on positive-advantage rollouts (W-REINFORCE: 0.1)

    def __post_init__(self) -> None:
        if self.advantage not in (None, *RL_ADVANTAGES):
            raise CatsimError(f"advantage must be one of {', '.join(RL_ADVANTAGES)}, got {self.advantage!r}")
        if isinstance(self.passk_k, bool) or not isinstance(self.passk_k, int) or self.passk_k < 1:
            raise CatsimError(f"rl passk_k must be a positive integer, got {self.passk_k!r}")
        v.check_nonnegative("positive_weight", self.positive_weight)

    def check(self, advantage: str, group_size: int) -> None:
        """Checks that need the run's group size (`advantage`: the one the run uses)."""
        if advantage == "passk_best" and group_size < 2:
            raise CatsimError("the best-sample pass@k advantage needs group_size >= 2")
        if advantage in ("pkpo", "passk_training") and self.passk_k > group_size:
            raise CatsimError(f"passk_k ({self.passk_k}) must not exceed group_size ({group_size})")

    def label(self, method_advantage: str) -> str:
        """Suffix of the run label: the override and λ when they differ from the method's."""
        text = ""
        if self.advantage is not None and self.advantage != method_advantage:
            k = f"@{self.passk_k}" if self.advantage in ("pkpo", "passk_training") else ""
            text += f" adv={self.advantage}{k}"
        if self.positive_weight != 1.0:
            text += f" λ+={self.positive_weight:g}"
        return text
