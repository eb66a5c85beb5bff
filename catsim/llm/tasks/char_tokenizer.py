"""A character-level tokenizer for the built-in tasks, built with Hugging Face `tokenizers`.

Ids: 0 = <pad>, 1 = <bos>, 2 = <eos>, 3 = <unk>, then one id per alphabet character in sorted
order. Encoding prepends <bos> (the post-processor), never adds <eos> (callers append it to
targets). Because it is a `tokenizers.Tokenizer`, it saves as `tokenizer.json` inside a Hugging Face
model directory and loads back with `tokenizers.Tokenizer.from_file`.
"""

from __future__ import annotations

from catsim.errors import CatsimError

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)


def _tokenizers():
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - the llm extra is part of CI
        raise CatsimError("the character tokenizer needs the 'llm' extra: pip install 'catsim[llm]'") from None
    return tokenizers


def build_char_tokenizer(alphabet: str):
    """A `tokenizers.Tokenizer` with one token per character of `alphabet` (plus the specials).

    Shapes: `encode(text).ids` has length 1 + len(text) (the <bos>, then one id per character;
    a character outside the alphabet becomes <unk>).
    """
    tk = _tokenizers()
    chars = sorted(set(alphabet))
    if not chars:
        raise CatsimError("alphabet is empty")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        if ch in vocab:
            raise CatsimError(f"alphabet character {ch!r} clashes with a special token")
        vocab[ch] = len(vocab)
    tokenizer = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = tk.decoders.Fuse()
    tokenizer.post_processor = tk.processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, BOS_ID)]
    )
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def decode_completion(tokenizer, ids) -> str:
    """Text of generated ids up to (not including) the first <eos>; padding and specials dropped."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS_ID:
            break
        out.append(i)
    return tokenizer.decode(out, skip_special_tokens=True)
