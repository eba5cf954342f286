"""ERNIE 1.0 phrase-level masking: chunker phrases (English: TextBlob's shallow parser; Chinese:
jieba or gold words) masked as units, measured on real text: never partly masked."""

from __future__ import annotations

import numpy as np
import pytest

from bertfamily.objectives.instances import SpecialIds
from bertfamily.objectives.masking import MaskingConfig
from bertfamily.objectives.phrase_masking import (
    annotate_phrases,
    chinese_phrases,
    english_phrases,
    phrases,
)
from bertfamily.objectives.pretraining import _mask, build_instances, tokenize_documents

pytest.importorskip("textblob")

AUSTEN = (
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife."
)


def test_english_chunks_of_two_or_more_words():
    spans = english_phrases(AUSTEN)
    assert [AUSTEN[s:e] for s, e in spans] == [
        "a truth",
        "universally acknowledged",
        "a single man",
        "a good fortune",
        "must be",
        "a wife",
    ]


def test_chinese_phrases_from_jieba_and_from_gold_words():
    text = "中国政府今天发布了新的经济政策。"
    assert [text[s:e] for s, e in chinese_phrases(text)] == [
        "中国政府",
        "今天",
        "发布",
        "经济",
        "政策",
    ]
    # a People's Daily line, its gold segmentation (199801.txt: 中共中央/nt 总书记/n ...)
    line = "中共中央总书记、国家主席江泽民"
    gold = ["中共中央", "总书记", "、", "国家", "主席", "江", "泽民"]
    assert [line[s:e] for s, e in chinese_phrases(line, gold)] == [
        "中共中央",
        "总书记",
        "国家",
        "主席",
        "泽民",
    ]
    with pytest.raises(ValueError, match="spell"):
        chinese_phrases(line, ["中共", "总书记"])
    with pytest.raises(ValueError, match="language"):
        phrases(line, "klingon")


def test_corpus_entities_win_over_overlapping_phrases():
    from bertfamily.data.corpora import Sentence

    (doc,) = annotate_phrases([[Sentence(AUSTEN, [(8, 30)])]], "english")  # "a truth ... acknowl"
    assert doc[0].entities[0] == (8, 30)
    starts = [s for s, _ in doc[0].entities[1:]]
    assert 8 not in starts and 16 not in starts and starts[0] > 30


@pytest.mark.slow
def test_phrases_never_partly_masked_on_austen(minilm_tokenizer):
    """Pride and Prejudice, first 400 lines, MiniLM's WordPiece, 20 dynamic maskings per
    instance: with phrase masking every phrase inside an instance is masked whole or not at
    all, and phrases carry their share of the predictions; whole-word masking of the same
    instances does mask phrases partly (so the check can fail)."""
    from bertfamily.data.corpora import read_documents
    from bertfamily.resources.cache import fetch

    path = fetch("janeausten") / "pride_and_prejudice.txt"
    lines = [s for d in read_documents(path) for s in d][:400]
    docs = [lines[i : i + 20] for i in range(0, len(lines), 20)]
    annotated = annotate_phrases(docs, "english")
    n_phrases = sum(len(s.entities) for d in annotated for s in d)
    assert n_phrases > 500
    tok = minilm_tokenizer
    segments = tokenize_documents(annotated, tok)
    special = SpecialIds(cls=tok.cls_token_id, sep=tok.sep_token_id)
    instances = build_instances(segments, "packed", 128, special)
    rng = np.random.default_rng(0)
    kw = dict(vocab_size=tok.vocab_size, mask_id=tok.mask_token_id, special_ids=tok.all_special_ids)

    def fractions(strategy):
        out, in_phrase, total = [], 0, 0
        for inst in instances:
            for _ in range(20):
                labels = _mask(inst, MaskingConfig(strategy=strategy), rng, **kw).labels
                chosen = labels != -100
                out += [chosen[s:e].mean() for s, e in inst.entities]
                in_phrase += sum(int(chosen[s:e].sum()) for s, e in inst.entities)
                total += int(chosen.sum())
        return np.asarray(out), in_phrase / total

    phrase, share = fractions("entity")
    assert len(phrase) > 10_000
    assert set(np.unique(phrase)) == {0.0, 1.0}  # never partly masked
    assert 0.1 < phrase.mean() < 0.2  # about the 15 % rate, in whole phrases
    assert share > 0.3  # a real part of the predictions are phrases
    words, _ = fractions("whole_word")
    assert ((words > 0) & (words < 1)).sum() > 1000
