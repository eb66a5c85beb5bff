"""Hugging Face tokenizers from local files: `tokenizer.json` via the `tokenizers` library, special
tokens and the chat template from `tokenizer_config.json` (or `chat_template.jinja`).

    tok = Tokenizer.from_dir("path/to/model")
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "2+2?"}]))
    text = tok.decode(ids)

Chat templates are Jinja programs shipped with the checkpoint; they are rendered in Jinja's
`ImmutableSandboxedEnvironment` (no attribute access to Python internals, no mutation), with the same
options and helpers `transformers` provides (`trim_blocks`, `lstrip_blocks`, `raise_exception`,
`strftime_now`, `tojson`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catsim.errors import CatsimError
from catsim.files import replacing, write_text


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise CatsimError("tokenizers need the 'llm' extra: pip install 'catsim[llm]'") from None
    return tokenizers


def _token_text(value: Any) -> str | None:
    """Special tokens appear either as strings or as AddedToken dicts {"content": ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


@dataclass
class Tokenizer:
    """A `tokenizers.Tokenizer` plus the special tokens and chat template of a checkpoint."""

    backend: Any  # tokenizers.Tokenizer
    chat_template: str | None = None  # Jinja source, or None when the checkpoint has none
    bos_token: str | None = None  # e.g. "<|begin_of_text|>"
    eos_token: str | None = None  # e.g. "<|im_end|>"
    pad_token: str | None = None  # padding token text, if any
    add_bos_token: bool | None = None  # tokenizer_config.json's add_bos_token, kept for saving
    config: dict[str, Any] = field(default_factory=dict)  # the rest of tokenizer_config.json

    @classmethod
    def from_dir(cls, directory: str | Path) -> Tokenizer:
        """Load `tokenizer.json` (required) and `tokenizer_config.json` / `chat_template.jinja`
        (optional) from a model directory."""
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise CatsimError(f"{directory}: no tokenizer.json (only fast tokenizers are supported)")
        try:
            backend = _tokenizers().Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust library raises plain Exceptions
            raise CatsimError(f"{path}: cannot be read by the tokenizers library ({err})") from None
        config: dict[str, Any] = {}
        config_path = directory / "tokenizer_config.json"
        if config_path.is_file():
            try:
                config = json.loads(config_path.read_text())
            except json.JSONDecodeError as err:
                raise CatsimError(f"{config_path}: not valid JSON ({err})") from None
        template = config.pop("chat_template", None)
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        jinja_path = directory / "chat_template.jinja"
        if template is None and jinja_path.is_file():
            template = jinja_path.read_text()
        return cls(
            backend=backend,
            chat_template=template,
            bos_token=_token_text(config.pop("bos_token", None)),
            eos_token=_token_text(config.pop("eos_token", None)),
            pad_token=_token_text(config.pop("pad_token", None)),
            add_bos_token=config.pop("add_bos_token", None),
            config=config,
        )

    # ------------------------------------------------------------------ ids
    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        return self.token_to_id(self.eos_token)

    @property
    def pad_token_id(self) -> int | None:
        return self.token_to_id(self.pad_token)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Special tokens written in the text (e.g. from a chat template) are
        recognised; `add_special_tokens` adds the post-processor's BOS/EOS."""
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Any, *, skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ chat template
    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """Render the checkpoint's chat template to text (encode it with `encode`)."""
        if self.chat_template is None:
            raise CatsimError("this tokenizer has no chat template (tokenizer_config.json "
                              "'chat_template' or chat_template.jinja)")
        template = _compile_template(self.chat_template)
        try:
            return template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "", eos_token=self.eos_token or "",
                pad_token=self.pad_token or "", **kwargs)
        except _TemplateError as err:
            raise CatsimError(f"chat template: {err}") from None

    # ------------------------------------------------------------------ saving
    def save(self, directory: str | Path) -> None:
        """Write tokenizer.json and tokenizer_config.json (with the chat template), each through a
        temporary file and a rename."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with replacing(directory / "tokenizer.json") as tmp:
            self.backend.save(str(tmp))
        config = dict(self.config)
        config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
        for key, value in (("bos_token", self.bos_token), ("eos_token", self.eos_token),
                           ("pad_token", self.pad_token), ("add_bos_token", self.add_bos_token),
                           ("chat_template", self.chat_template)):
            if value is not None:
                config[key] = value
        write_text(directory / "tokenizer_config.json", json.dumps(config, indent=2) + "\n")


class _TemplateError(Exception):
    pass


def _compile_template(source: str):
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise CatsimError("chat templates need jinja2 (pip install jinja2); it renders them in "
                          "a sandbox") from None

    def raise_exception(message: str):
        raise _TemplateError(message)

    def strftime_now(fmt: str) -> str:
        from datetime import datetime

        return datetime.now().strftime(fmt)

    def tojson(value, indent=None, **_):
        return json.dumps(value, indent=indent, ensure_ascii=False)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now)
    try:
        template = env.from_string(source)
    except jinja2.TemplateError as err:
        raise CatsimError(f"chat template does not compile: {err}") from None

    class _Safe:
        def render(self, **context):
            try:
                return template.render(**context)
            except jinja2.TemplateError as err:  # includes sandbox SecurityError
                raise _TemplateError(str(err)) from None

    return _Safe()
