"""The one sampling path: encode prompts, left-pad, generate n samples per prompt (`generate`), stop
and pad, decode, score with the task's verifier (`sample_groups` → `Groups`). RL, evaluation, the
warm-up's evaluation, the safeguards and `catsim llm sample` all draw completions through it."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.rollout.engines import generate
from catsim.llm.sampling import SamplingConfig
from catsim.llm.tasks.base import score_batch


def left_pad(prompts: list[list[int]], pad_token: int = 0,
             length: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Left-pad token lists into (prompt_BxP int32, mask_BxP bool); `length` fixes P."""
    tokens, mask = _left_pad(prompts, pad_token, length)
    return jnp.asarray(tokens), jnp.asarray(mask)


def _left_pad(prompts: list[list[int]], pad_token: int = 0,
              length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`left_pad` as numpy arrays (host-side batch assembly: no device ops)."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise CatsimError("every prompt must have at least one token")
    width = max(len(p) for p in prompts) if length is None else length
    if width < max(len(p) for p in prompts):
        raise CatsimError(f"prompt longer than the padded length {width}")
    tokens = np.full((len(prompts), width), pad_token, np.int32)
    mask = np.zeros((len(prompts), width), bool)
    for row, p in enumerate(prompts):
        tokens[row, width - len(p):] = p
        mask[row, width - len(p):] = True
    return tokens, mask


def stop_and_pad(model_cfg: ModelConfig, tokenizer) -> tuple[tuple[int, ...], int]:
    """(stop ids, pad id) of a model: config.json's eos ids (else the tokenizer's <eos>), and the
    tokenizer's pad id (else the first stop id)."""
    stops = tuple(model_cfg.eos_token_ids) or (
        (tokenizer.eos_token_id,) if tokenizer.eos_token_id is not None else ())
    if not stops:
        raise CatsimError("the model has no end-of-sequence token (config.json eos_token_id)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    return stops, int(pad)


def encode_prompt(tokenizer, text: str, chat_template: bool = False) -> list[int]:
    """Prompt ids: the tokenizer's own special-token rule (the character tokenizer adds <bos>);
    with `chat_template`, the text is wrapped as one user turn with the generation prompt (the
    template writes <bos> itself)."""
    if chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(text, add_special_tokens=True))


def encode_answer(tokenizer, text: str) -> list[int]:
    """Answer ids, no special tokens (the caller appends the stop token)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass
class Groups:
    """Rollouts of P prompts × N samples (numpy, rows ordered prompt-major)."""

    prompt_indices: np.ndarray  # [P] the prompts' indices in their split
    prompt_tokens: np.ndarray  # [P·N, W] left-padded prompt ids
    prompt_mask: np.ndarray  # [P·N, W] bool
    tokens: np.ndarray  # [P·N, M] generated ids (stop token included)
    mask: np.ndarray  # [P·N, M] bool, response tokens
    scores: np.ndarray  # [P, N] verifier scores (0 without a task)
    texts: list  # P·N decoded completions (stop token dropped, special tokens skipped)
    finished: np.ndarray  # [P·N] bool: ended with a stop token
    logprob: np.ndarray  # [P·N] Σ log π_sample over each completion

    def take(self, groups: np.ndarray, n: int) -> Groups:
        rows = (groups[:, None] * n + np.arange(n)[None]).reshape(-1)
        return Groups(self.prompt_indices[groups], self.prompt_tokens[rows], self.prompt_mask[rows],
                      self.tokens[rows], self.mask[rows], self.scores[groups],
                      [self.texts[r] for r in rows], self.finished[rows], self.logprob[rows])

    @staticmethod
    def concat(parts: list[Groups]) -> Groups:
        width = max(p.prompt_tokens.shape[1] for p in parts)

        def pad(a, fill):
            return np.concatenate([np.full((a.shape[0], width - a.shape[1]), fill, a.dtype), a], axis=1)

        def cat(name):
            return np.concatenate([getattr(p, name) for p in parts])

        return Groups(cat("prompt_indices"), np.concatenate([pad(p.prompt_tokens, 0) for p in parts]),
                      np.concatenate([pad(p.prompt_mask, False) for p in parts]), cat("tokens"),
                      cat("mask"), cat("scores"), sum((p.texts for p in parts), []), cat("finished"),
                      cat("logprob"))


def sample_groups(params, model_cfg, tokenizer, task, prompts, n: int, sampling: SamplingConfig, key, *,
                  mesh=None, chat_template: bool = False, batch_size: int = 0, pad_multiple: int = 8,
                  pad_rows: bool = False, width: int | None = None,
                  score_truncated: bool = False, progress=None) -> Groups:
    """n completions of each prompt, decoded and scored (truncated ones score 0 unless
    `score_truncated`).

    prompts: task `Prompt`s (`.text`, `.index`), or plain strings with `task=None` (indices
    0, 1, ...; scores 0). The randomness of row (prompt p, sample s) is (key, p.index, s):
    independent of batch layout. Layout: `batch_size` rows per generate call (0 = all), the last
    call padded to full size with copies of its last row when `pad_rows`; prompts left-padded to a
    multiple of `pad_multiple` (or to `width`). mesh: rows are sharded over it and gathered back
    to every process. progress: an object with `update(rows)` (e.g. tqdm), advanced after each
    generate call.
    """
    from catsim.llm.model.sharding import activation_sharding, shard_batch, to_host

    if n < 1:
        raise CatsimError(f"samples per prompt must be >= 1, got {n}")
    if not prompts:
        raise CatsimError("no prompts given")
    texts_in = [p if isinstance(p, str) else p.text for p in prompts]
    indices = [i if isinstance(p, str) else p.index for i, p in enumerate(prompts)]
    encoded = [encode_prompt(tokenizer, t, chat_template) for t in texts_in]
    for text, ids in zip(texts_in, encoded):
        if not ids:
            raise CatsimError(f"prompt {text!r} encodes to no tokens")
        if max(ids) >= model_cfg.vocab_size:
            raise CatsimError(f"tokenizer id {max(ids)} is outside the model's vocabulary ({model_cfg.vocab_size})")
    longest = max(len(e) for e in encoded)
    if longest + sampling.max_new_tokens > model_cfg.max_position_embeddings:
        raise CatsimError(f"a prompt of {longest} tokens plus max_new_tokens = {sampling.max_new_tokens} exceeds "
                          f"the model's context of {model_cfg.max_position_embeddings} positions")
    if width is None:
        width = -(-longest // pad_multiple) * pad_multiple
    rows = [(i, s) for i in range(len(prompts)) for s in range(n)]
    prompt_tokens, prompt_mask = _left_pad([encoded[i] for i, _ in rows], length=width)
    prompt_ids = np.asarray([indices[i] for i, _ in rows], np.int32)
    sample_ids = np.asarray([s for _, s in rows], np.int32)
    size = batch_size or len(rows)
    act = None if mesh is None else activation_sharding(mesh)
    outs = []
    for start in range(0, len(rows), size):
        sl = np.arange(start, min(start + size, len(rows)))
        real = len(sl)
        if pad_rows and real < size:  # one compiled shape for every call; padded rows dropped
            sl = np.concatenate([sl, np.full(size - real, sl[-1])])
        args = (prompt_tokens[sl], prompt_mask[sl], prompt_ids[sl], sample_ids[sl])
        if mesh is not None:
            args = shard_batch(args, mesh)
        out = generate(params, model_cfg, sampling, args[0], args[1], key, args[2], args[3],
                       activation_sharding=act)
        out = to_host(out)  # all processes get every row (an all-gather when multi-process)
        outs.append(jax.tree.map(lambda a, k=real: np.asarray(a)[:k], out))
        if progress is not None:
            progress.update(real)
    tokens, logps, mask, lengths, finished = (np.concatenate([getattr(o, f) for o in outs]) for f in
                                              ("tokens_BxN", "logprobs_BxN", "mask_BxN", "lengths_B",
                                               "finished_B"))
    scores = np.zeros(len(rows), np.float32)
    texts = []
    for r in range(len(rows)):
        ids = tokens[r, : lengths[r]]
        if finished[r]:
            ids = ids[:-1]  # the stop token ends the text; `tokens` keeps it
        texts.append(tokenizer.decode([int(t) for t in ids], skip_special_tokens=True))
    if task is not None:  # one batch: the verifier may check it in parallel under one time budget
        scored = [r for r in range(len(rows)) if finished[r] or score_truncated]
        scores[scored] = score_batch(task, [prompts[rows[r][0]] for r in scored], [texts[r] for r in scored])
        if jax.process_count() > 1:  # time limits make verdicts timing-dependent: process 0's hold
            from jax.experimental import multihost_utils

            scores = np.asarray(multihost_utils.broadcast_one_to_all(scores), np.float32)
    logprob = np.sum(np.where(mask, logps, 0.0), axis=1)
    return Groups(np.asarray(indices, np.int64), np.asarray(prompt_tokens), np.asarray(prompt_mask),
                  tokens, mask.astype(bool), scores.reshape(len(prompts), n), texts,
                  finished.astype(bool), logprob)
