"""Parquet outputs read by pyarrow, pandas, polars and duckdb (issue 44, item 4): `embed
--output x.parquet` and a directory of shards as `embed --engine ray` writes them (its
`WriteShards` actor called here without Ray), the vector column a fixed-size list of float32
and no file but Parquet in the directory."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pl = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

TEXTS = ["the cat sat", "a whale", "Moby-Dick", "the dog ran", "a bird"]
D = 384


def _check_readers(target, glob: str, n: int, want: np.ndarray, by_id: bool) -> None:
    table = pq.read_table(target)
    assert table.schema.field("vector").type == pa.list_(pa.float32(), D)
    frame = pl.read_parquet(target)
    assert frame.schema["vector"] == pl.Array(pl.Float32, D) and frame.height == n
    assert len(__import__("pandas").read_parquet(target)) == n
    con = duckdb.connect()
    rows = con.sql(
        f"SELECT id, array_cosine_similarity(vector::FLOAT[{D}], vector::FLOAT[{D}]) "
        f"FROM read_parquet('{glob}') ORDER BY id"
    ).fetchall()
    assert [r[0] for r in rows] == list(range(1, n + 1))
    np.testing.assert_allclose([r[1] for r in rows], 1.0, atol=1e-5)
    got = con.sql(f"SELECT vector FROM read_parquet('{glob}') ORDER BY id").fetchall()
    np.testing.assert_allclose(np.array([r[0] for r in got]), want, atol=1e-6)
    if by_id:
        ids = frame.get_column("id").to_list()
        vectors = frame.get_column("vector").to_numpy()
        np.testing.assert_allclose(vectors[np.argsort(ids)], want, atol=1e-6)


def test_single_file_output(cli, minilm_dir, tmp_path):
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder

    corpus = tmp_path / "in.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "x.parquet"
    assert cli("embed", "-i", corpus, "-o", out, "--model", minilm_dir).exit_code == 0
    want = SentenceEmbedder(minilm_dir).encode(TEXTS)
    _check_readers(out, str(out), len(TEXTS), want, by_id=True)


def test_directory_of_shards(minilm_dir, tmp_path):
    from bertfamily.data.table_io import table_identity
    from bertfamily.integrations.ray import EmbedBatch, WriteShards
    from bertfamily.pipelines.embedding.embed import SentenceEmbedder
    from bertfamily.pipelines.retrieval import VectorIndex
    from bertfamily.pipelines.retrieval.dense import model_identity

    embedder = SentenceEmbedder(minilm_dir)
    identity = model_identity(embedder)
    out = tmp_path / "vectors"
    out.mkdir()
    write = WriteShards(
        str(out),
        EmbedBatch,
        {"model": str(minilm_dir)},
        metadata={"format_version": 1, "model": identity.__dict__},
    )
    for lo, hi in ((0, 2), (2, 5)):
        write(pa.table({"id": list(range(lo + 1, hi + 1)), "text": TEXTS[lo:hi]}))
    assert {p.suffix for p in out.iterdir()} == {".parquet"}  # nothing else for readers to trip on
    want = embedder.encode(TEXTS)
    _check_readers(out, f"{out}/*", len(TEXTS), want, by_id=True)
    _check_readers(out, f"{out}/*.parquet", len(TEXTS), want, by_id=False)
    assert table_identity(out)["digest"] == identity.digest
    index = VectorIndex.from_embeddings(out, embedder=embedder)
    assert len(index) == len(TEXTS)
