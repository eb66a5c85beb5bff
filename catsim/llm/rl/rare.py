"""The trainer's advantage override: any rule of `catsim.objectives.registry` (MaxRL, Pass@k
Training, PKPO, the best-sample rule, W-REINFORCE / NSR / PSR, ...) in place of the method's, its
k and W-REINFORCE λ, catsim's positive-advantage weight (`losses.positive_sample_weight`) and the
unlikeliness reward's β (`rewards.unlikeliness`, shaping the scores before the advantage), as one
section of `RLConfig`."""

from __future__ import annotations

from dataclasses import dataclass

from catsim.errors import CatsimError
from catsim.llm.rl.options import option
from catsim.objectives import _validate as v
from catsim.objectives import registry

RL_ADVANTAGES = registry.NAMES  # a run may override its method's group advantage with any of these


@dataclass(frozen=True)
class RareConfig:
    """Advantage override (None = the method's), k of the pass@k rules, W-REINFORCE λ, catsim's
    positive weight (1 = off), the unlikeliness reward's β (0 = off)."""

    advantage: str | None = option(None, "group advantage override (binary rules: score > 1/2 is correct)")
    passk_k: int = option(4, "k of --advantage passk_training / pkpo / pkpo_mean (at most the group size)")
    positive_weight: float = option(
        1.0, "catsim's variant: λ × the positive advantages of any rule (1 = off; the published "
        "W-REINFORCE is --advantage w_reinforce)")
    w_reinforce_lambda: float = option(0.1, "λ of --advantage w_reinforce (the paper's 0.1)")
    unlikeliness_beta: float = option(
        0.0, "the unlikeliness reward's β: correct scores × (1 − β·rank/N), ranked by each completion's mean "
        "response-token log π_old, before the group advantage (He et al. 2506.02355 §4: 0.25; 0 = off)")

    def __post_init__(self) -> None:
        if self.advantage is not None:
            registry.get(self.advantage)  # one line naming the choices
        if isinstance(self.passk_k, bool) or not isinstance(self.passk_k, int) or self.passk_k < 1:
            raise CatsimError(f"rl passk_k must be a positive integer, got {self.passk_k!r}")
        v.check_nonnegative("positive_weight", self.positive_weight)
        v.check_nonnegative("w_reinforce_lambda", self.w_reinforce_lambda)
        v.check_in_closed("unlikeliness_beta", self.unlikeliness_beta, 0.0, 1.0)

    def options(self, *, eps: float, ddof: int) -> registry.Options:
        """The registry options of a run (ε and the GRPO std's ddof come from its objective)."""
        return registry.Options(k=self.passk_k, eps=eps, ddof=ddof, w_reinforce_lambda=self.w_reinforce_lambda)

    def check(self, advantage: str, group_size: int) -> None:
        """Checks that need the run's group size (`advantage`: the one the run uses): k > N is
        refused, k = N warned about (`registry.warn_k`)."""
        if advantage == "passk_best" and group_size < 2:
            raise CatsimError("the best-sample pass@k advantage needs group_size >= 2")
        registry.warn_k(advantage, self.passk_k, group_size)
        if self.unlikeliness_beta > 0 and registry.get(advantage).binary:
            on_rewards = ", ".join(n for n in registry.NAMES if not registry.get(n).binary)
            raise CatsimError(f"the unlikeliness reward (--unlikeliness-beta) shapes the rewards, which --advantage "
                              f"{advantage} never reads (a binary rule reads the 0/1 outcome, score > 1/2): "
                              f"use an advantage on rewards ({on_rewards})")

    def label(self, method_advantage: str) -> str:
        """Suffix of the run label: the override and λ when they differ from the method's."""
        text = ""
        if self.advantage is not None and self.advantage != method_advantage:
            k = f"@{self.passk_k}" if registry.get(self.advantage).needs_k else ""
            lam = f"λ={self.w_reinforce_lambda:g}" if self.advantage == "w_reinforce" else ""
            text += f" adv={self.advantage}{k}{lam}"
        if self.positive_weight != 1.0:
            text += f" λ+={self.positive_weight:g}"
        if self.unlikeliness_beta > 0:
            text += f" unlikely β={self.unlikeliness_beta:g}"
        return text
