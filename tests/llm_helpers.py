"""Tiny random Hugging Face models and tokenizers for the catsim.llm tests (not a test module)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

VOCAB = 96
WORDS = [f"w{i}" for i in range(VOCAB - 4)]
SPECIALS = ["<pad>", "<unk>", "<s>", "</s>"]

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}


def hf_config(arch: str, *, tied: bool = False, rope_scaling: dict | None = None,
              attention_bias: bool = False):
    """A 2-layer, hidden-32..64 config of the given family (GQA: 4 query heads, 2 KV heads)."""
    transformers = pytest.importorskip("transformers", reason="the 'oracle' extra (transformers) is absent")
    common = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  tie_word_embeddings=tied, rms_norm_eps=1e-5, bos_token_id=2, eos_token_id=3,
                  pad_token_id=0)
    if arch == "LlamaForCausalLM":
        cfg = transformers.LlamaConfig(rope_theta=500000.0, attention_bias=attention_bias,
                                       rope_scaling=rope_scaling, **common)
    elif arch == "Qwen2ForCausalLM":
        cfg = transformers.Qwen2Config(rope_theta=1000000.0, rope_scaling=rope_scaling, **common)
    elif arch == "Qwen3ForCausalLM":
        cfg = transformers.Qwen3Config(rope_theta=1000000.0, head_dim=16, attention_bias=attention_bias,
                                       rope_scaling=rope_scaling, **common)
    else:
        raise ValueError(arch)
    cfg.architectures = [arch]
    return cfg


def hf_model(arch: str, seed: int = 0, **kwargs):
    """A random model of `arch` in float32 eval mode; every weight (norms and biases included)
    randomised so that each one influences the logits."""
    torch = pytest.importorskip("torch", reason="the 'oracle' extra (PyTorch) is absent")
    transformers = pytest.importorskip("transformers", reason="the 'oracle' extra (transformers) is absent")
    torch.manual_seed(seed)
    cls = getattr(transformers, arch)
    model = cls(hf_config(arch, **kwargs)).to(torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    return model


def save_hf(model, directory: Path, **kwargs) -> Path:
    model.save_pretrained(str(directory), safe_serialization=True, **kwargs)
    return directory


def tiny_tokenizer():
    """A WordLevel `tokenizers.Tokenizer` over 'w0'..'w91' plus 4 specials (ids 0..3)."""
    tokenizers = pytest.importorskip("tokenizers", reason="the 'llm' extra (tokenizers) is absent")
    vocab = {tok: i for i, tok in enumerate(SPECIALS + WORDS)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.add_special_tokens(SPECIALS)
    return tok


CHAT_TEMPLATE = (
    "{% for m in messages %}{{ bos_token + ' ' if loop.first else '' }}"
    "{{ 'w0' if m['role'] == 'user' else 'w1' }} {{ m['content'] }} {{ eos_token }} "
    "{% endfor %}{% if add_generation_prompt %}w1 {% endif %}")


def save_tokenizer(directory: Path, chat_template: str | None = CHAT_TEMPLATE) -> None:
    tiny_tokenizer().save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>", "special": True, "lstrip": False, "rstrip": False, "normalized": False, "single_word": False}, "pad_token": "<pad>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
