"""`chunked_logps.tempered_logps`: log-probs and entropies of softmax(h·wᵀ / τ) formed slice by
slice of the vocabulary or chunk by chunk of positions, with a hand-written backward pass. Values
and gradients (∂h, ∂w, ∂τ) must equal those autodiff gives for the full B x T x V computation, for a
tied (V x D) and an untied (D x V) projection, with and without the entropy, in float32 and under
bfloat16 compute."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm.chunked_logps import chunk_size, tempered_logps
from catsim.objectives import losses

B, T, D, V = 2, 5, 8, 37
KEYS = jax.random.split(jax.random.key(11), 5)
H = 2.0 * jax.random.normal(KEYS[0], (B, T, D))
W = jax.random.normal(KEYS[1], (V, D))  # V x D, as a tied embedding
TARGETS = jax.random.randint(KEYS[2], (B, T), 0, V)
G_LOGP = jax.random.normal(KEYS[3], (B, T))  # cotangents of the two outputs
G_ENT = jax.random.normal(KEYS[4], (B, T))
F32_EPS = float(np.finfo(np.float32).eps)


def _reference(h, w_vd, tau, dtype=jnp.float32):
    """Full-vocabulary logits as `output_logits` forms them (w cast to the compute dtype, float32
    products), then log-softmax and entropy."""
    z = jnp.einsum("btd,vd->btv", h.astype(dtype), w_vd.astype(dtype), preferred_element_type=jnp.float32) / tau
    return losses.action_log_probs(z, TARGETS), losses.entropy(z)


def _loss(outputs, entropy=True):
    logp, ent = outputs
    return jnp.sum(G_LOGP * logp) + (jnp.sum(G_ENT * ent) if entropy else 0.0)


def _close(a, b, ulps=200, eps=F32_EPS):
    """Equal up to `ulps` roundings (of `eps`) of numbers of the size of `b`."""
    scale = float(np.max(np.abs(np.asarray(b, np.float64))))
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=0,
                               atol=ulps * eps * scale)


# vocabulary slices of V = 37 (5, 10, 36: the last slice overlaps its predecessor) and chunks of
# the N = 10 positions (3, 4: the last chunk is padded)
CHUNKS = [("vocab", 1), ("vocab", 5), ("vocab", 10), ("vocab", 36), ("vocab", None),
          ("positions", 1), ("positions", 3), ("positions", 4), ("positions", None)]


@pytest.mark.parametrize(("over", "chunk"), CHUNKS)
def test_values_equal_the_full_log_softmax(over, chunk):
    logp, ent = tempered_logps(H, W, TARGETS, 0.6, over=over, chunk=chunk)
    ref_logp, ref_ent = _reference(H, W, 0.6)
    _close(logp, ref_logp)
    _close(ent, ref_ent)
    only, none = tempered_logps(H, W, TARGETS, 0.6, over=over, chunk=chunk, entropy=False)
    assert none is None
    _close(only, ref_logp)


@pytest.mark.parametrize("over", ["vocab", "positions"])
def test_probabilities_sum_to_one(over):
    """exp(log-prob) over every possible target of one position sums to 1 (a real distribution)."""
    h = jnp.broadcast_to(H[:1, :1], (1, V, D))
    logp, _ = tempered_logps(h, W, jnp.arange(V)[None], 0.8, over=over, chunk=6)
    np.testing.assert_allclose(float(jnp.sum(jnp.exp(logp))), 1.0, rtol=0, atol=50 * F32_EPS)


@pytest.mark.parametrize("entropy", [True, False])
@pytest.mark.parametrize(("over", "chunk"), [("vocab", 4), ("vocab", 7), ("vocab", 37), ("positions", 3),
                                             ("positions", 10), ("vocab", None)])  # None: whole logits
def test_gradients_equal_autodiff_tied(over, chunk, entropy):
    def ours(h, w, tau):
        return _loss(tempered_logps(h, w, TARGETS, tau, over=over, chunk=chunk, entropy=entropy), entropy)

    def ref(h, w, tau):
        return _loss(_reference(h, w, tau), entropy)

    got = jax.grad(ours, argnums=(0, 1, 2))(H, W, 0.7)
    want = jax.grad(ref, argnums=(0, 1, 2))(H, W, 0.7)
    for g, r in zip(got, want):
        assert g.shape == r.shape and g.dtype == r.dtype
        _close(g, r)


@pytest.mark.parametrize(("over", "chunk"), [("vocab", 6), ("positions", 4), ("vocab", None)])
def test_gradients_equal_autodiff_untied(over, chunk):
    """An untied `unembed` is D x V: its vocabulary is the second axis and ∂w comes back D x V."""
    def ours(h, w_dv, tau):
        return _loss(tempered_logps(h, w_dv, TARGETS, tau, vocab_axis=1, over=over, chunk=chunk))

    def ref(h, w_dv, tau):
        return _loss(_reference(h, w_dv.T, tau))

    got = jax.grad(ours, argnums=(0, 1, 2))(H, W.T, 1.3)
    want = jax.grad(ref, argnums=(0, 1, 2))(H, W.T, 1.3)
    assert got[1].shape == (D, V)
    for g, r in zip(got, want):
        _close(g, r)


@pytest.mark.parametrize(("over", "chunk"), [("vocab", 9), ("positions", 9), ("vocab", None)])
def test_gradients_under_jit_with_a_traced_temperature(over, chunk):
    fn = jax.jit(jax.grad(lambda h, w, tau: _loss(tempered_logps(h, w, TARGETS, tau, over=over, chunk=chunk)),
                          argnums=(0, 1, 2)))
    got = fn(H, W, jnp.float32(0.5))
    want = jax.grad(lambda h, w, tau: _loss(_reference(h, w, tau)), argnums=(0, 1, 2))(H, W, 0.5)
    for g, r in zip(got, want):
        _close(g, r)


@pytest.mark.parametrize(("over", "chunk"), [("vocab", 8), ("positions", 8), ("vocab", None)])
def test_bfloat16_compute_keeps_float32_gradients_of_float32_weights(over, chunk):
    """bf16 hidden states and float32 master weights (cast to bf16 slice by slice): the values
    equal the bf16-compute reference to float32 rounding (the same bf16 products); ∂w comes back
    float32 and equals autodiff's up to bf16 rounding (autodiff rounds ∂w to bf16 through the
    cast, the hand-written pass keeps it float32); ∂h comes back bf16."""
    h16 = H.astype(jnp.bfloat16)
    logp, ent = tempered_logps(h16, W, TARGETS, 0.9, over=over, chunk=chunk)
    ref_logp, ref_ent = _reference(h16, W, 0.9, jnp.bfloat16)
    _close(logp, ref_logp)
    _close(ent, ref_ent)

    def ours(h, w):
        return _loss(tempered_logps(h, w, TARGETS, 0.9, over=over, chunk=chunk))

    def ref(h, w):
        return _loss(_reference(h, w, 0.9, jnp.bfloat16))

    (dh, dw), (rh, rw) = jax.grad(ours, argnums=(0, 1))(h16, W), jax.grad(ref, argnums=(0, 1))(h16, W)
    assert dw.dtype == jnp.float32 and dh.dtype == jnp.bfloat16
    bf16_eps = float(jnp.finfo(jnp.bfloat16).eps)
    _close(dw, rw, ulps=4, eps=bf16_eps)
    _close(dh.astype(jnp.float32), rh.astype(jnp.float32), ulps=4, eps=bf16_eps)


def test_whole_logits_within_their_budget_and_slices_beyond_it():
    """chunk=None: whole logits while B·T·V fits `whole_budget` (one product of w fewer in the
    backward pass), vocabulary slices beyond it; both give autodiff's gradients."""
    from catsim.llm import chunked_logps

    def loss(budget):
        return lambda h, w: _loss(tempered_logps(h, w, TARGETS, 0.8, whole_budget=budget))

    whole = jax.make_jaxpr(jax.grad(loss(B * T * V), argnums=(0, 1)))(H, W)
    sliced = jax.make_jaxpr(jax.grad(loss(B * T * V - 1), argnums=(0, 1)))(H, W)
    assert "scan" not in str(whole) and "scan" in str(sliced)
    for got_w, got_s in zip(jax.grad(loss(B * T * V), argnums=(0, 1))(H, W),
                            jax.grad(loss(B * T * V - 1), argnums=(0, 1))(H, W)):
        _close(got_w, got_s)
    assert chunked_logps.WHOLE_LOGITS_ELEMENTS == 1 << 28  # 1 GiB of float32 logits


def test_chunk_size_follows_the_budget():
    assert chunk_size(8192, 151_936, "vocab") == (1 << 25) // 8192
    assert chunk_size(66, 40, "vocab") == 40
    assert chunk_size(1 << 26, 151_936, "vocab") == 1
    assert chunk_size(8192, 151_936, "positions") == (1 << 25) // 151_936
    assert chunk_size(66, 40, "positions") == 66
    assert chunk_size(8192, 1 << 26, "positions") == 1


def test_unknown_chunking_is_a_clear_error():
    with pytest.raises(CatsimError, match="over must be"):
        tempered_logps(H, W, TARGETS, over="rows")


@pytest.mark.parametrize(("over", "chunk"), [("vocab", 5), ("positions", 4), ("vocab", None)])
def test_a_logged_entropy_has_no_gradient(over, chunk):
    """entropy_grad=False: the same entropy values, and the gradient of logp alone whatever the
    entropy's cotangent (the RL loss logs the entropy at coefficient 0 without training it)."""
    def ours(h, w, tau):
        return _loss(tempered_logps(h, w, TARGETS, tau, over=over, chunk=chunk, entropy_grad=False))

    def logp_only(h, w, tau):
        return jnp.sum(G_LOGP * _reference(h, w, tau)[0])

    _, ent = tempered_logps(H, W, TARGETS, 0.7, over=over, chunk=chunk, entropy_grad=False)
    _close(ent, _reference(H, W, 0.7)[1])
    for g, r in zip(jax.grad(ours, argnums=(0, 1, 2))(H, W, 0.7), jax.grad(logp_only, argnums=(0, 1, 2))(H, W, 0.7)):
        _close(g, r)
