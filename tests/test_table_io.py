"""Tables with ids (#33 item 1): text, JSONL and Parquet in with --id-column/--text-column,
(id, vector) Parquet out, an index built straight from those vectors keeping the ids, and
search answering with them; a text file's ids are its 1-based line numbers (blank lines
skipped, never embedded)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertfamily.data.table_io import (
    EmbeddingTableWriter,
    iter_embedding_table,
    iter_id_texts,
    read_id_texts,
    table_identity,
)
from bertfamily.errors import DataError
from helpers import save_tiny

pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs pyarrow (bertfamily[parquet])")
pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.usefixtures("one_thread")

TOPICS = ["cats", "dogs", "rivers", "trains", "music", "coffee"]
DOCS = [f"document {i} about {TOPICS[i % 6]}" + " and more" * (i % 4) for i in range(40)]


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    from bertfamily.pipelines.embed import SentenceEmbedder

    path = save_tiny(tmp_path_factory.mktemp("table-io") / "tiny", minilm_dir)
    return path, SentenceEmbedder(path)


def write_parquet(path: Path, ids, texts) -> Path:
    pq.write_table(pa.table({"doc_id": ids, "body": texts, "other": list(range(len(ids)))}), path)
    return path


def test_text_ids_are_line_numbers_and_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("first\n\n  \nfourth\r\nfifth", encoding="utf-8")
    assert read_id_texts(path) == ([1, 4, 5], ["first", "fourth", "fifth"])
    batches = list(iter_id_texts(path, batch_rows=2))
    assert batches == [([1, 4], ["first", "fourth"]), ([5], ["fifth"])]


def test_jsonl_and_parquet_columns_and_default_ids(tmp_path):
    jl = tmp_path / "t.jsonl"
    rows = [{"key": "a", "body": "alpha"}, {"body": "no key"}]
    jl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    got = read_id_texts(jl, id_column="key", text_column="body")
    assert got == (["a", 2], ["alpha", "no key"])  # a row without an id: its line number
    pqf = write_parquet(tmp_path / "t.parquet", [10, 30], ["x", "z"])
    assert read_id_texts(pqf, id_column="doc_id", text_column="body") == ([10, 30], ["x", "z"])
    # no id column: 1-based row numbers across the files of a directory, in name order
    d = tmp_path / "dir"
    d.mkdir()
    pq.write_table(pa.table({"text": ["a", "b"]}), d / "part-0.parquet")
    pq.write_table(pa.table({"text": ["c", "d"]}), d / "part-1.parquet")
    (d / "_SUCCESS.parquet").write_text("not parquet")  # skipped, as pyarrow does
    assert read_id_texts(d) == ([1, 2, 3, 4], ["a", "b", "c", "d"])
    with pytest.raises(DataError, match="no column 'body'"):
        read_id_texts(d, text_column="body")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DataError, match="bad.jsonl: 1 row .*line 2: not a JSON object"):
        read_id_texts(bad)


def test_a_table_row_without_text_is_refused_not_skipped(tmp_path):
    """A table row's empty or null text is a data error (a plain text file's blank line is
    no document): skipping it silently would hide it; storing it would index "None"."""
    jl = tmp_path / "t.jsonl"
    jl.write_text('{"text": "a"}\n{"text": " "}\n{"text": null}\n', encoding="utf-8")
    with pytest.raises(DataError, match="2 rows .*line 2: 'text' is empty; line 3: 'text' is null"):
        read_id_texts(jl)
    pqf = write_parquet(tmp_path / "t.parquet", [10, 20], ["x", ""])
    with pytest.raises(DataError, match="row id 20.*is empty"):
        read_id_texts(pqf, id_column="doc_id", text_column="body")


def test_writer_round_trip_keeps_ids_vectors_and_identity(tmp_path):
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    path = tmp_path / "e.parquet"
    ident = {"digest": "d" * 64, "dimension": 3, "pooling": "mean", "name": "m"}
    with EmbeddingTableWriter(path, 3, ident, with_text=True) as w:
        w.write(["a", "b"], vectors[:2], ["ta", "tb"])
        w.write(["c", "d"], vectors[2:], ["tc", "td"])
    assert pq.ParquetFile(path).schema_arrow.field("vector").type == pa.list_(pa.float32(), 3)
    assert table_identity(path) == ident
    ((ids, got, texts),) = list(iter_embedding_table(path))
    assert ids == ["a", "b", "c", "d"] and texts == ["ta", "tb", "tc", "td"]
    np.testing.assert_array_equal(got, vectors)


def test_embed_parquet_index_search_keeps_ids(cli, tiny, tmp_path):
    model, embedder = tiny
    ids = [1000 + 7 * i for i in range(len(DOCS))]
    table = write_parquet(tmp_path / "docs.parquet", ids, DOCS)
    out = tmp_path / "vectors.parquet"
    r = cli(
        "embed",
        "--input",
        table,
        "--output",
        out,
        "--model",
        model,
        "--id-column",
        "doc_id",
        "--text-column",
        "body",
        "--with-text",
    )
    assert r.exit_code == 0, r.output
    assert f"wrote {len(DOCS)} (id, vector) rows" in r.output
    written = pq.read_table(out)
    assert written.column_names == ["id", "text", "vector"]
    assert written.column("id").to_pylist() == ids
    np.testing.assert_allclose(
        np.stack(written.column("vector").to_numpy(zero_copy_only=False)),
        embedder.encode(DOCS),
        atol=1e-6,
    )
    idx = tmp_path / "idx"
    r = cli("index", "build", "--embeddings", out, "--output", idx)  # no model, no embedding
    assert r.exit_code == 0, r.output
    r = cli("search", DOCS[13], "--index", idx, "--model", model, "--format", "jsonl", "-k", "2")
    assert r.exit_code == 0, r.output
    hit = json.loads(r.stdout.splitlines()[0])
    assert hit["id"] == ids[13] and hit["text"] == DOCS[13]
    assert hit["score"] == pytest.approx(1.0, abs=1e-5)
    # the same table embedded by `index build --corpus` gives the same ids and hits
    idx2 = tmp_path / "idx2"
    r = cli(
        "index",
        "build",
        "--corpus",
        table,
        "--id-column",
        "doc_id",
        "--text-column",
        "body",
        "--output",
        idx2,
        "--model",
        model,
    )
    assert r.exit_code == 0, r.output
    from bertfamily.pipelines.index import VectorIndex

    a, b = VectorIndex.load(idx), VectorIndex.load(idx2)
    assert a.ids == b.ids == ids and a.texts == b.texts == DOCS
    assert a.identity == b.identity


def test_text_and_jsonl_inputs_to_parquet(cli, tiny, tmp_path):
    model, embedder = tiny
    txt = tmp_path / "docs.txt"
    txt.write_text("alpha beta\n\ngamma\n   \ndelta\n", encoding="utf-8")
    out = tmp_path / "t.parquet"
    r = cli("embed", "--input", txt, "--output", out, "--model", model)
    assert r.exit_code == 0, r.output
    t = pq.read_table(out)
    assert t.column_names == ["id", "vector"] and t.column("id").to_pylist() == [1, 3, 5]
    want = embedder.encode(["alpha beta", "gamma", "delta"])
    np.testing.assert_allclose(np.stack(t.column("vector").to_pylist()), want, atol=1e-6)
    jl = tmp_path / "docs.jsonl"
    jl.write_text(
        "\n".join(json.dumps({"id": f"d{i}", "text": d}) for i, d in enumerate(DOCS[:5])),
        encoding="utf-8",
    )
    r = cli("embed", "--input", jl, "--model", model, "--format", "jsonl")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["id"] for row in rows] == [f"d{i}" for i in range(5)]
    np.testing.assert_allclose(
        [row["embedding"] for row in rows], embedder.encode(DOCS[:5]), atol=1e-6
    )
    # an index from a plain text corpus: ids are line numbers
    idx = tmp_path / "idx"
    assert cli("index", "build", "--corpus", txt, "--output", idx, "--model", model).exit_code == 0
    from bertfamily.pipelines.index import VectorIndex

    assert VectorIndex.load(idx).ids == [1, 3, 5]


def test_table_errors_are_one_line(cli, tiny, tmp_path):
    model, _ = tiny
    table = write_parquet(tmp_path / "docs.parquet", [1, 2], ["a", "b"])
    r = cli(
        "embed",
        "--input",
        table,
        "--output",
        tmp_path / "o.parquet",
        "--model",
        model,
        "--text-column",
        "nope",
    )
    assert r.exit_code == 2 and "no column 'nope'" in r.output
    r = cli("embed", "--input", table, "--output", tmp_path / "shards", "--model", model)
    assert r.exit_code == 2 and "--output FILE.parquet" in r.output
    r = cli("index", "build", "--output", tmp_path / "i")
    assert r.exit_code == 2 and "--corpus FILE or --embeddings" in r.output
    bare = tmp_path / "bare.parquet"
    pq.write_table(
        pa.table({"id": [1], "vector": pa.array([[0.0] * 32], pa.list_(pa.float32()))}), bare
    )
    r = cli("index", "build", "--embeddings", bare, "--output", tmp_path / "i")
    assert r.exit_code == 2 and "give the model" in r.output
    r = cli("index", "build", "--embeddings", bare, "--output", tmp_path / "i", "--model", model)
    assert r.exit_code == 0, r.output
