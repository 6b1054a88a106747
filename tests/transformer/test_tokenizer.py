"""The sentencepiece wrapper: special ids, round trips, pieces, and any unicode input."""

from __future__ import annotations

import pytest

from transformer import Tokenizer
from transformer.checkpoint.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

NASTY = [
    "",
    " ",
    "   \t  \n ",
    "🙂👍🏽👨‍👩‍👧 🇩🇪",
    "中文字符和日本語のテキスト、한국어",
    "שלום עולם",
    "مرحبا بالعالم",
    "e\u0301 a\u0308 n\u0303 \u0300\u0301",
    "<script>alert('x')</script>",
    "<s> </s> <pad> <unk>",
    "\u200b\u200d\ufeff\u202e reversed",
    "\x00\x01\x7f",
    "a" * 2000,
    "Ⅻ ﬁ ＡＢＣ ½",
    "\ud800 lone surrogate",
]


def test_special_ids(tiny_tokenizer):
    assert (tiny_tokenizer.pad_id, tiny_tokenizer.unk_id, tiny_tokenizer.bos_id, tiny_tokenizer.eos_id) == (
        PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tiny_tokenizer.pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert len(tiny_tokenizer) == tiny_tokenizer.vocab_size > 4


def test_round_trip_on_the_corpus(tiny_tokenizer, tiny_corpus):
    lines = (tiny_corpus / "test.en").read_text().splitlines() + (tiny_corpus / "test.de").read_text().splitlines()
    assert lines
    for line in lines:
        ids = tiny_tokenizer.encode(line)
        assert ids and all(isinstance(i, int) and 4 <= i < tiny_tokenizer.vocab_size for i in ids)
        assert tiny_tokenizer.decode(ids) == line
        # specials are dropped by decode
        assert tiny_tokenizer.decode([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == line
        assert tiny_tokenizer.encode(line, add_bos=True, add_eos=True) == [BOS_ID, *ids, EOS_ID]
        pieces = tiny_tokenizer.pieces(ids)
        assert len(pieces) == len(ids) and all(isinstance(p, str) and p for p in pieces)
        assert "".join(pieces).replace("\u2581", " ").strip() == line


def test_encode_batch_equals_encode(tiny_tokenizer, tiny_corpus):
    lines = (tiny_corpus / "val.de").read_text().splitlines()[:10]
    assert tiny_tokenizer.encode_batch(lines) == [tiny_tokenizer.encode(line) for line in lines]
    assert tiny_tokenizer.encode_batch([]) == []


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_any_unicode_never_raises(tiny_tokenizer, text):
    ids = tiny_tokenizer.encode(text, add_eos=True)
    assert ids[-1] == EOS_ID
    assert all(isinstance(i, int) and 0 <= i < tiny_tokenizer.vocab_size for i in ids)
    pieces = tiny_tokenizer.pieces(ids)
    assert len(pieces) == len(ids) and all(isinstance(p, str) for p in pieces)
    assert isinstance(tiny_tokenizer.decode(ids), str)
    assert tiny_tokenizer.encode_batch([text, "a man"])[0] == ids[:-1]


def test_unknown_characters_become_unk(tiny_tokenizer):
    ids = tiny_tokenizer.encode("a 中 dog")
    known = tiny_tokenizer.encode("a dog")
    assert ids.count(UNK_ID) == 1  # only the unseen character
    rest = iter(i for i in ids if i != UNK_ID)
    assert all(i in rest for i in known)  # the known words keep their own pieces, in order
    assert tiny_tokenizer.pieces([UNK_ID]) == ["<unk>"]
    assert tiny_tokenizer.decode(ids).split() == ["a", "⁇", "dog"]  # sentencepiece marks an unknown piece ⁇


def test_clean_makes_any_text_valid_utf8():
    text = "ok \ud800 fine \U0001F415 é"
    cleaned = Tokenizer.clean(text)
    assert cleaned == "ok ? fine \U0001F415 é"  # a lone surrogate becomes "?", everything else stays
    cleaned.encode("utf-8")  # would raise on a lone surrogate


def test_save_and_reload(tiny_tokenizer, tmp_path):
    tiny_tokenizer.save(tmp_path / "tok.model")
    again = Tokenizer(tmp_path / "tok.model")
    also = Tokenizer(model_proto=(tmp_path / "tok.model").read_bytes())
    text = "A man rides a red bike in the park."
    assert again.encode(text) == also.encode(text) == tiny_tokenizer.encode(text)
    assert again.vocab_size == tiny_tokenizer.vocab_size
    with pytest.raises(ValueError):
        Tokenizer()


def test_training_is_deterministic(tiny_corpus):
    files = [tiny_corpus / "train.en", tiny_corpus / "train.de"]
    a = Tokenizer.train(files, vocab_size=60, seed=3)
    b = Tokenizer.train(files, vocab_size=60, seed=3)
    assert a.model_proto == b.model_proto
    assert a.pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    # one joint vocabulary: words of both languages are known (no <unk>)
    assert UNK_ID not in a.encode("Ein mann fährt fahrrad.") + a.encode("A man rides a bike.")
