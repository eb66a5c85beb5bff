"""The one teacher-forced path: per-token log-probabilities and entropies of given sequences, and
what is built on them (length-normalised sequence NLL, the probability of enumerated answers).

RL (behaviour/reference log-probs and the loss), evaluation (ΔNLL_rare, answer mass) and the tasks'
answer-mass reader all score through `token_logps`: position t predicts token t+1, so every array
here is B x (T−1), aligned with the targets tokens[:, 1:].
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import Params, forward
from catsim.objectives import losses


def token_logps(params: Params, model_cfg: ModelConfig, tokens_BxT, real_BxT, activation_sharding=None):
    """(log π(token_t+1 | ≤ t), entropy at t), both B x (T−1), float32, at temperature 1."""
    logits_BxTxV = forward(params, model_cfg, tokens_BxT, mask_BxT=real_BxT,
                           activation_sharding=activation_sharding)[:, :-1].astype(jnp.float32)
    logp = losses.action_log_probs(logits_BxTxV, tokens_BxT[:, 1:])
    return logp, losses.entropy(logits_BxTxV)


@functools.lru_cache(maxsize=8)
def logp_fn(model_cfg: ModelConfig):
    """Jitted (params, tokens_BxT, real_BxT) -> token log-probs B x (T−1) (one compilation per model)."""

    @jax.jit
    def fn(params, tokens, real):
        return token_logps(params, model_cfg, tokens, real)[0]

    return fn


def sequence_nll(params: Params, model_cfg: ModelConfig, prompt_tokens, prompt_mask, tokens, mask,
                 batch_size: int = 256) -> np.ndarray:
    """Length-normalised NLL −(1/|o|)Σ_t log π(o_t | x, o_<t) of each completion at temperature 1: [B].

    prompt_tokens/prompt_mask: [B, W] left-padded prompts; tokens/mask: [B, M] completions. Rows go
    through in batches of `batch_size` (the last one padded to full size, so one shape compiles).
    """
    fn = logp_fn(model_cfg)
    full = np.concatenate([prompt_tokens, tokens], axis=1).astype(np.int32)
    real = np.concatenate([prompt_mask, mask], axis=1)
    w = prompt_tokens.shape[1]
    out = []
    for s in range(0, full.shape[0], batch_size):
        rows = full[s:s + batch_size]
        pad = batch_size - rows.shape[0] if full.shape[0] > batch_size else 0
        r_real = real[s:s + batch_size]
        if pad:
            rows = np.concatenate([rows, np.repeat(rows[-1:], pad, 0)])
            r_real = np.concatenate([r_real, np.repeat(r_real[-1:], pad, 0)])
        lp = np.asarray(fn(params, jnp.asarray(rows), jnp.asarray(r_real)))[:, w - 1:]
        m = r_real[:, w:].astype(np.float64)
        nll = -(lp * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1)
        out.append(nll[: rows.shape[0] - pad])
    return np.concatenate(out)


def answer_logprob_fn(params: Params, model_cfg: ModelConfig, row_multiple: int = 8, width_multiple: int = 32):
    """A `tasks.answer_mass.LogProbFn`: Σ_t log π(completion_t | prompt, completion_<t) per completion.

    Rows and sequence width are padded to multiples, so prompts of varying length share a few
    compiled shapes; the padding is masked and, the model being causal, cannot change the real
    positions.
    """
    fn = logp_fn(model_cfg)

    def logprob_fn(prompt_ids: Sequence[int], completions: Sequence[Sequence[int]]) -> np.ndarray:
        if not completions:
            return np.zeros((0,), np.float64)
        p = len(prompt_ids)
        need = p + max(len(c) for c in completions)
        width = max(need, min(-(-need // width_multiple) * width_multiple, model_cfg.max_position_embeddings))
        rows = -(-len(completions) // row_multiple) * row_multiple
        tokens = np.zeros((rows, width), np.int32)
        real = np.zeros((rows, width), bool)
        target = np.zeros((rows, width - 1), bool)
        for i in range(rows):
            comp = completions[min(i, len(completions) - 1)]
            seq = list(prompt_ids) + list(comp)
            tokens[i, : len(seq)] = seq
            real[i, : len(seq)] = True
            target[i, p - 1 : len(seq) - 1] = True
        lp = np.asarray(fn(params, jnp.asarray(tokens), jnp.asarray(real)), np.float64)
        return (lp * target).sum(axis=1)[: len(completions)]

    return logprob_fn
