"""catsim.llm.rollout: KV-cache sampling is reproducible per (prompt id, sample index), its
log-probabilities are those of the distribution sampled, and stop tokens end sequences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm.config import ModelConfig
from catsim.llm.model import forward, init_params
from catsim.llm.rollout import SamplingConfig, generate, left_pad, sampling_logits

CFG = ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, architecture="Qwen3ForCausalLM", qk_norm=True)
PARAMS = init_params(CFG, jax.random.key(0), init_std=0.3)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
KEY = jax.random.key(42)


def _run(rows, sampling, width=None):
    """rows: list of (prompt index, sample index)."""
    tokens, mask = left_pad([PROMPTS[p] for p, _ in rows], length=width)
    ids = jnp.asarray([p for p, _ in rows], jnp.int32)
    samples = jnp.asarray([s for _, s in rows], jnp.int32)
    return jax.device_get(generate(PARAMS, CFG, sampling, tokens, mask, KEY, ids, samples))


def test_samples_do_not_depend_on_batch_layout():
    sampling = SamplingConfig(max_new_tokens=10, temperature=1.0, top_k=20, top_p=0.95)
    rows = [(p, s) for p in range(3) for s in range(2)]
    base = _run(rows, sampling)
    shuffled = [rows[i] for i in (4, 1, 5, 0, 3, 2)]
    other = _run(shuffled, sampling, width=9)  # different order, batch position and padding width
    subset = _run(rows[2:4], sampling)  # a smaller batch
    for got, layout in ((other, shuffled), (subset, rows[2:4])):
        for j, row in enumerate(layout):
            i = rows.index(row)
            np.testing.assert_array_equal(got.tokens_BxN[j], base.tokens_BxN[i])
            np.testing.assert_allclose(got.logprobs_BxN[j], base.logprobs_BxN[i], atol=1e-5)
    # ... while different sample indices and keys do give different completions.
    assert not np.array_equal(base.tokens_BxN[0], base.tokens_BxN[1])
    tokens, mask = left_pad([PROMPTS[0]])
    again = generate(PARAMS, CFG, sampling, tokens, mask, jax.random.key(43), jnp.asarray([0]),
                     jnp.asarray([0]))
    assert not np.array_equal(np.asarray(again.tokens_BxN[0]), base.tokens_BxN[0])


def test_logprobs_are_those_of_the_sampling_distribution():
    sampling = SamplingConfig(max_new_tokens=8, temperature=0.7, top_k=12, top_p=0.9)
    rows = [(p, s) for p in range(3) for s in range(2)]
    out = _run(rows, sampling)
    tokens, mask = left_pad([PROMPTS[p] for p, _ in rows])
    full = jnp.concatenate([tokens, out.tokens_BxN], axis=1)
    full_mask = jnp.concatenate([mask, out.mask_BxN], axis=1)
    logits_BxNxV = forward(PARAMS, CFG, full, mask_BxT=full_mask)[:, tokens.shape[1] - 1:-1]
    chosen = out.tokens_BxN[..., None]
    model_logp = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits_BxNxV)), chosen, -1)[..., 0]
    policy = jax.vmap(jax.vmap(lambda l: jax.nn.log_softmax(sampling_logits(l, sampling))))(logits_BxNxV)
    policy_logp = np.take_along_axis(np.asarray(policy), chosen, -1)[..., 0]
    m = out.mask_BxN
    np.testing.assert_allclose(out.model_logprobs_BxN[m], model_logp[m], atol=1e-5)
    np.testing.assert_allclose(out.logprobs_BxN[m], policy_logp[m], atol=1e-5)
    assert np.all(np.isfinite(policy_logp[m]))  # every sampled token was inside top-k and top-p
    # top-k really restricts: at most 12 tokens have finite sampling log-probability.
    assert int(np.isfinite(np.asarray(policy[0, 0])).sum()) <= 12
    assert np.all(out.logprobs_BxN[~m] == 0)


def test_sampling_logits_hand_computed():
    logits = jnp.log(jnp.asarray([0.5, 0.3, 0.15, 0.05]))
    keep = np.isfinite(np.asarray(sampling_logits(logits, SamplingConfig(1, top_p=0.7))))
    np.testing.assert_array_equal(keep, [True, True, False, False])  # 0.5 < 0.7 <= 0.8
    keep = np.isfinite(np.asarray(sampling_logits(logits, SamplingConfig(1, top_p=0.85))))
    np.testing.assert_array_equal(keep, [True, True, True, False])
    keep = np.isfinite(np.asarray(sampling_logits(logits, SamplingConfig(1, top_p=0.1))))
    np.testing.assert_array_equal(keep, [True, False, False, False])
    keep = np.isfinite(np.asarray(sampling_logits(logits, SamplingConfig(1, top_k=3))))
    np.testing.assert_array_equal(keep, [True, True, True, False])
    scaled = sampling_logits(logits, SamplingConfig(1, temperature=0.5))
    np.testing.assert_allclose(np.asarray(scaled), 2 * np.log([0.5, 0.3, 0.15, 0.05]), rtol=1e-6)


def test_first_token_frequencies_match_model_probabilities():
    """2,000 one-token samples of one prompt: empirical frequencies within 5 standard errors."""
    sampling = SamplingConfig(max_new_tokens=1, temperature=1.0)
    n = 2000
    tokens, mask = left_pad([PROMPTS[0]] * n)
    out = generate(PARAMS, CFG, sampling, tokens, mask, KEY, jnp.zeros(n, jnp.int32),
                   jnp.arange(n, dtype=jnp.int32))
    probs = np.asarray(jax.nn.softmax(forward(PARAMS, CFG, tokens[:1])[0, -1]))
    freq = np.bincount(np.asarray(out.tokens_BxN[:, 0]), minlength=CFG.vocab_size) / n
    se = np.sqrt(probs * (1 - probs) / n) + 1e-3
    assert np.all(np.abs(freq - probs) < 5 * se), np.abs(freq - probs).max()


def test_stop_tokens_end_sequences():
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    free = _run([(p, 0) for p in range(3)], greedy)
    assert free.mask_BxN.all() and not free.finished_B.any()
    stop = int(free.tokens_BxN[0, 3])  # the 4th greedy token of prompt 0 becomes a stop token
    out = _run([(p, 0) for p in range(3)], SamplingConfig(12, temperature=0.0, stop_tokens=(stop,), pad_token=1))
    for b in range(3):
        hits = np.flatnonzero(free.tokens_BxN[b] == stop)
        length = hits[0] + 1 if hits.size else 12
        assert out.lengths_B[b] == length and out.finished_B[b] == bool(hits.size)
        np.testing.assert_array_equal(out.tokens_BxN[b, :length], free.tokens_BxN[b, :length])
        assert np.all(out.tokens_BxN[b, length:] == 1) and not out.mask_BxN[b, length:].any()
    assert out.lengths_B[0] <= 4


@pytest.mark.parametrize("bad", [dict(max_new_tokens=0), dict(temperature=-1.0), dict(top_p=0.0),
                                 dict(top_p=1.5), dict(top_k=-1)])
def test_bad_sampling_config(bad):
    kwargs = {"max_new_tokens": 4, **bad}
    with pytest.raises(CatsimError):
        SamplingConfig(**kwargs)
