"""Chunked scoring: token log-probs and entropies formed slice by slice of the vocabulary, and
confidence weights chunk by chunk of positions, equal the full B x T x V computation, values and
gradients; tempered log-probs are the log-softmax of logits / τ."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.llm import scoring
from catsim.llm.model.transformer import forward, hidden_states, init_params, output_logits
from catsim.objectives import asymmetric, losses
from tests.llm_rl_helpers import tiny_config

CFG = tiny_config(40)
PARAMS = init_params(CFG, jax.random.key(3), init_std=0.5)
TOKENS = jax.random.randint(jax.random.key(4), (3, 23), 0, 40)
REAL = jnp.ones((3, 23), bool).at[0, :5].set(False).at[2, :2].set(False)  # left padding


def _full(params, temperature=1.0):
    logits = forward(params, CFG, TOKENS, mask_BxT=REAL)[:, :-1] / temperature
    return losses.action_log_probs(logits, TOKENS[:, 1:]), losses.entropy(logits)


def _close(a, b, scale=None):
    """Equal up to float32 rounding of numbers of the size of `b` (a few hundred ulps)."""
    scale = float(np.max(np.abs(np.asarray(b)))) if scale is None else scale
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=200 * np.finfo(np.float32).eps * scale)


def test_hidden_states_and_output_logits_are_forward():
    h = hidden_states(PARAMS, CFG, TOKENS, mask_BxT=REAL)
    _close(output_logits(PARAMS, CFG, h), forward(PARAMS, CFG, TOKENS, mask_BxT=REAL))


@pytest.mark.parametrize("chunk", [1, 7, 16, None])  # vocabulary slices (V = 40; 7, 16: the last overlaps)
@pytest.mark.parametrize("temperature", [1.0, 0.4])
def test_chunked_logps_and_entropy_equal_the_full_computation(chunk, temperature):
    logp, ent = scoring.token_logps(PARAMS, CFG, TOKENS, REAL, temperature=temperature, chunk=chunk)
    ref_logp, ref_ent = _full(PARAMS, temperature)
    assert logp.shape == ent.shape == (3, 22)
    _close(logp, ref_logp)
    _close(ent, ref_ent)
    only, none = scoring.token_logps(PARAMS, CFG, TOKENS, REAL, temperature=temperature, chunk=chunk,
                                     entropy=False)
    assert none is None
    _close(only, ref_logp)


def test_tempered_logps_are_the_sampling_distribution():
    """At τ the log-probs are log softmax(logits / τ) — a real distribution (they sum to 1 over the
    vocabulary) that differs from the τ = 1 one."""
    logp_hot, _ = scoring.token_logps(PARAMS, CFG, TOKENS, REAL, temperature=0.5)
    logp_one, _ = scoring.token_logps(PARAMS, CFG, TOKENS, REAL)
    logits = forward(PARAMS, CFG, TOKENS, mask_BxT=REAL)[:, :-1]
    manual = jnp.take_along_axis(jax.nn.log_softmax(2.0 * logits), TOKENS[:, 1:, None], axis=-1)[..., 0]
    _close(logp_hot, manual)
    assert float(jnp.max(jnp.abs(logp_hot - logp_one))) > 0.1


def test_chunked_gradients_equal_the_full_gradients():
    weights = jax.random.normal(jax.random.key(5), (3, 22))

    def loss(params, chunk):
        logp, ent = scoring.token_logps(params, CFG, TOKENS, REAL, temperature=0.7, chunk=chunk)
        return jnp.sum(weights * logp) + 0.3 * jnp.sum(ent)

    def ref_loss(params):
        logp, ent = _full(params, 0.7)
        return jnp.sum(weights * logp) + 0.3 * jnp.sum(ent)

    ref = jax.grad(ref_loss)(PARAMS)
    for chunk in (4, 7):
        got = jax.grad(loss)(PARAMS, chunk)
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
            _close(g, r)


def test_chunks_never_form_the_whole_logits():
    """With vocabulary slices the compiled forward and backward passes hold no logits of all
    B·(T−1) = 66 positions over the whole vocabulary; with one slice (chunk ≥ V) they do."""
    def hlo(chunk):
        def loss(p):
            logp, ent = scoring.token_logps(p, CFG, TOKENS, REAL, chunk=chunk)
            return jnp.sum(logp) + jnp.sum(ent)

        return jax.jit(jax.grad(loss)).lower(PARAMS).compile().as_text()

    whole = ("f32[66,40]", "f32[3,22,40]")
    assert any(w in hlo(None) for w in whole)
    assert not any(w in hlo(8) for w in whole)


def test_chunk_positions_follow_the_budget():
    assert scoring.chunk_positions(1, 8192, 151_936) == (1 << 25) // 151_936
    assert scoring.chunk_positions(64, 60, 50) == 60
    assert scoring.chunk_positions(64, 8192, 151_936) == 3
    assert scoring.chunk_positions(10_000, 10, 10_000) == 1


def test_chunked_confidence_equals_the_full_computation():
    h = hidden_states(PARAMS, CFG, TOKENS, mask_BxT=REAL)[:, :-1]
    ref = asymmetric.confidence_weight(forward(PARAMS, CFG, TOKENS, mask_BxT=REAL)[:, :-1], baseline=0.3)
    got = scoring.over_logit_chunks(PARAMS, CFG, h, lambda lg: asymmetric.confidence_weight(lg, baseline=0.3),
                                    chunk=6)
    _close(got, ref)


def test_logits_chunking_follows_the_mesh():
    """Vocabulary slices unless an FSDP axis splits the output projection along its vocabulary."""
    from types import SimpleNamespace

    def on(data, fsdp):
        return SimpleNamespace(mesh=SimpleNamespace(shape={"data": data, "fsdp": fsdp}))

    assert scoring.logits_chunking(None) == "vocab"
    assert scoring.logits_chunking(on(8, 1)) == "vocab"
    assert scoring.logits_chunking(on(2, 4)) == "positions"


@pytest.mark.parametrize("chunking", ["vocab", "positions"])
def test_token_logps_chunkings_agree(monkeypatch, chunking):
    monkeypatch.setattr(scoring, "logits_chunking", lambda sharding: chunking)
    weights = jax.random.normal(jax.random.key(6), (3, 22))

    def loss(params):
        logp, ent = scoring.token_logps(params, CFG, TOKENS, REAL, temperature=0.8, chunk=5)
        return jnp.sum(weights * logp) + 0.2 * jnp.sum(ent)

    def ref_loss(params):
        logp, ent = _full(params, 0.8)
        return jnp.sum(weights * logp) + 0.2 * jnp.sum(ent)

    for g, r in zip(jax.tree.leaves(jax.grad(loss)(PARAMS)), jax.tree.leaves(jax.grad(ref_loss)(PARAMS))):
        _close(g, r)
