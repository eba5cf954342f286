"""`EntityTagger` finds words and character offsets the way the model's tokenizer does, for any
script: Chinese (each CJK character a word), mixed Chinese/English/digits/emoji, and English;
entities agree with transformers' token-classification pipeline on the same checkpoint.

The checkpoint is a tiny BERT whose weights are set by hand so that each token's tag depends
on its id only: no position or type embeddings, attention and FFN outputs zero (each layer is
then the identity on layer-normed rows), the word embedding of a token one-hot on its tag's
dimension, and the classifier reading those dimensions.
"""

from __future__ import annotations

import pytest
import torch

import bertfamily as bf
from bertfamily.data.tables import tokenizer_words
from bertfamily.pipelines.tasks.ner import EntityTagger

LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
TAG_OF = {"李": "B-PER", "四": "I-PER", "深": "B-LOC", "圳": "I-LOC", "john": "B-PER"}
TAG_OF |= {"smith": "I-PER", "paris": "B-LOC", "王": "B-PER", "北": "B-LOC", "京": "I-LOC"}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TAG_OF, "去", "了", "在", "。", "，"]
VOCAB += ["went", "to", "and", "lives", "in", "##s", "1", "2", "3", "!", "the"]


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory):
    """A tiny hand-set BERT token classifier (saved by transformers) with our tokenizer."""
    import transformers

    path = tmp_path_factory.mktemp("ner-hand")
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    bf.load_tokenizer(path).save_pretrained(path)
    H = 16
    cfg = transformers.BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=H,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)},
    )
    torch.manual_seed(0)
    model = transformers.BertForTokenClassification(cfg).eval()
    with torch.no_grad():
        emb = model.bert.embeddings
        emb.position_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        emb.word_embeddings.weight.zero_()
        for i, tok in enumerate(VOCAB):
            emb.word_embeddings.weight[i, LABELS.index(TAG_OF.get(tok, "O"))] = 1.0
        for layer in model.bert.encoder.layer:
            for lin in (layer.attention.output.dense, layer.output.dense):
                lin.weight.zero_()
                lin.bias.zero_()
        model.classifier.weight.zero_()
        model.classifier.weight[:, : len(LABELS)] = torch.eye(len(LABELS))
        model.classifier.bias.zero_()
    model.save_pretrained(path)
    return path


def _ents(tagger, text):
    (ents,) = tagger(text)
    for e in ents:
        assert text[e.start : e.end] == e.text
    return [(e.type, e.text, e.start, e.end) for e in ents]


def _hf_ents(path, text, strategy="simple"):
    import transformers

    pipe = transformers.pipeline(
        "token-classification",
        model=str(path),
        tokenizer=str(path),
        aggregation_strategy=strategy,
        device="cpu",
    )
    return [
        (e["entity_group"], text[e["start"] : e["end"]], e["start"], e["end"]) for e in pipe(text)
    ]


CASES = [
    # Chinese: each character is a word; the sentence.
    ("李四去了深圳。", [("PER", "李四", 0, 2), ("LOC", "深圳", 4, 6)]),
    (
        "王在北京，李四在深圳。",
        [("PER", "王", 0, 1), ("LOC", "北京", 2, 4), ("PER", "李四", 5, 7), ("LOC", "深圳", 8, 10)],
    ),
    # Mixed scripts, digits, an emoji outside the BMP (one str index), no spaces between scripts.
    ("john smith去了深圳123!", [("PER", "john smith", 0, 10), ("LOC", "深圳", 12, 14)]),
    (
        "😀李四 went to paris 😀深圳",
        [("PER", "李四", 1, 3), ("LOC", "paris", 12, 17), ("LOC", "深圳", 19, 21)],
    ),
    # An emoji is not punctuation: "paris😀" is one word, unknown to the vocabulary (O).
    ("paris😀深圳", [("LOC", "深圳", 6, 8)]),
    ("Paris和John", [("LOC", "Paris", 0, 5), ("PER", "John", 6, 10)]),
    # English: punctuation is split off words as BERT's pre-tokeniser does.
    ("john went to paris!", [("PER", "john", 0, 4), ("LOC", "paris", 13, 18)]),
    ("  john  smith lives in paris", [("PER", "john  smith", 2, 13), ("LOC", "paris", 23, 28)]),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_entities_and_offsets(tagger_dir, text, expected):
    assert _ents(EntityTagger(tagger_dir), text) == expected


@pytest.mark.parametrize("text,expected", CASES)
def test_same_entities_as_transformers_simple(tagger_dir, text, expected):
    """Every word here is one token, so the first-sub-token word tags equal the token tags that
    transformers' "simple" aggregation groups."""
    assert _hf_ents(tagger_dir, text) == expected


def test_sub_words_take_the_first_tag_as_transformers_first(tagger_dir):
    """ "johns" is john + ##s: the word takes its first sub-token's tag (B-PER), as transformers'
    word-level "first" aggregation does; the whole word is the entity."""
    text = "johns went to 深圳。"
    ours = _ents(EntityTagger(tagger_dir), text)
    assert ours == [("PER", "johns", 0, 5), ("LOC", "深圳", 14, 16)]
    assert ours == _hf_ents(tagger_dir, text, "first")


def test_batch_scores_and_empty(tagger_dir):
    tagger = EntityTagger(tagger_dir)
    texts = ["李四去了深圳。", "", "   ", "the", "john went to paris!"]
    out = tagger(texts, batch_size=2)
    assert [len(x) for x in out] == [2, 0, 0, 0, 2]
    for ents in out:
        for e in ents:
            assert 0.9 < e.score <= 1.0
    assert [[(e.type, e.start, e.end) for e in x] for x in out] == [
        [(t, s, e) for t, _, s, e in _ents(tagger, x)] for x in texts
    ]


def test_tokenizer_words(tagger_dir):
    tok = bf.load_tokenizer(tagger_dir)
    text = "Hello李四 worlds😀12,Ab Café"
    words = tokenizer_words(tok, text)
    assert [text[a:b] for a, b in words] == ["Hello", "李", "四", "worlds😀12", ",", "Ab", "Café"]
    assert tokenizer_words(tok, text, end=6) == words[:3]
    assert tokenizer_words(tok, "") == []
