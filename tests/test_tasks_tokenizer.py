"""Character tokenizer: ids, specials, round trip, tokenizer.json save/load."""

from __future__ import annotations

import pytest
import tokenizers

from catsim.errors import CatsimError
from catsim.llm.tasks import make_task
from catsim.llm.tasks.char_tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    build_char_tokenizer,
    decode_completion,
)
from catsim.llm.tasks.grid import ALPHABET


def test_ids_and_specials():
    tok = build_char_tokenizer(ALPHABET)
    assert [tok.token_to_id(t) for t in ("<pad>", "<bos>", "<eos>", "<unk>")] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID]
    assert tok.get_vocab_size() == 4 + len(set(ALPHABET))
    ids = tok.encode("#S\n>UD").ids
    assert ids[0] == BOS_ID and len(ids) == 7
    assert [tok.id_to_token(i) for i in ids[1:]] == ["#", "S", "\n", ">", "U", "D"]
    assert tok.encode("Z#").ids == [BOS_ID, UNK_ID, tok.token_to_id("#")]
    assert tok.encode("UD", add_special_tokens=False).ids == [tok.token_to_id("U"), tok.token_to_id("D")]


@pytest.mark.parametrize("name", ["maze", "paths"])
def test_round_trip_and_file(name, tmp_path):
    task = make_task(name, n_heldout=3)
    tok = build_char_tokenizer(task.alphabet)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    loaded = tokenizers.Tokenizer.from_file(str(path))
    for prompt in task.prompts("heldout", 0):
        text = prompt.text + prompt.answers[0]
        ids = tok.encode(text).ids
        assert len(ids) == 1 + len(text) and UNK_ID not in ids
        assert loaded.encode(text).ids == ids
        assert tok.decode(ids) == text
        answer_ids = tok.encode(prompt.answers[0], add_special_tokens=False).ids
        assert decode_completion(tok, answer_ids + [EOS_ID, 5, 6]) == prompt.answers[0]
        assert decode_completion(tok, answer_ids + [PAD_ID]) == prompt.answers[0]


def test_bad_alphabets():
    with pytest.raises(CatsimError):
        build_char_tokenizer("")
