"""Length-sorted batching: every item once, longest first, results back in the caller's order."""

from __future__ import annotations

import shutil

import pytest

import bertfamily as bf
from bertfamily.data.batching import sorted_batches


def test_sorted_batches_cover_every_index_longest_first():
    lengths = [5, 1, 9, 3, 9, 2, 7]
    batches = list(sorted_batches(lengths, 3))
    assert [len(b) for b in batches] == [3, 3, 1]
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(7))
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    with pytest.raises(ValueError, match="batch_size"):
        list(sorted_batches(lengths, 0))


def test_classifier_pipeline_keeps_input_order(minilm_dir, tmp_path):
    from bertfamily.pipelines.tasks.classify import TextClassifier

    model = bf.from_pretrained(
        minilm_dir, heads=["classify"], new_heads=True, label_names=("neg", "pos")
    )
    model.save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(minilm_dir / name, tmp_path / name)
    clf = TextClassifier(tmp_path)
    texts = [
        "short",
        "a much longer sentence with many more tokens in it than the others",
        "medium length text",
        "x",
        "another fairly long sentence, but shorter",
    ]
    batched = clf(texts, batch_size=2, top_k=2)
    alone = [clf([t], batch_size=1, top_k=2)[0] for t in texts]
    for a, b in zip(batched, alone):
        assert [x["label"] for x in a] == [x["label"] for x in b]
        assert a[0]["score"] == pytest.approx(b[0]["score"], abs=1e-5)
