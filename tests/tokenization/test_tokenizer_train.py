"""Tokenizer training: WordPiece / byte-level BPE / Unigram, saved in the Hugging Face layout,
loaded back by load_tokenizer and by transformers.AutoTokenizer with identical ids."""

from __future__ import annotations

import pytest

from bertfamily.tokenization import load_tokenizer
from bertfamily.tokenization.training import train_tokenizer

TEXT = [
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.",
    "However little known the feelings or views of such a man may be on his first "
    "entering a neighbourhood, this truth is so well fixed in the minds of the families.",
    "Émile était très content à Paris.",
    "北京是中国的首都。",
    "My dear Mr. Bennet, said his lady to him one day, have you heard that Netherfield "
    "Park is let at last?",
] * 20
PROBE = ["Mr. Bennet heard the truth about Netherfield.", "Émile à Paris", "中国的首都"]


@pytest.mark.parametrize("kind,size", [("wordpiece", 300), ("bpe", 400), ("unigram", 200)])
def test_train_save_and_load_everywhere(tmp_path, kind, size):
    import transformers

    tok = train_tokenizer(TEXT, kind, size, min_frequency=1, output_dir=tmp_path)
    assert tok.vocab_size <= size
    ours = load_tokenizer(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in PROBE:
        ids = ours(text, return_tensors=None)["input_ids"][0]
        assert ids == tok(text, return_tensors=None)["input_ids"][0]
        assert ids == hf(text)["input_ids"], (kind, text)
        assert ids[0] == ours.cls_token_id and ids[-1] == ours.sep_token_id
    assert hf.mask_token == ours.mask_token and hf.pad_token_id == ours.pad_token_id
    pair = ours("first one", "second one", return_tensors=None)
    assert pair["input_ids"][0] == hf("first one", "second one")["input_ids"]


def test_wordpiece_specials_cjk_and_casing(tmp_path):
    tok = train_tokenizer(TEXT, "wordpiece", 300, min_frequency=1)
    assert [
        tok.pad_token_id,
        tok.unk_token_id,
        tok.cls_token_id,
        tok.sep_token_id,
        tok.mask_token_id,
    ] == [0, 1, 2, 3, 4]
    assert tok.tokenize("北京") == ["北", "京"]  # CJK: one character per token
    assert tok.tokenize("Émile") == tok.tokenize("emile")  # lower-cased, accents stripped
    cased = train_tokenizer(TEXT, "wordpiece", 300, min_frequency=1, lowercase=False)
    assert cased.tokenize("Mr") == ["Mr"]


def test_bpe_word_starts_and_mask(tmp_path):
    tok = train_tokenizer(TEXT, "bpe", 400, min_frequency=1)
    assert tok.special_tokens["mask"] == "<mask>" and tok.pad_token_id == 1
    assert all(t.startswith("Ġ") for t in tok.tokenize("a truth man")[1:])
    assert tok.decode(tok("a single man", return_tensors=None)["input_ids"][0]) == "a single man"


def test_bad_kind():
    with pytest.raises(ValueError, match="kind"):
        train_tokenizer(TEXT, "sentencepiece", 100)
