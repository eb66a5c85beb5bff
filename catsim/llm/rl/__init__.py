"""On-policy GRPO-family RL for the JAX transformer (F-GRPO §5.2–5.3, App. B, L).

    config.py  RLConfig: the method preset and its sections (objective, γ schedule, asym-GRPO,
               optimizer, rollout, run), validated at construction
    step.py    prompts, advantages, the training batch, the policy loss, the jitted functions
    asym.py    the asym-GRPO components on a batch
    loop.py    run_rl: collect → score → update → record in a resumable run directory

Methods (`METHODS`): grpo (clip 0.2/0.2), dapo (0.2/0.28, dynamic sampling), cispo (IS-weight
clip 1.0/5.0), dr_grpo (mean-centred advantage, token-sum / (B·max_new_tokens)), asym-grpo (GRPO
with every asymmetric component on). F-variants are the same methods with γ > 0.
"""

from catsim.llm.rl.config import FLAT, METHODS, Method, RLConfig
from catsim.llm.rl.loop import (
           CONFIG_FILE,
           LOG_FILE,
           STATE_FILE,
           STEP_METRICS,
           RLResult,
           read_log,
           run_rl,
)

__all__ = ["CONFIG_FILE", "FLAT", "LOG_FILE", "METHODS", "Method", "RLConfig", "RLResult", "STATE_FILE",
           "STEP_METRICS", "read_log", "run_rl"]
