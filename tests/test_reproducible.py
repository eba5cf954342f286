"""Reproducible runs: the same corpus and seed give a byte-identical tokenizer.json, the same
pretraining instances and bit-identical weights; the run directory records what repeats a run."""

from __future__ import annotations

import hashlib

import pytest

from bertfamily.fetch import fetch
from bertfamily.recipes.tokenizer import train_tokenizer


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_tokenizer_training_is_byte_identical(tmp_path, kind):
    # a real novel: with tokenizers' own WordPieceTrainer the ids of the ## characters (and
    # the merges tied on them) changed between two trainings of this file
    corpus = fetch("janeausten") / "persuasion.txt"
    digests = set()
    for i in range(2):
        train_tokenizer(corpus, kind, 1500, output_dir=tmp_path / str(i))
        digests.add(_sha(tmp_path / str(i) / "tokenizer.json"))
    assert len(digests) == 1


def test_wordpiece_vocabulary_is_that_of_the_wordpiece_trainer():
    """The tokens of tokenizers' WordPieceTrainer: the same alphabet (plain and ``##``), the
    same merges but where that trainer breaks ties between equal counts by its random ids."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    text = (fetch("janeausten") / "persuasion.txt").read_text(encoding="utf-8").splitlines()
    text = [line for line in text[:3000] if line.strip()] + ["Xerxes owned 3 boxes."]
    ours = train_tokenizer(text, "wordpiece", 800, min_frequency=2)
    ref = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    ref.normalizer = normalizers.BertNormalizer(lowercase=True)
    ref.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(
        vocab_size=800, min_frequency=2, special_tokens=specials, show_progress=False
    )
    ref.train_from_iterator(text, trainer=trainer)
    vocab, theirs = ours.backend.get_vocab(with_added_tokens=False), ref.get_vocab()
    order = sorted(vocab, key=vocab.get)
    assert order[:5] == specials
    alphabet = {t for t in vocab if len(t.removeprefix("##")) == 1}
    assert alphabet == {t for t in theirs if len(t.removeprefix("##")) == 1}
    assert "x" in vocab and "##x" in vocab  # every character also starts a word
    assert len(set(vocab) & set(theirs)) >= 0.98 * len(theirs)
    # the ## alphabet follows the plain one, then the merges
    assert order.index("z") < order.index("##a") < order.index("th")
