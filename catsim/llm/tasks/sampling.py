"""Sampling and scoring on a task: encode prompts, draw completions with the KV-cache rollout
engine, decode them and reward them with the task's verifier; teacher-forced log-probabilities.

    records = sample_task(params, cfg, tokenizer, task, prompts, n=16, sampling=..., key=key)
    pass_rate = mean(r.reward for r in records)

A completion's randomness comes from (key, prompt index, sample index) through the rollout engine,
so results do not depend on batch layout.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, forward
from catsim.llm.rollout import SamplingConfig, generate, left_pad
from catsim.llm.tasks.base import Prompt, Task


@dataclass(frozen=True)
class SampleRecord:
    """One sampled completion and its reward."""

    prompt_index: int  # Prompt.index
    sample_index: int  # 0..n-1 within the prompt
    completion: str  # decoded text up to (not including) the stop token
    finished: bool  # ended with a stop token (False: hit the length cap)
    reward: float  # task.reward(prompt, completion)


def backend(tokenizer):
    """The `tokenizers.Tokenizer` inside a catsim `Tokenizer` wrapper (or the object itself)."""
    return getattr(tokenizer, "backend", tokenizer)


def encode_prompt(tokenizer, text: str, chat: bool = False) -> list[int]:
    """Prompt ids. Plain: the tokenizer's own special-token rule (the character tokenizer adds
    <bos>). chat: the text as a user message in the tokenizer's chat template (real checkpoints)."""
    if chat:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}])
        return list(backend(tokenizer).encode(text, add_special_tokens=False).ids)
    return list(backend(tokenizer).encode(text, add_special_tokens=True).ids)


def encode_answer(tokenizer, text: str) -> list[int]:
    """Answer ids, no special tokens (the caller appends the stop token)."""
    return list(backend(tokenizer).encode(text, add_special_tokens=False).ids)


def decode_ids(tokenizer, ids: Sequence[int]) -> str:
    return backend(tokenizer).decode([int(i) for i in ids], skip_special_tokens=True)


def sample_task(
    params: Params,
    cfg: ModelConfig,
    tokenizer,
    task: Task,
    prompts: Sequence[Prompt],
    n: int,
    sampling: SamplingConfig,
    key: jax.Array,
    batch_size: int = 256,
    chat: bool = False,
) -> list[SampleRecord]:
    """n completions per prompt, decoded and rewarded; records ordered by (prompt, sample).

    chat: wrap prompts in the tokenizer's chat template (see `encode_prompt`).
    """
    if n < 1:
        raise CatsimError(f"number of samples must be positive, got {n}")
    if not sampling.stop_tokens:
        raise CatsimError("sampling needs at least one stop token (the tokenizer's <eos>)")
    rows = [(p, s) for p in prompts for s in range(n)]
    encoded = {p.index: encode_prompt(tokenizer, p.text, chat) for p in prompts}
    width = max(len(ids) for ids in encoded.values())
    records: list[SampleRecord] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        # pad the chunk to a fixed row count so one compiled program serves every chunk
        padded = chunk + [chunk[-1]] * (min(batch_size, len(rows)) - len(chunk))
        tokens, mask = left_pad([encoded[p.index] for p, _ in padded], length=width)
        out = generate(params, cfg, sampling, tokens, mask, key,
                       prompt_ids_B=jnp.asarray([p.index for p, _ in padded], jnp.int32),
                       sample_ids_B=jnp.asarray([s for _, s in padded], jnp.int32))
        toks = np.asarray(out.tokens_BxN)
        lengths, finished = np.asarray(out.lengths_B), np.asarray(out.finished_B)
        for row, (prompt, s) in enumerate(chunk):
            ids = toks[row, : lengths[row]]
            if finished[row]:
                ids = ids[:-1]  # drop the stop token
            text = decode_ids(tokenizer, ids)
            records.append(SampleRecord(prompt.index, s, text, bool(finished[row]),
                                        float(task.reward(prompt, text)) if finished[row] else 0.0))
    return records


@functools.partial(jax.jit, static_argnums=1)
def sequence_logprobs(params: Params, cfg: ModelConfig, tokens_BxT: jax.Array, mask_BxT: jax.Array,
                      target_BxT: jax.Array) -> jax.Array:
    """Σ_t log π(tokens[b, t] | tokens[b, <t]) over positions with target_BxT set, shape [B].

    Teacher forcing: logits at position t−1 score token t (target_BxT[:, 0] is ignored).
    """
    logits_BxTxV = forward(params, cfg, tokens_BxT, mask_BxT=mask_BxT)
    logp_BxTxV = jax.nn.log_softmax(logits_BxTxV[:, :-1].astype(jnp.float32))
    picked_BxT = jnp.take_along_axis(logp_BxTxV, tokens_BxT[:, 1:, None], axis=-1)[..., 0]
    return jnp.sum(jnp.where(target_BxT[:, 1:], picked_BxT, 0.0), axis=1)


def model_logprob_fn(params: Params, cfg: ModelConfig, pad_to: int = 32, row_multiple: int = 16):
    """A `LogProbFn` for `answer_mass.answer_probabilities`: teacher-forced Σ log π(completion).

    Inputs are padded (width to a multiple of `pad_to`, rows to a multiple of `row_multiple`) so a
    handful of compiled shapes serve every prompt.
    """

    def logprob_fn(prompt_ids: Sequence[int], completions: Sequence[Sequence[int]]) -> np.ndarray:
        if not completions:
            return np.zeros((0,), np.float64)
        p = len(prompt_ids)
        width = -(-(p + max(len(c) for c in completions)) // pad_to) * pad_to
        rows = -(-len(completions) // row_multiple) * row_multiple
        tokens = np.zeros((rows, width), np.int32)
        mask = np.zeros((rows, width), bool)
        target = np.zeros((rows, width), bool)
        for i, comp in enumerate(completions):
            seq = list(prompt_ids) + list(comp)
            tokens[i, : len(seq)] = seq
            mask[i, : len(seq)] = True
            target[i, p : len(seq)] = True
        out = sequence_logprobs(params, cfg, jnp.asarray(tokens), jnp.asarray(mask), jnp.asarray(target))
        return np.asarray(out, np.float64)[: len(completions)]

    return logprob_fn


def load_task_for_model(model_dir, name: str | None, overrides: dict, data_seed: int | None = None):
    """(task, data_seed) for sampling a model directory.

    The warm-up writes `catsim_task.json` (task name, config, split seed) next to the weights; its
    settings are the defaults here, so `--task maze` on a 7×7 model samples 7×7 mazes. `overrides`
    (config fields) and `data_seed` replace them; `name=None` means the recorded task.
    """
    import json
    from pathlib import Path

    from catsim.llm.tasks import make_task

    recorded: dict = {}
    path = Path(model_dir) / "catsim_task.json"
    if path.is_file():
        try:
            recorded = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise CatsimError(f"{path}: not valid JSON ({err.msg})") from None
    if name is None:
        name = recorded.get("task")
        if name is None:
            raise CatsimError(f"{model_dir} records no task (catsim_task.json); give --task")
    options = dict(recorded.get("config", {})) if recorded.get("task") == name else {}
    options.update(overrides)
    seed = data_seed if data_seed is not None else int(recorded.get("data_seed", 0))
    return make_task(name, **options), seed
