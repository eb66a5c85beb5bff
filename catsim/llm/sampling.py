"""Drawing one token: the sampling configuration, the distribution sampled (temperature, top-k,
top-p) and inverse-CDF sampling with one uniform per row (`sample_one`); `Rollout`, the engines'
result. Shared by both rollout engines (`catsim.llm.rollout.static`, `catsim.llm.rollout.cascade`)
through their common step (`catsim.llm.rollout.decode.sample_step`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from catsim.errors import CatsimError


@dataclass(frozen=True)
class SamplingConfig:
    """How completions are drawn (hashable: a static argument of the jitted `generate`)."""

    max_new_tokens: int  # N: completion length cap (the stop token, if drawn, is included)
    temperature: float = 1.0  # softmax temperature; 0 means greedy (argmax) decoding
    top_p: float = 1.0  # nucleus sampling: smallest set of tokens with mass >= top_p; 1 disables
    top_k: int = 0  # keep the k most likely tokens; 0 disables
    stop_tokens: tuple[int, ...] = ()  # a sequence ends after emitting any of these ids
    pad_token: int = 0  # id written after a sequence has ended (masked out anyway)
    # The decoder takes the temperature as a value instead of compiling it in: for a schedule that
    # changes it every step (one compiled decoder for all steps; `traced_temperature`).
    temperature_varies: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise CatsimError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            raise CatsimError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise CatsimError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise CatsimError(f"top_k must be a non-negative integer, got {self.top_k!r}")
        object.__setattr__(self, "stop_tokens", tuple(int(t) for t in self.stop_tokens))


class Rollout(NamedTuple):
    """Completions of a batch; position n < lengths_B[b] of row b is a generated token."""

    tokens_BxN: jax.Array  # int32 generated ids (pad_token after the end)
    logprobs_BxN: jax.Array  # float32 log-prob under the sampling distribution (0 where masked)
    model_logprobs_BxN: jax.Array  # float32 log-softmax of the raw logits at the chosen id
    mask_BxN: jax.Array  # bool: token belongs to the completion (stop token included)
    lengths_B: jax.Array  # int32 number of generated tokens
    finished_B: jax.Array  # bool: ended with a stop token (False: hit max_new_tokens)


def traced_temperature(sampling: SamplingConfig) -> tuple[SamplingConfig, np.float32 | None]:
    """What the rollout engines pass to their jitted decoders: (`sampling`, None) — the temperature
    compiled in — or, with `temperature_varies` (and τ > 0), (`sampling` at temperature 1, τ as a
    float32 value), so that a new temperature (the asym-GRPO schedule's, one a step) reuses the
    compiled decoder instead of compiling another.

    Only a varying temperature goes the second way: there XLA cannot fold the constant into the
    program, and the log-probs differ from the compiled-in ones in their last bits (measured: at
    most 1.0e-6 relative, the same tokens; tests/test_llm_rollout.py). Every fixed-temperature
    run samples as before, bit for bit."""
    if not sampling.temperature_varies or sampling.temperature == 0:
        return sampling, None
    return replace(sampling, temperature=1.0), np.float32(sampling.temperature)


def sampling_logits(logits_V: jax.Array, sampling: SamplingConfig, temperature=None) -> jax.Array:
    """Logits of the distribution actually sampled: logits / temperature with tokens outside the
    top-k and the top-p nucleus set to -inf (ties at the cut-off are kept, as in `transformers`).
    `temperature` (traced, from `traced_temperature`) replaces `sampling.temperature` if given."""
    scaled_V = logits_V / (sampling.temperature if temperature is None else temperature)
    vocab = scaled_V.shape[-1]
    if 0 < sampling.top_k < vocab:
        kth = jax.lax.top_k(scaled_V, sampling.top_k)[0][-1]
        scaled_V = jnp.where(scaled_V < kth, -jnp.inf, scaled_V)
    if sampling.top_p < 1.0:
        sorted_V = jnp.sort(scaled_V)[::-1]
        probs_V = jax.nn.softmax(sorted_V)
        mass_before_V = jnp.cumsum(probs_V) - probs_V
        keep = jnp.maximum(jnp.sum(mass_before_V < sampling.top_p), 1)
        cutoff = sorted_V[keep - 1]
        scaled_V = jnp.where(scaled_V < cutoff, -jnp.inf, scaled_V)
    return scaled_V


def first_max_index(x_V: jax.Array) -> jax.Array:
    """`jnp.argmax` (the first index of the maximum) as two plain reductions: XLA's CPU backend
    runs argmax as a two-operand reduce, ≈ 1.4 ms per decode step over 4 x 151,936 logits.
    (Logits holding a NaN give the last index instead of the NaN's.)"""
    v = x_V.shape[-1]
    first = jnp.min(jnp.where(x_V == jnp.max(x_V), jnp.arange(v, dtype=jnp.int32), v))
    return jnp.minimum(first, v - 1)


def sample_one(logits_V: jax.Array, key: jax.Array, sampling: SamplingConfig,
               temperature=None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(token, log pi_sample(token), log pi_model(token)) for one sequence: greedy (the first
    maximum) at temperature 0, else the inverse CDF of `sampling_logits` at one uniform of `key`."""
    model_logp_V = jax.nn.log_softmax(logits_V)
    if sampling.temperature == 0:
        token = first_max_index(logits_V)
        return token, jnp.zeros((), jnp.float32), model_logp_V[token]
    policy_logp_V = jax.nn.log_softmax(sampling_logits(logits_V, sampling, temperature))
    # Inverse-CDF sampling: one uniform per row instead of V Gumbel variates (much cheaper for large
    # V). u lies in (0, 1], so the first index whose CDF reaches u * total always has positive mass.
    cdf_V = jnp.cumsum(jnp.exp(policy_logp_V))
    u = 1.0 - jax.random.uniform(key, (), jnp.float32)
    token = jnp.minimum(jnp.sum(cdf_V < u * cdf_V[-1]), logits_V.shape[-1] - 1)
    return token, policy_logp_V[token], model_logp_V[token]
