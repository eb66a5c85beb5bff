"""Model directories written by `save_model` are usable by others: file permissions."""

import os
import stat

import jax

from catsim.llm.model.checkpoint import save_model
from catsim.llm.model.config import ModelConfig
from catsim.llm.model.transformer import init_params


def test_saved_weights_are_as_readable_as_the_other_files(tmp_path):
    # safetensors creates its files 0600; a model directory shared on a cluster must not hide them
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=8, architecture="Qwen2ForCausalLM", qkv_bias=True)
    params = init_params(cfg, jax.random.key(0))
    for name, shard_bytes in (("one", None), ("many", 20_000)):
        kwargs = {} if shard_bytes is None else {"max_shard_size": shard_bytes}
        directory = save_model(tmp_path / name, cfg, params, **kwargs)
        expected = stat.S_IMODE(os.stat(directory / "config.json").st_mode)  # 0o666 & ~umask
        weights = sorted(directory.glob("*.safetensors"))
        assert len(weights) == 1 if shard_bytes is None else len(weights) > 1
        assert {stat.S_IMODE(os.stat(w).st_mode) for w in weights} == {expected}
