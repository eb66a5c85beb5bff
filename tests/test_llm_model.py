"""catsim.llm.model.transformer against the reference implementation (Hugging Face transformers, PyTorch CPU):
logits within 1e-4 in float32 and identical greedy generations, for each supported family."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from llm_helpers import LLAMA3_ROPE, hf_model, save_hf

from catsim.llm.model.checkpoint import load_model
from catsim.llm.model.transformer import forward, forward_cached, init_cache, init_params
from catsim.llm.rollout import SamplingConfig, generate, left_pad

torch = pytest.importorskip("torch", reason="the 'oracle' extra (PyTorch) is absent")

# One model per family; together they cover llama3 rope scaling, attention biases (Llama's optional,
# Qwen2's built-in), q/k norm, tied and untied embeddings.
CASES = {
    "llama-rope-llama3-bias": ("LlamaForCausalLM", dict(rope_scaling=LLAMA3_ROPE, attention_bias=True)),
    "qwen2-tied": ("Qwen2ForCausalLM", dict(tied=True)),
    "qwen3": ("Qwen3ForCausalLM", {}),
}


def _reference_logits(model, tokens, mask=None):
    with torch.no_grad():
        kwargs = {} if mask is None else {"attention_mask": torch.tensor(mask, dtype=torch.long)}
        return model(torch.tensor(tokens), **kwargs).logits.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_family_matches_transformers(case, tmp_path):
    """Logits within 1e-4 (float32) and identical greedy generations."""
    arch, kwargs = CASES[case]
    model = hf_model(arch, **kwargs)
    cfg, params = load_model(save_hf(model, tmp_path))
    assert cfg.architecture == arch and cfg.tie_word_embeddings == kwargs.get("tied", False)
    assert ("unembed" in params) != cfg.tie_word_embeddings
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, size=(2, 40))
    ref = _reference_logits(model, tokens)
    ours = np.asarray(forward(params, cfg, jnp.asarray(tokens)))
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.abs(ours - ref).max() <= 1e-4
    # The comparison is sensitive: dropping a family feature changes logits far beyond 1e-4.
    if cfg.rope_scaling is not None:
        wrong = np.asarray(forward(params, cfg.replace(rope_scaling=None), jnp.asarray(tokens)))
        assert np.abs(wrong - ref).max() > 1e-2
    if cfg.qk_norm:
        layers = dict(params["layers"], q_norm=jnp.ones_like(params["layers"]["q_norm"]))
        wrong = np.asarray(forward(dict(params, layers=layers), cfg, jnp.asarray(tokens)))
        assert np.abs(wrong - ref).max() > 1e-2

    # Greedy generation from left-padded prompts of different lengths.
    rng = np.random.default_rng(2)
    prompt, mask = left_pad([list(rng.integers(4, cfg.vocab_size, size=n)) for n in (7, 4, 7)])
    n_new = 12
    with torch.no_grad():
        expected = model.generate(input_ids=torch.tensor(np.asarray(prompt)),
                                  attention_mask=torch.tensor(np.asarray(mask), dtype=torch.long),
                                  max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                                  eos_token_id=None, pad_token_id=0).numpy()[:, prompt.shape[1]:]
    out = generate(params, cfg, SamplingConfig(max_new_tokens=n_new, temperature=0.0), prompt, mask,
                   jax.random.key(0))
    np.testing.assert_array_equal(np.asarray(out.tokens_BxN), expected)
    assert bool(out.mask_BxN.all())
    assert len(np.unique(expected)) > 3  # not a degenerate repetition


def test_padded_batch_and_cache_match_transformers(tmp_path):
    """Left padding (positions count real tokens) and the KV-cache path agree with HF."""
    model = hf_model("Qwen2ForCausalLM", seed=1)
    cfg, params = load_model(save_hf(model, tmp_path))
    rng = np.random.default_rng(1)
    prompts = [list(rng.integers(4, cfg.vocab_size, size=n)) for n in (9, 5)]
    tokens, mask = left_pad(prompts)
    ref = _reference_logits(model, np.asarray(tokens), np.asarray(mask))
    ours = np.asarray(forward(params, cfg, tokens, mask_BxT=mask))
    real = np.asarray(mask)
    assert np.abs(ours - ref)[real].max() <= 1e-4
    # Same logits through the cache: prefill the first 6 columns, then one token at a time.
    cache = init_cache(cfg, 2, tokens.shape[1])
    from catsim.llm.model.transformer import default_positions

    pos = default_positions(mask)
    got, cache = forward_cached(params, cfg, tokens[:, :6], pos[:, :6], mask[:, :6], cache)
    steps = [got]
    for t in range(6, tokens.shape[1]):
        got, cache = forward_cached(params, cfg, tokens[:, t:t + 1], pos[:, t:t + 1], mask[:, t:t + 1],
                                    cache)
        steps.append(got)
    cached = np.asarray(jnp.concatenate(steps, axis=1))
    assert np.abs(cached - ref)[real].max() <= 1e-4


def test_bfloat16_and_remat_close_to_float32():
    from catsim.llm.model.config import ModelConfig

    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, qkv_bias=True)
    params = init_params(cfg, jax.random.key(0), init_std=0.2)
    tokens = jax.random.randint(jax.random.key(1), (2, 16), 0, 64)
    ref = forward(params, cfg, tokens)
    bf_cfg = cfg.replace(dtype="bfloat16")
    bf = forward(jax.tree.map(lambda p: p.astype(jnp.bfloat16), params), bf_cfg, tokens)
    assert bf.dtype == jnp.float32
    err = float(jnp.abs(bf - ref).max())
    assert 1e-4 < err < 0.1 * float(jnp.abs(ref).max())  # bf16 rounding: visible but small

    def loss(p, c):
        return jnp.mean(jax.nn.logsumexp(forward(p, c, tokens), axis=-1))

    # Remat changes only what the backward pass stores (`transformer.remat_scan` recomputes each
    # block from its saved input): the gradients are those of the plain program, in float32 and
    # under bf16 compute (whose saved inputs are kept as raw bits).
    # (The reference attention, since the blockwise one rematerialises its own loop bodies.)
    cfg = cfg.replace(attention="reference")
    saved = "u16[2,2,16,32]"  # L x B x T x D layer inputs of the bf16 remat program, as bits
    for c, lean in ((cfg.replace(dtype="bfloat16"), False), (cfg.replace(dtype="bfloat16", remat=True), True)):
        assert (saved in str(jax.make_jaxpr(jax.grad(loss), static_argnums=1)(params, c))) == lean
    # float32: up to float32 rounding; bf16: a recomputed block rounds its bf16 activations anew
    # (a few bf16 ulps of the gradient's scale)
    for c, tol in ((cfg, 200 * float(jnp.finfo(jnp.float32).eps)), (cfg.replace(dtype="bfloat16"),
                                                                      4 * float(jnp.finfo(jnp.bfloat16).eps))):
        want = jax.grad(loss)(params, c)
        got = jax.grad(loss)(params, c.replace(remat=True))
        for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            assert g.dtype == w.dtype == jnp.float32
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=0, atol=tol * float(jnp.max(jnp.abs(w))))


@pytest.mark.parametrize("budget", [700, 1 << 24])  # 700: 3 tiles of 6 of the 16 positions (padded)
def test_tiled_mlp_under_remat_equals_the_whole_mlp(monkeypatch, budget):
    """Under remat the MLP runs over tiles of positions (`MLP_TILE_ELEMENTS` B x positions x F
    elements each): the same hidden states and gradients as the whole MLP, to float32 rounding."""
    from catsim.llm.model import transformer
    from catsim.llm.model.config import ModelConfig

    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, mlp_bias=True, attention="reference")
    params = init_params(cfg, jax.random.key(2), init_std=0.2)
    tokens = jax.random.randint(jax.random.key(3), (2, 16), 0, 64)

    def loss(p, c):
        h = transformer.hidden_states(p, c, tokens)
        return jnp.sum(jnp.sin(h)), h

    monkeypatch.setattr(transformer, "MLP_TILE_ELEMENTS", budget)
    tiled = str(jax.make_jaxpr(lambda p: jax.grad(loss, has_aux=True)(p, cfg.replace(remat=True)))(params))
    assert ("length=3" in tiled) == (budget == 700)
    (g_whole, h_whole), (g_tiled, h_tiled) = (jax.grad(loss, has_aux=True)(params, c)
                                              for c in (cfg, cfg.replace(remat=True)))
    eps = float(jnp.finfo(jnp.float32).eps)
    for got, want in zip(jax.tree.leaves((h_tiled, g_tiled)), jax.tree.leaves((h_whole, g_whole))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0,
                                   atol=200 * eps * float(jnp.max(jnp.abs(want))))
