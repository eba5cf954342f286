"""One line convention in every reader (issue 32, item 4, and the new-user attack on it): a line
ends at ``\\n`` (or ``\\r\\n``) only, as ``wc -l``, ``sed -n Np`` and an editor number them. A
lone ``\\r``, U+2028 or a form feed inside a line stays in it, in text corpora, CSV fields,
JSONL and the index's own texts.jsonl; tables are read as tables by every command, never as
lines of text."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from bertfamily.data.tables import iter_lines, read_table, read_text, text_lines
from helpers import save_tiny

pytestmark = pytest.mark.usefixtures("one_thread")

CR_CORPUS = b"A cat sleeps on the sofa.\nStock\rmarkets fell today.\r\nThe train was late.\n"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, minilm_dir):
    return save_tiny(tmp_path_factory.mktemp("numbering") / "tiny", minilm_dir)


def _jsonl(result):
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in text_lines(result.stdout)]  # \u2028 is not a break


def test_the_readers_count_lines_as_sed_does(tmp_path):
    path = tmp_path / "cr.txt"
    path.write_bytes(CR_CORPUS)
    want = ["A cat sleeps on the sofa.", "Stock\rmarkets fell today.", "The train was late."]
    assert text_lines(read_text(path)) == want
    assert [line for _, line in iter_lines(path)] == want
    assert [n for n, _ in iter_lines(path)] == [1, 2, 3]


@pytest.mark.parametrize("source", ["corpus", "index"])
def test_search_names_a_hit_by_the_line_sed_prints(cli, tiny, tmp_path, source):
    corpus = tmp_path / "cr.txt"
    corpus.write_bytes(CR_CORPUS + "a line with\u2028a separator\n".encode())
    args = ["--corpus", str(corpus)]
    if source == "index":
        built = cli("index", "build", "--corpus", str(corpus), "-o", str(tmp_path / "idx"),
                    "--model", str(tiny), "--dtype", "fp32")  # fmt: skip
        assert built.exit_code == 0, built.output
        args = ["--index", str(tmp_path / "idx")]
    hits = _jsonl(cli("search", "train", *args, "--model", str(tiny), "--top-k", "10",
                      "--format", "jsonl", "--dtype", "fp32"))  # fmt: skip
    key = "line" if source == "corpus" else "id"
    by_line = {h[key]: h["text"] for h in hits}
    assert by_line == {
        1: "A cat sleeps on the sofa.",
        2: "Stock\rmarkets fell today.",
        3: "The train was late.",
        4: "a line with\u2028a separator",
    }


def test_an_index_whose_texts_hold_u2028_opens(tiny, tmp_path):
    """The instance: texts.jsonl holds U+2028 raw inside a JSON string; reading it with
    str.splitlines saw one row too many and refused the index."""
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    embedder = SentenceEmbedder(tiny, dtype="fp32")
    texts = ["A cat sleeps\u2028on the sofa.", "Stock markets\x0cfell.", "The train\x85 was late."]
    VectorIndex.build(embedder, texts, [1, 2, 3]).save(tmp_path / "idx")
    index = VectorIndex.load(tmp_path / "idx")
    assert index.texts == texts and index.ids == [1, 2, 3]


def test_bulk_embedding_counts_the_same_lines(cli, tiny, tmp_path):
    corpus = tmp_path / "cr.txt"
    corpus.write_bytes(CR_CORPUS)
    result = cli("embed", "--input", str(corpus), "--output", str(tmp_path / "shards"),
                 "--model", str(tiny), "--dtype", "fp32")  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "shards" / "manifest.json").read_text())
    assert manifest["input"]["lines"] == 3
    assert np.load(tmp_path / "shards" / "shard-00000.npy").shape[0] == 3


def test_a_carriage_return_inside_a_quoted_csv_field_starts_no_line(tmp_path):
    path = tmp_path / "cr.csv"
    path.write_bytes(b'text,label\n"Great flight\rthanks",positive\nDelayed again,negative\n'
                     b"ok,neutral\n")  # fmt: skip
    rows = read_table(path)
    assert [(r.line, r.text) for r in rows] == [
        (2, "Great flight\rthanks"),
        (3, "Delayed again"),
        (4, "ok"),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b'text,label\n"Great\rthanks",positive\nDelayed,negative,extra\n')
    with pytest.raises(Exception, match=r"bad.csv:3: 3 fields but the header has 2"):
        read_table(bad)


def test_embed_and_index_read_a_csv_as_a_table(cli, tiny, tmp_path):
    table = tmp_path / "t.csv"
    table.write_text('sentence,label\nhello there,positive\n"bad, very bad",negative\n')
    result = cli("embed", "-i", str(table), "--model", str(tiny), "--format", "jsonl")
    assert result.exit_code == 2 and "no column 'text' in the header" in result.stderr
    assert "['sentence', 'label']" in result.stderr
    rows = _jsonl(cli("embed", "-i", str(table), "--text-column", "sentence", "--model",
                      str(tiny), "--format", "jsonl", "--dtype", "fp32"))  # fmt: skip
    assert [(r["id"], r["text"]) for r in rows] == [(2, "hello there"), (3, "bad, very bad")]
    built = cli("index", "build", "--corpus", str(table), "--text-column", "sentence",
                "-o", str(tmp_path / "idx"), "--model", str(tiny))  # fmt: skip
    assert built.exit_code == 0, built.output
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    index = VectorIndex.load(tmp_path / "idx")
    assert index.texts == ["hello there", "bad, very bad"] and index.ids == [2, 3]
    tsv = tmp_path / "t.tsv"
    tsv.write_text("id\ttext\nq1\tfirst\nq2\tsecond\n")
    rows = _jsonl(cli("embed", "-i", str(tsv), "--model", str(tiny), "--format", "jsonl"))
    assert [(r["id"], r["text"]) for r in rows] == [("q1", "first"), ("q2", "second")]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_search_corpus_refuses_a_table(cli, tiny, tmp_path, suffix):
    table = tmp_path / f"t{suffix}"
    table.write_text("sentence,label\nhello,positive\n" if suffix == ".csv" else '{"text": "a"}\n')
    result = cli("search", "q", "--corpus", str(table), "--model", str(tiny))
    assert result.exit_code == 2
    assert "table, and this reads plain text" in result.stderr
    assert "index build --corpus" in result.stderr


def test_a_line_that_is_not_utf8_is_named(cli, tiny, tmp_path):
    corpus = tmp_path / "latin.txt"
    corpus.write_bytes(b"fine\nalso fine\ncaf\xe9 au lait\n")
    result = cli("index", "build", "--corpus", str(corpus), "-o", str(tmp_path / "i"),
                 "--model", str(tiny))  # fmt: skip
    assert result.exit_code == 2
    assert "latin.txt:3: not UTF-8 (byte b'\\xe9' at column 4)" in result.stderr


def test_text_that_is_not_utf8_is_decoded_with_a_warning(tmp_path, caplog):
    path = tmp_path / "random.txt"
    path.write_bytes(bytes(b for b in range(1, 256) if b != 10) * 4)  # no NUL, no \n
    with caplog.at_level(logging.WARNING):
        read_text(path)
    assert "are not UTF-8 (line 1)" in caplog.text and "predictions mean nothing" in caplog.text


def test_a_ner_model_that_found_no_entity_is_reported():
    from bertfamily.recipes.finetune import no_entity_note

    assert "entity F1 0.0" in no_entity_note({"f1": 0.0, "precision": 0.0})
    assert no_entity_note({"f1": 0.25}) is None
