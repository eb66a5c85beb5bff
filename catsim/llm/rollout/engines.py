"""`generate`: the completions of a batch of left-padded prompts by one of the rollout engines
(`cascade`, the default; `static`, the reference)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params
from catsim.llm.rollout.cascade import generate_cascade, generate_cascade_per_process
from catsim.llm.rollout.static import generate_static
from catsim.llm.sampling import Rollout, SamplingConfig

# The engine `generate` runs: "cascade" (`rollout.cascade`: one prefill per prompt, a shared
# prompt cache, chunks with compaction) or "static" (`rollout.static`: one batch decoded until its
# longest row ends: the reference the cascade engine is tested against).
ENGINES = ("cascade", "static")
ROLLOUT_ENGINE = "cascade"


def generate(params: Params, cfg: ModelConfig, sampling: SamplingConfig, prompt_BxP: jax.Array,
             prompt_mask_BxP: jax.Array, key: jax.Array, prompt_ids_B: jax.Array | None = None,
             sample_ids_B: jax.Array | None = None, *, activation_sharding: Any = None,
             engine: str | None = None) -> Rollout:
    """Sample up to `sampling.max_new_tokens` tokens after each prompt.

    prompt_BxP: int32 ids, LEFT-padded so every row's last column is a real token.
    prompt_mask_BxP: 1 for real tokens. prompt_ids_B / sample_ids_B: int ids that, with `key`,
    determine each row's randomness (default: row index and 0). engine: `ENGINES` (default
    `ROLLOUT_ENGINE`); under several processes the cascade engine runs in each process over the
    rows of its shards (`cascade.generate_cascade_per_process`).
    """
    engine = ROLLOUT_ENGINE if engine is None else engine
    if engine not in ENGINES:
        raise CatsimError(f"rollout engine must be one of {ENGINES}, got {engine!r}")
    b = prompt_BxP.shape[0]
    if prompt_ids_B is None:
        prompt_ids_B = np.arange(b, dtype=np.int32)
    if sample_ids_B is None:
        sample_ids_B = np.zeros((b,), np.int32)
    if engine == "static":
        return generate_static(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key, prompt_ids_B,
                               sample_ids_B, activation_sharding=activation_sharding)
    if jax.process_count() > 1:
        return generate_cascade_per_process(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key,
                                            prompt_ids_B, sample_ids_B)
    return generate_cascade(params, cfg, sampling, prompt_BxP, prompt_mask_BxP, key, prompt_ids_B, sample_ids_B)
