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
from helpers import save_tiny, save_tiny_splade

pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs pyarrow (bertfamily[parquet])")
pa = pytest.importorskip("pyarrow")

pytestmark = pytest.mark.usefixtures("one_thread")

TOPICS = ["cats", "dogs", "rivers", "trains", "music", "coffee"]
DOCS = [f"document {i} about {TOPICS[i % 6]}" + " and more" * (i % 4) for i in range(40)]


@pytest.fixture(scope="module")
def tiny(minilm_dir, tmp_path_factory):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

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
    from bertfamily.pipelines.retrieval.dense import VectorIndex

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
    # JSONL through embed -> Parquet -> index -> search: the ids stay the table's
    jl_out, jl_idx = tmp_path / "jl.parquet", tmp_path / "jl-idx"
    assert cli("embed", "-i", jl, "-o", jl_out, "--model", model, "--with-text").exit_code == 0
    assert cli("index", "build", "--embeddings", jl_out, "--output", jl_idx).exit_code == 0
    r = cli("search", DOCS[3], "--index", jl_idx, "--model", model, "--format", "jsonl", "-k", "1")
    assert r.exit_code == 0, r.output
    hit = json.loads(r.stdout)
    assert (
        hit["id"] == "d3" and hit["text"] == DOCS[3] and hit["score"] == pytest.approx(1, abs=1e-5)
    )
    # an index from a plain text corpus: ids are line numbers
    idx = tmp_path / "idx"
    assert cli("index", "build", "--corpus", txt, "--output", idx, "--model", model).exit_code == 0
    from bertfamily.pipelines.retrieval.dense import VectorIndex

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


BAD_ROWS = [  # (id, text): the one rule of table rows, local and Ray alike
    (1, "a good row"),
    (2, None),
    (3, "   "),
    (4, "another good row"),
    (5, ""),
    (6, "\t"),
]
BAD_MESSAGE = (
    "4 rows cannot be embedded or indexed: row id 2: 'text' is null; row id 3: 'text' is "
    "empty; row id 5: 'text' is empty (and 1 more); nothing was written"
)


def test_check_rows_is_the_one_rule():
    from bertfamily.data.table_io import check_rows, text_problem

    assert [text_problem(v) for v in ("a", 7, 2.5, None, float("nan"), "", " \n")] == [
        None, None, None, "null", "null", "empty", "empty"
    ]  # fmt: skip
    assert text_problem(True) == "a bool, not a string"
    assert text_problem(["a"]) == "a list, not a string"
    assert text_problem(np.int64(3)) is None and text_problem(np.str_(" ")) == "empty"
    ids, texts, bad = check_rows([1, 2, None, 4], ["x", None, "y", 5])
    assert (ids, texts) == ([1, 4], ["x", "5"])
    assert bad == ["row id 2: 'text' is null", "the row of text 'y': 'id' is null"]


def test_bad_parquet_rows_are_counted_and_refuse_the_table_before_any_work(cli, tiny, tmp_path):
    """Every bad row counted, the first three named, across the files of a directory; the CLI
    refuses before it embeds (nothing written); Ray Data gives the same message
    (test_ray.py)."""
    model, _ = tiny
    d = tmp_path / "rows"
    d.mkdir()
    ids, texts = zip(*BAD_ROWS)
    pq.write_table(pa.table({"id": list(ids[:3]), "text": list(texts[:3])}), d / "part-0.parquet")
    pq.write_table(pa.table({"id": list(ids[3:]), "text": list(texts[3:])}), d / "part-1.parquet")
    with pytest.raises(DataError) as e:
        read_id_texts(d)
    assert str(e.value) == f"{d}: {BAD_MESSAGE}"
    out = tmp_path / "o.parquet"
    r = cli("embed", "--input", d, "--output", out, "--model", model)
    assert r.exit_code == 2 and f"{d}: {BAD_MESSAGE}" in " ".join(r.output.split()), r.output
    assert "embedding" not in r.output and not out.exists() and not list(tmp_path.glob(".o.*"))
    one = tmp_path / "one.parquet"
    pq.write_table(pa.table({"id": [7, 8], "text": [["a"], ["a", "list"]]}), one)
    with pytest.raises(DataError, match=r"2 rows cannot .*: row id 7: 'text' is a list, not a"):
        read_id_texts(one)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_parquet_quantized_column_equals_quantize_embeddings(tiny, tmp_path, precision):
    """`vector_<precision>` equals `quantize_embeddings` of all the rows at once (int8/uint8:
    ranges of every row, though the rows are embedded 7 at a time); the float vector stays,
    so an index builds from the table as it is."""
    from bertfamily.data.table_io import table_metadata
    from bertfamily.pipelines.embedding.bulk import embed_table
    from bertfamily.pipelines.embedding.quantize import quantization_ranges, quantize_embeddings
    from bertfamily.pipelines.retrieval.dense import VectorIndex

    _, embedder = tiny
    ids = [f"d{i}" for i in range(len(DOCS))]
    table = tmp_path / "docs.parquet"
    pq.write_table(pa.table({"id": ids, "text": DOCS}), table)
    out = tmp_path / "q.parquet"
    rows, _ = embed_table(embedder, table, out, precision=precision, chunk_rows=7)
    floats = embedder.encode(DOCS)
    want = quantize_embeddings(floats, precision)
    written = pq.read_table(out)
    column = f"vector_{precision}"
    assert written.column_names == ["id", "vector", column] and rows == len(DOCS)
    assert written.column("id").to_pylist() == ids
    got = np.stack(written.column(column).to_numpy(zero_copy_only=False))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(
        np.stack(written.column("vector").to_numpy(zero_copy_only=False)), floats, atol=1e-6
    )
    meta = table_metadata(out)["quantized"]
    assert meta["precision"] == precision and meta["column"] == column
    if precision.endswith("int8"):
        np.testing.assert_allclose(meta["ranges"], quantization_ranges(floats), atol=1e-6)
    else:
        assert meta["ranges"] is None
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]  # no temporary left
    index = VectorIndex.from_embeddings(out)
    assert index.ids == ids and len(index) == len(DOCS)


def test_cli_parquet_precision_equals_npy_precision(cli, tiny, tmp_path):
    model, _ = tiny
    table = write_parquet(tmp_path / "docs.parquet", list(range(len(DOCS))), DOCS)
    columns = ("--id-column", "doc_id", "--text-column", "body", "--precision", "int8")
    r = cli("embed", "-i", table, "-o", tmp_path / "q.parquet", "--model", model, *columns)
    assert r.exit_code == 0 and "and vector_int8" in r.output, r.output
    r = cli("embed", "-i", table, "-o", tmp_path / "q.npy", "--model", model, *columns)
    assert r.exit_code == 0, r.output
    got = np.stack(pq.read_table(tmp_path / "q.parquet").column("vector_int8").to_pylist())
    np.testing.assert_array_equal(got, np.load(tmp_path / "q.npy"))
    r = cli("embed", "-i", table, "-o", tmp_path / "shards", "--precision", "int8")
    assert r.exit_code == 2 and "not for bulk shards" in r.output


@pytest.fixture(scope="module")
def splade_dir(minilm_dir, tmp_path_factory):
    return save_tiny_splade(tmp_path_factory.mktemp("splade-table") / "splade", minilm_dir)


def test_sparse_encoder_writes_sparse_columns(cli, splade_dir, tmp_path):
    """A SPLADE model's table: sparse_indices / sparse_values equal `SparseEncoder.encode`,
    read back by `iter_sparse_table` into a `SparseIndex` that ranks as the encoder's own;
    `index build` (dense) refuses it by name."""
    from bertfamily.data.table_io import iter_sparse_table, table_metadata
    from bertfamily.pipelines.embedding.sparse import SparseEncoder, SparseVector
    from bertfamily.pipelines.retrieval.indexes import SparseIndex

    docs = DOCS[:12]
    jl = tmp_path / "docs.jsonl"
    jl.write_text("".join(json.dumps({"id": f"s{i}", "text": d}) + "\n" for i, d in
                          enumerate(docs)), encoding="utf-8")  # fmt: skip
    out = tmp_path / "sparse.parquet"
    r = cli("embed", "-i", jl, "-o", out, "--model", splade_dir, "--dtype", "fp32", "--with-text")
    assert r.exit_code == 0 and "(id, sparse vector) rows" in r.output, r.output
    assert pq.read_table(out).column_names == ["id", "text", "sparse_indices", "sparse_values"]
    encoder = SparseEncoder(splade_dir)
    want = encoder.encode(docs)
    ((ids, rows, texts),) = list(iter_sparse_table(out))
    assert ids == [f"s{i}" for i in range(len(docs))] and texts == docs
    for (indices, values), v in zip(rows, want):
        assert 0 < len(indices) < encoder.dimension
        np.testing.assert_array_equal(indices, v.indices)
        np.testing.assert_allclose(values, v.values, rtol=0, atol=1e-6)
    meta = table_metadata(out)
    assert meta["kind"] == "sparse" and meta["model"]["dimension"] == encoder.dimension
    assert meta["model"]["pooling"] == "splade-max-relu"
    queries = encoder.encode([docs[3], "trains and rivers"])
    ours = SparseIndex([SparseVector(i, v) for i, v in rows]).search(queries, top_k=3)
    expected = SparseIndex(want).search(queries, top_k=3)
    assert [[h.index for h in q] for q in ours] == [[h.index for h in q] for q in expected]
    for got, exp in zip(ours, expected, strict=True):  # the stored values agree within 1e-6
        assert [h.score for h in got] == pytest.approx([h.score for h in exp], abs=1e-5)
    assert ours[0][0].index == 3
    r = cli("index", "build", "--embeddings", out, "--output", tmp_path / "idx")
    assert r.exit_code == 2 and "holds sparse vectors" in r.output, r.output
    r = cli("embed", "-i", jl, "-o", tmp_path / "x.parquet", "--model", splade_dir,
            "--precision", "int8")  # fmt: skip
    assert r.exit_code == 2 and "not a SPLADE model" in r.output, r.output


def test_engine_ray_gets_uris_as_given(cli, tiny, monkeypatch):
    """`embed --engine ray` hands `embed_dataset` the input and output exactly as typed (an
    s3:// URI as a Path would lose a slash); no Ray needed: `embed_dataset` is replaced."""
    import bertfamily.integrations.ray as ray_integration

    model, _ = tiny
    seen = {}

    def fake(source, output, **options):
        seen.update(source=source, output=output, **options)
        return {"rows": 3, "files": None, "dimension": 32, "model": {}}

    monkeypatch.setattr(ray_integration, "embed_dataset", fake)
    r = cli("embed", "--engine", "ray", "--input", "s3://bucket/texts/", "--output",
            "s3://bucket/vectors/", "--model", model, "--concurrency", "3")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert seen["source"] == "s3://bucket/texts/" and seen["output"] == "s3://bucket/vectors/"
    assert seen["concurrency"] == 3 and seen["model"] == str(model)


def test_embed_batch_formats_agree_and_refuse_bad_rows(tiny):
    """Ray Data's batch class (no Ray needed to call it): every batch format gives the same
    rows, and a bad row is refused with the one rule's message."""
    pd = pytest.importorskip("pandas")
    from bertfamily.integrations.ray import EmbedBatch

    model, _ = tiny
    step = EmbedBatch(str(model), with_text=True, dtype="fp32")
    texts = ["alpha", "beta", "gamma delta"]
    table = step(pa.table({"id": [1, 2, 3], "text": texts}))
    frame = step(pd.DataFrame({"id": [1, 2, 3], "text": texts}))
    numpy = step({"id": np.array([1, 2, 3]), "text": np.array(texts, dtype=object)})
    assert table.column("id").to_pylist() == frame["id"].tolist() == list(numpy["id"]) == [1, 2, 3]
    assert table.column("text").to_pylist() == texts
    vec = np.stack(table.column("vector").to_pylist())
    np.testing.assert_array_equal(vec, np.stack(frame["vector"]))
    np.testing.assert_array_equal(vec, numpy["vector"])
    np.testing.assert_allclose(vec, step.embedder.encode(texts), rtol=0, atol=1e-6)
    bad = ["alpha", "", None]
    columns = {"id": [1, 2, 3], "text": bad}
    for batch in (pa.table(columns), pd.DataFrame(columns)):
        with pytest.raises(DataError) as e:
            step(batch)
        assert str(e.value) == (
            "a batch of 3 rows: 2 rows cannot be embedded or indexed: row id 2: 'text' is "
            "empty; row id 3: 'text' is null; the job stops"
        )
