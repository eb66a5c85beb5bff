"""catsim.llm.rollout: KV-cache sampling is reproducible per (prompt id, sample index), its
log-probabilities are those of the distribution sampled, and stop tokens end sequences."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from catsim.errors import CatsimError
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import forward, init_params
from catsim.llm.rollout import SamplingConfig, generate, left_pad, sampling_logits

CFG = ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2, head_dim=8, architecture="Qwen3ForCausalLM", qk_norm=True)
PARAMS = init_params(CFG, jax.random.key(0), init_std=0.3)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
KEY = jax.random.key(42)


def _run(rows, sampling, width=None, params=None):
    """rows: list of (prompt index, sample index)."""
    tokens, mask = left_pad([PROMPTS[p] for p, _ in rows], length=width)
    ids = jnp.asarray([p for p, _ in rows], jnp.int32)
    samples = jnp.asarray([s for _, s in rows], jnp.int32)
    return jax.device_get(generate(PARAMS if params is None else params, CFG, sampling, tokens, mask, KEY,
                                   ids, samples))


# One sampling configuration and batch shape for most tests, so they share compiled programs.
SAMPLING = SamplingConfig(max_new_tokens=10, temperature=0.7, top_k=20, top_p=0.95)
ROWS = [(p, s) for p in range(3) for s in range(2)]


def test_samples_do_not_depend_on_batch_layout():
    base = _run(ROWS, SAMPLING)
    shuffled = [ROWS[i] for i in (4, 1, 5, 0)]
    other = _run(shuffled, SAMPLING, width=9)  # another batch size, order, position and padding width
    for j, row in enumerate(shuffled):
        i = ROWS.index(row)
        np.testing.assert_array_equal(other.tokens_BxN[j], base.tokens_BxN[i])
        np.testing.assert_allclose(other.logprobs_BxN[j], base.logprobs_BxN[i], atol=1e-5)
    # ... while different sample indices and keys do give different completions.
    assert not np.array_equal(base.tokens_BxN[0], base.tokens_BxN[1])
    tokens, mask = left_pad([PROMPTS[p] for p, _ in ROWS])
    again = generate(PARAMS, CFG, SAMPLING, tokens, mask, jax.random.key(43),
                     jnp.asarray([p for p, _ in ROWS]), jnp.asarray([s for _, s in ROWS]))
    assert not np.array_equal(np.asarray(again.tokens_BxN), base.tokens_BxN)


def test_logprobs_are_those_of_the_sampling_distribution():
    out = _run(ROWS, SAMPLING)
    tokens, mask = left_pad([PROMPTS[p] for p, _ in ROWS])
    full = jnp.concatenate([tokens, out.tokens_BxN], axis=1)
    full_mask = jnp.concatenate([mask, out.mask_BxN], axis=1)
    logits_BxNxV = forward(PARAMS, CFG, full, mask_BxT=full_mask)[:, tokens.shape[1] - 1:-1]
    chosen = out.tokens_BxN[..., None]
    model_logp = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits_BxNxV)), chosen, -1)[..., 0]
    policy = jax.vmap(jax.vmap(lambda l: jax.nn.log_softmax(sampling_logits(l, SAMPLING))))(logits_BxNxV)
    policy_logp = np.take_along_axis(np.asarray(policy), chosen, -1)[..., 0]
    m = out.mask_BxN
    assert m.all()
    np.testing.assert_allclose(out.model_logprobs_BxN, model_logp, atol=1e-5)
    np.testing.assert_allclose(out.logprobs_BxN, policy_logp, atol=1e-5)
    assert np.all(np.isfinite(policy_logp))  # every sampled token was inside top-k and top-p
    assert np.all(np.isfinite(np.asarray(policy)).sum(-1) <= 20)  # top-k really restricts
    assert np.abs(out.logprobs_BxN - out.model_logprobs_BxN).max() > 0.05  # and differs from the model


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


def test_first_token_frequencies_match_sampling_distribution():
    """1,800 first tokens of prompt 0 (300 batches of 6 sample indices): empirical frequencies of the
    filtered, tempered distribution within 5 standard errors."""
    tokens, mask = left_pad([PROMPTS[0]] * 6)
    prompt_ids = jnp.zeros(6, jnp.int32)
    firsts = []
    for start in range(0, 1800, 6):
        out = generate(PARAMS, CFG, SAMPLING, tokens, mask, KEY, prompt_ids,
                       jnp.arange(start, start + 6, dtype=jnp.int32))
        firsts.append(np.asarray(out.tokens_BxN[:, 0]))
    logits = forward(PARAMS, CFG, tokens[:1])[0, -1]
    probs = np.asarray(jax.nn.softmax(sampling_logits(logits, SAMPLING)))
    n = 1800
    freq = np.bincount(np.concatenate(firsts), minlength=CFG.vocab_size) / n
    se = np.sqrt(probs * (1 - probs) / n) + 1e-3
    assert np.all(np.abs(freq - probs) < 5 * se), np.abs(freq - probs).max()
    assert np.all(freq[probs == 0] == 0)


def test_stop_tokens_end_sequences():
    free = _run(ROWS, SAMPLING)
    assert not free.finished_B.any()
    stop = int(free.tokens_BxN[0, 3])  # the 4th token of row 0 becomes a stop token
    with_stop = SamplingConfig(**{**SAMPLING.__dict__, "stop_tokens": (stop,), "pad_token": 1})
    out = _run(ROWS, with_stop)
    for b in range(len(ROWS)):
        hits = np.flatnonzero(free.tokens_BxN[b] == stop)
        length = hits[0] + 1 if hits.size else 10
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


@pytest.mark.parametrize("sampling", [SAMPLING, SamplingConfig(max_new_tokens=10, temperature=0.0)])
def test_decoding_with_split_layers_equals_the_layer_scan(sampling, monkeypatch):
    """The CPU default decodes with per-layer weight arrays (`split_layers`, straight-line
    blocks); accelerators with the scan over the stacked weights. Same tokens and log-probs."""
    from catsim.llm.rollout import decode

    out = {}
    for split in (True, False):
        monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", split)
        jax.clear_caches()  # the choice is read when `generate` is traced
        out[split] = _run(ROWS, sampling)
    np.testing.assert_array_equal(out[True].tokens_BxN, out[False].tokens_BxN)
    np.testing.assert_array_equal(out[True].mask_BxN, out[False].mask_BxN)
    np.testing.assert_allclose(out[True].logprobs_BxN, out[False].logprobs_BxN, atol=1e-5)
    np.testing.assert_allclose(out[True].model_logprobs_BxN, out[False].model_logprobs_BxN, atol=1e-5)
    jax.clear_caches()


def test_layers_are_split_only_on_the_cpu_and_when_the_copy_fits(monkeypatch):
    """The per-layer copy is made on the CPU backend when it takes at most half of the host
    memory available (MemAvailable); `DECODE_SPLIT_LAYERS` overrides."""
    import sys

    from catsim.llm.rollout import decode

    if sys.platform == "linux":
        assert decode._available_host_bytes() > 0
    monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", None)
    monkeypatch.setattr(decode, "_available_host_bytes", lambda: 10 * 2**30)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert decode.split_layers_for_decode(4 * 2**30)
    assert not decode.split_layers_for_decode(6 * 2**30)  # more than half of what is available
    monkeypatch.setattr(decode, "_available_host_bytes", lambda: None)
    assert not decode.split_layers_for_decode(1)
    monkeypatch.setattr(decode, "_available_host_bytes", lambda: 10 * 2**30)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert not decode.split_layers_for_decode(1)
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(jax, "process_count", lambda: 2)  # processes must agree: no local rule
    assert not decode.split_layers_for_decode(1)
    monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", True)
    assert decode.split_layers_for_decode(6 * 2**30)


def test_split_layers_released_equals_the_copy_and_frees_the_stacked_weights():
    from catsim.llm.model.transformer import split_layers

    stacked = jax.tree.map(jnp.copy, PARAMS)  # its own arrays, to be deleted
    copied = split_layers(PARAMS)
    released = split_layers(stacked, release=True)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(stacked["layers"]))
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(PARAMS))
    assert len(released["layers"]) == CFG.num_layers
    for a, b in zip(jax.tree.leaves(copied), jax.tree.leaves(released), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert split_layers(released) is released  # already split: as it is


def test_decode_params_split_once_for_generate(monkeypatch):
    """`catsim llm sample`'s layout: the layers split and the stacked arrays released before
    `generate`, which then runs them as they are; the same tokens and log-probs as the stack."""
    from catsim.llm.rollout import decode

    monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", False)
    params = jax.tree.map(jnp.copy, PARAMS)
    assert decode.decode_params(params) is params  # where generate keeps the stack, so does this
    monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", True)
    laid_out = decode.decode_params(params)
    assert isinstance(laid_out["layers"], list)
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(params["layers"]))
    jax.clear_caches()  # generate (still told to split) runs the split layers as they are
    ours, stacked = _run(ROWS, SAMPLING, params=laid_out), _run(ROWS, SAMPLING)
    np.testing.assert_array_equal(ours.tokens_BxN, stacked.tokens_BxN)
    np.testing.assert_allclose(ours.logprobs_BxN, stacked.logprobs_BxN, atol=1e-5)
    jax.clear_caches()


def test_laid_out_is_decode_layout_in_one_program_and_a_no_op_when_nothing_changes(monkeypatch):
    """The cascade engine lays the weights out by one compiled program (`decode.laid_out`): what
    `decode_layout` gives, and the very arrays when they are cast and split already."""
    from catsim.llm.model.transformer import split_layers
    from catsim.llm.rollout import decode

    for split in (True, False):
        monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", split)
        ours, eager = decode.laid_out(PARAMS, CFG), decode.decode_layout(PARAMS, CFG)
        assert isinstance(ours["layers"], list) == split == isinstance(eager["layers"], list)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(eager), strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", True)
    done = split_layers(PARAMS)
    assert decode.laid_out(done, CFG) is done  # split (and float32) already: no copy
    monkeypatch.setattr(decode, "DECODE_SPLIT_LAYERS", False)
    assert decode.laid_out(PARAMS, CFG) is PARAMS
    half = CFG.replace(dtype="bfloat16")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(decode.laid_out(PARAMS, half)))


def test_greedy_token_is_the_first_maximum():
    from catsim.llm.sampling import first_max_index

    x = jnp.asarray([0.5, 2.0, -1.0, 2.0, 1.0])
    assert int(first_max_index(x)) == 1 == int(jnp.argmax(x))
    y = jax.random.normal(jax.random.key(0), (7, 151))
    assert np.array_equal(np.asarray(jax.vmap(first_max_index)(y)), np.asarray(jnp.argmax(y, -1)))


@pytest.mark.parametrize("engine", ["static", "cascade"])
def test_a_varying_temperature_reuses_the_compiled_decoder(engine, caplog):
    """With `temperature_varies` (the asym-GRPO schedule: a new τ each step) the temperature is
    traced, not part of the decoder's compiled key. Compiled in, it cost a new decoder every step:
    2-5 s a step on the Maze study and a pile of compiled code that ended the run. The same rows as
    with τ compiled in: the same tokens and model log-probs, bit for bit, and sampling log-probs
    within rtol 1e-5 (the spread measured was 1.0e-6 relative)."""
    tokens, mask = left_pad([PROMPTS[p] for p, _ in ROWS])
    ids, samples = jnp.asarray([p for p, _ in ROWS]), jnp.asarray([s for _, s in ROWS])
    compiles = []
    for tau in (1.0, 0.37, 0.81, 1.3):
        fixed = SamplingConfig(max_new_tokens=6, temperature=tau, top_k=20, top_p=0.95)
        caplog.clear()
        with caplog.at_level("WARNING", logger="jax"), jax.log_compiles():
            out = jax.device_get(generate(PARAMS, CFG, dataclasses.replace(fixed, temperature_varies=True),
                                          tokens, mask, KEY, ids, samples, engine=engine))
        compiles.append([r.getMessage() for r in caplog.records
                         if r.getMessage().startswith(("Compiling jit(_chunk)", "Compiling jit(_generate_static)"))])
        old = jax.device_get(generate(PARAMS, CFG, fixed, tokens, mask, KEY, ids, samples, engine=engine))
        np.testing.assert_array_equal(out.tokens_BxN, old.tokens_BxN)
        np.testing.assert_array_equal(out.model_logprobs_BxN, old.model_logprobs_BxN)
        np.testing.assert_allclose(out.logprobs_BxN, old.logprobs_BxN, rtol=1e-5, atol=1e-6)
    assert compiles[0] and compiles[1:] == [[], [], []], compiles


def test_a_fixed_temperature_is_compiled_in_as_before():
    """Without `temperature_varies` the engines decode with τ compiled in, as every published run
    did: the public path is the constant one, bit for bit."""
    from catsim.llm.rollout import static as static_engine

    tokens, mask = left_pad([PROMPTS[p] for p, _ in ROWS])
    ids, samples = jnp.asarray([p for p, _ in ROWS]), jnp.asarray([s for _, s in ROWS])
    out = jax.device_get(generate(PARAMS, CFG, SAMPLING, tokens, mask, KEY, ids, samples, engine="static"))
    old = jax.device_get(static_engine._generate_static(PARAMS, CFG, SAMPLING, None, tokens, mask, KEY, ids, samples))
    for a, b in zip(out, old):
        np.testing.assert_array_equal(a, b)
