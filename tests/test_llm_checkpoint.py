"""Loading and saving Hugging Face model directories: sharded files, round trips through
transformers, and one-line errors for broken directories."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from llm_helpers import LLAMA3_ROPE, hf_model, save_hf, save_tokenizer

from catsim.errors import CatsimError
from catsim.llm.model import checkpoint
from catsim.llm.model.checkpoint import INDEX_FILE, load_model, save_model
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.tokenizer import Tokenizer
from catsim.llm.model.transformer import forward, init_params

torch = pytest.importorskip("torch", reason="the 'oracle' extra (PyTorch) is absent")
transformers = pytest.importorskip("transformers", reason="the 'oracle' extra (transformers) is absent")

TOKENS = np.random.default_rng(3).integers(0, 96, size=(2, 24))


def _hf_logits(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.numpy()


def test_sharded_checkpoint_loads_like_single_file(tmp_path):
    model = hf_model("Qwen3ForCausalLM", seed=4)
    save_hf(model, tmp_path / "one")
    save_hf(model, tmp_path / "many", max_shard_size="20KB")
    assert (tmp_path / "many" / INDEX_FILE).is_file() and not (tmp_path / "many" / "model.safetensors").exists()
    cfg1, p1 = load_model(tmp_path / "one")
    cfg2, p2 = load_model(tmp_path / "many")
    assert cfg1 == cfg2
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.abs(np.asarray(forward(p2, cfg2, jnp.asarray(TOKENS))) - _hf_logits(model)).max() <= 1e-4


@pytest.mark.parametrize(("file_dtype", "load_dtype", "direct"), [
    ("float32", "float32", True), ("bfloat16", "bfloat16", True), ("float32", "bfloat16", False)])
def test_direct_reads_equal_reads_through_safetensors(file_dtype, load_dtype, direct, tmp_path, monkeypatch):
    """Tensors stored in the dtype they are loaded in and not transposed (embedding, norms,
    biases) are read from the file straight into 64-byte-aligned host buffers, which XLA's CPU
    client then uses without a copy; every parameter equals the one read through `safetensors`,
    from a sharded directory (offsets in several files)."""
    model = hf_model("Qwen2ForCausalLM", seed=9).to(getattr(torch, file_dtype))
    src = save_hf(model, tmp_path / "m", max_shard_size="20KB")
    opened = []
    real_open = open
    monkeypatch.setattr(checkpoint, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k),
                        raising=False)
    _, fast = load_model(src, dtype=load_dtype)
    data_reads = len(opened) - len(list(src.glob("*.safetensors")))  # minus one header read per file
    assert (data_reads > 0) == direct
    assert np.asarray(fast["embed"]).ctypes.data % checkpoint._HOST_ALIGNMENT == 0 or not direct
    monkeypatch.setattr(checkpoint, "_data_offsets", lambda path: {})  # every tensor via safetensors
    _, mapped = load_model(src, dtype=load_dtype)
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(mapped)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("donatable", [False, True])
def test_donatable_parameters_are_reused_by_a_donating_update(donatable, tmp_path):
    """On the CPU a loaded parameter uses its host buffer as is, which a donating update cannot
    reuse for its result; `donatable=True` parameters (as `catsim llm rl` loads them) are."""
    if jax.default_backend() != "cpu":
        pytest.skip("host-buffer aliasing is a CPU property")
    src = save_hf(hf_model("Qwen2ForCausalLM", seed=10), tmp_path / "m")
    _, params = load_model(src, donatable=donatable)
    embed = params["embed"]
    before = embed.unsafe_buffer_pointer()
    after = jax.jit(lambda x: x * 2.0, donate_argnums=0)(embed)
    assert (after.unsafe_buffer_pointer() == before) == donatable


@pytest.mark.parametrize(("arch", "tied", "shard"), [("LlamaForCausalLM", False, "16KB"),
                                                      ("Qwen2ForCausalLM", True, "5GB"),
                                                      ("Qwen3ForCausalLM", False, "5GB")])
def test_save_round_trip_through_transformers(arch, tied, shard, tmp_path):
    """catsim save -> transformers load gives the original logits; catsim reload is bit-exact.
    The Llama case carries llama3 rope scaling, which must survive the written config.json."""
    extra = dict(rope_scaling=LLAMA3_ROPE) if arch == "LlamaForCausalLM" else {}
    model = hf_model(arch, seed=5, tied=tied, **extra)
    src = save_hf(model, tmp_path / "src")
    save_tokenizer(src)
    cfg, params = load_model(src)
    tok = Tokenizer.from_dir(src)
    out = save_model(tmp_path / "out", cfg, params, tokenizer=tok, max_shard_size=shard)
    assert (out / INDEX_FILE).is_file() == (shard == "16KB")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    assert type(reloaded).__name__ == arch
    if extra:
        rope = getattr(reloaded.config, "rope_parameters", None) or reloaded.config.rope_scaling  # 5.x / 4.x
        assert rope["rope_type"] == "llama3"
    assert np.abs(_hf_logits(reloaded) - _hf_logits(model)).max() <= 1e-5
    cfg2, params2 = load_model(out)
    assert cfg2 == cfg
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    tok2 = Tokenizer.from_dir(out)
    assert tok2.chat_template == tok.chat_template and tok2.eos_token == "</s>"
    assert tok2.encode("w5 w7 </s>") == tok.encode("w5 w7 </s>")


def test_bfloat16_save_is_bit_exact_in_transformers(tmp_path):
    model = hf_model("LlamaForCausalLM", seed=6)
    cfg, params = load_model(save_hf(model, tmp_path / "src"), dtype="bfloat16")
    assert cfg.dtype == "bfloat16" and params["embed"].dtype == jnp.bfloat16
    save_model(tmp_path / "bf16", cfg, params)
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "bf16"), dtype=torch.bfloat16)
    ours = np.asarray(params["layers"]["wq"][1].astype(jnp.float32)).T
    theirs = reloaded.model.layers[1].self_attn.q_proj.weight.float().detach().numpy()
    np.testing.assert_array_equal(ours, theirs)
    expected = model.model.layers[1].self_attn.q_proj.weight.to(torch.bfloat16).float().detach().numpy()
    np.testing.assert_array_equal(theirs, expected)


def test_float32_masters_load_and_save_as_bfloat16(tmp_path):
    """Mixed precision: bfloat16 compute over float32 weights read from the file; saving can
    halve the files (dtype="bfloat16"), which transformers reads back bit for bit."""
    model = hf_model("Qwen2ForCausalLM", seed=8)
    src = save_hf(model, tmp_path / "src")
    cfg, params = load_model(src, dtype="bfloat16", weight_dtype="float32")
    assert (cfg.dtype, cfg.param_dtype) == ("bfloat16", "float32")
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))
    _, exact = load_model(src, dtype="float32")
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(exact)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the forward pass computes in bfloat16: logits near the float32 ones, not equal to them
    ref = np.asarray(forward(exact, cfg.replace(dtype="float32", weight_dtype=None), jnp.asarray(TOKENS)))
    mixed = np.asarray(forward(params, cfg, jnp.asarray(TOKENS)))
    assert 0 < np.abs(mixed - ref).max() < 0.05 * np.abs(ref).max()

    save_model(tmp_path / "f32", cfg, params)  # default: the storage dtype, lossless
    assert json.loads((tmp_path / "f32" / "config.json").read_text())["dtype"] == "float32"
    save_model(tmp_path / "bf16", cfg, params, dtype="bfloat16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
    size = {d: sum(p.stat().st_size for p in (tmp_path / d).glob("*.safetensors")) for d in ("f32", "bf16")}
    assert size["bf16"] < 0.51 * size["f32"]
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "bf16"), dtype=torch.bfloat16)
    theirs = reloaded.model.layers[0].mlp.up_proj.weight.float().detach().numpy()
    ours = np.asarray(params["layers"]["w_up"][0].astype(jnp.bfloat16).astype(jnp.float32)).T
    np.testing.assert_array_equal(theirs, ours)
    with pytest.raises(CatsimError, match="dtype"):
        save_model(tmp_path / "bad", cfg, params, dtype="float16")
    with pytest.raises(CatsimError, match="weight_dtype"):
        load_model(src, weight_dtype="float16")


def test_init_params_save_load(tmp_path):
    cfg = ModelConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                      num_kv_heads=1, head_dim=8, architecture="Qwen2ForCausalLM", qkv_bias=True,
                      tie_word_embeddings=True, eos_token_ids=(3, 4))
    params = init_params(cfg, jax.random.key(0))
    save_model(tmp_path, cfg, params)
    cfg2, params2 = load_model(tmp_path)
    assert cfg2 == cfg
    np.testing.assert_array_equal(np.asarray(params["layers"]["bq"]), np.asarray(params2["layers"]["bq"]))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor(TOKENS % 50)).logits.numpy()
    assert np.abs(np.asarray(forward(params, cfg, jnp.asarray(TOKENS % 50))) - ref).max() <= 1e-4


def test_save_replaces_files_atomically_and_removes_another_layout(tmp_path, monkeypatch):
    """Each file is written through a temporary file and a rename: a save that fails while
    writing the weights leaves the previous model loadable. A single-file save over a sharded
    directory (and back) removes the other layout's files once the new ones are in place."""
    cfg = ModelConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_layers=2, num_heads=4,
                      num_kv_heads=1, head_dim=8, architecture="Qwen2ForCausalLM", qkv_bias=True)
    old, new = init_params(cfg, jax.random.key(0)), init_params(cfg, jax.random.key(1))
    save_model(tmp_path, cfg, old, max_shard_size="20KB")
    assert (tmp_path / INDEX_FILE).is_file()
    save_model(tmp_path, cfg, old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]

    real = checkpoint._safetensors()

    class Failing:  # writes half a file, then the disk fills up
        class numpy:  # noqa: N801
            @staticmethod
            def save_file(tensors, path, metadata=None):
                open(path, "wb").write(b"\0" * 100)
                raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint, "_safetensors", lambda: Failing)
    with pytest.raises(OSError, match="No space"):
        save_model(tmp_path, cfg, new)
    monkeypatch.setattr(checkpoint, "_safetensors", lambda: real)
    _, loaded = load_model(tmp_path)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(old)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    save_model(tmp_path, cfg, new, max_shard_size="20KB")
    assert not (tmp_path / "model.safetensors").exists() and (tmp_path / INDEX_FILE).is_file()
    _, loaded = load_model(tmp_path)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(new)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---------------------------------------------------------------------------- loading errors
@pytest.fixture
def good_dir(tmp_path):
    return save_hf(hf_model("LlamaForCausalLM", seed=7), tmp_path / "m")


def _edit_config(directory, **changes):
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def test_missing_directory_config_and_weights(good_dir, tmp_path):
    with pytest.raises(CatsimError, match="model directory not found"):
        load_model(tmp_path / "nope")
    (good_dir / "model.safetensors").rename(tmp_path / "elsewhere.safetensors")
    (good_dir / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(CatsimError, match=r"no model\.safetensors.*pytorch_model\.bin.*pickled weights are not loaded"):
        load_model(good_dir)
    (good_dir / "config.json").unlink()
    with pytest.raises(CatsimError, match="model config not found: .*config.json"):
        load_model(good_dir)


def test_missing_shard_and_missing_tensor(tmp_path):
    model = hf_model("Qwen2ForCausalLM", seed=8)
    many = save_hf(model, tmp_path / "many", max_shard_size="20KB")
    index = json.loads((many / INDEX_FILE).read_text())
    shard = sorted(set(index["weight_map"].values()))[-1]
    (many / shard).unlink()
    with pytest.raises(CatsimError, match=f"lists {shard}, which is missing"):
        load_model(many)
    one = save_hf(model, tmp_path / "one")
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(one / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, str(one / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CatsimError, match=r"tensor model\.layers\.1\.self_attn\.k_proj\.bias is missing"):
        load_model(one)


def test_wrong_shape(good_dir):
    _edit_config(good_dir, intermediate_size=81)
    with pytest.raises(CatsimError, match=r"model\.layers\.0\.mlp\.gate_proj\.weight has shape \[80, 48\], "
                                          r"config\.json implies \[81, 48\]"):
        load_model(good_dir)


def test_unexpected_tensor(good_dir):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(good_dir / "model.safetensors"))
    tensors["model.layers.0.mlp.experts.0.weight"] = np.zeros((2, 2), np.float32)
    save_file(tensors, str(good_dir / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CatsimError, match=r"unexpected tensors for LlamaForCausalLM: "
                                          r"model\.layers\.0\.mlp\.experts\.0\.weight"):
        load_model(good_dir)


@pytest.mark.parametrize(("changes", "message"), [
    (dict(architectures=["MistralForCausalLM"], model_type="mistral"),
     "unsupported architecture 'MistralForCausalLM'; supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM"),
    (dict(architectures=["GPT2LMHeadModel"]), "unsupported architecture 'GPT2LMHeadModel'"),
    (dict(model_type="qwen2"), "model_type 'qwen2' does not match architecture LlamaForCausalLM"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6}),
     "rope scaling type 'yarn' is not supported"),
    (dict(hidden_act="gelu"), "hidden_act 'gelu' is not supported"),
    (dict(use_sliding_window=True), "use_sliding_window=true is not supported"),
    (dict(num_key_value_heads=3), r"num_attention_heads \(4\) must be a multiple of num_key_value_heads \(3\)"),
])
def test_unsupported_configs(good_dir, changes, message):
    _edit_config(good_dir, **changes)
    with pytest.raises(CatsimError, match=message):
        load_model(good_dir)


def test_bad_json_and_cli_one_line_error(good_dir, capsys):
    (good_dir / "config.json").write_text("{ not json")
    with pytest.raises(CatsimError, match="not valid JSON"):
        load_model(good_dir)
    from catsim.cli.main import main

    assert main(["llm", "sample", "--model", str(good_dir), "--prompt", "w1", "--samples", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("catsim llm sample: error:") and "not valid JSON" in err and "\n" not in err
