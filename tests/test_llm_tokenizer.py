"""catsim.llm.model.tokenizer: tokenizer.json through `tokenizers`, chat templates in a Jinja sandbox."""

import json

import pytest
from llm_helpers import save_tokenizer

from catsim.errors import CatsimError
from catsim.llm.model.tokenizer import Tokenizer


def test_encode_decode_and_specials(tmp_path):
    save_tokenizer(tmp_path)
    tok = Tokenizer.from_dir(tmp_path)
    assert tok.encode("w0 w5 </s>") == [4, 9, 3]
    assert tok.decode([4, 9, 3]) == "w0 w5 </s>"
    assert tok.decode([4, 9, 3], skip_special_tokens=True) == "w0 w5"
    assert (tok.eos_token_id, tok.pad_token_id, tok.vocab_size) == (3, 0, 96)


def test_chat_template_renders_like_transformers(tmp_path):
    transformers = pytest.importorskip("transformers", reason="the 'oracle' extra (transformers) is absent")
    save_tokenizer(tmp_path)
    tok = Tokenizer.from_dir(tmp_path)
    messages = [{"role": "user", "content": "w7 w8"}, {"role": "assistant", "content": "w9"},
                {"role": "user", "content": "w10"}]
    ours = tok.apply_chat_template(messages)
    assert ours == "<s> w0 w7 w8 </s> w1 w9 </s> w0 w10 </s> w1 "
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert ours == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(messages[:1], add_generation_prompt=False) == "<s> w0 w7 w8 </s> "


def test_chat_template_is_sandboxed_and_errors_are_clear(tmp_path):
    save_tokenizer(tmp_path, chat_template="{{ messages.__class__.__mro__ }}")
    with pytest.raises(CatsimError, match="chat template"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "w1"}])
    save_tokenizer(tmp_path, chat_template="{{ raise_exception('only user turns') }}")
    with pytest.raises(CatsimError, match="chat template: only user turns"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "w1"}])
    save_tokenizer(tmp_path, chat_template="{% for %}")
    with pytest.raises(CatsimError, match="does not compile"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([])
    save_tokenizer(tmp_path, chat_template=None)
    with pytest.raises(CatsimError, match="no chat template"):
        Tokenizer.from_dir(tmp_path).apply_chat_template([])


def test_named_templates_and_jinja_file(tmp_path):
    save_tokenizer(tmp_path, chat_template=None)
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}!")
    assert Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "w3"}]) == "w3!"
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    assert Tokenizer.from_dir(tmp_path).apply_chat_template([]) == "D"


def test_missing_or_broken_tokenizer(tmp_path):
    with pytest.raises(CatsimError, match="no tokenizer.json"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(CatsimError, match="cannot be read by the tokenizers library"):
        Tokenizer.from_dir(tmp_path)
