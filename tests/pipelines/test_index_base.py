"""The one index base (`retrieval.base.Index`) under the dense, binary and sparse indexes: a
vector holding NaN or infinity is refused by every kind's add (its row and id named, nothing
added), also through `index build --embeddings`; a directory in the format written before the
split loads and is written back byte for byte; the old import paths keep every name."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("faiss")

from bertfamily.errors import InputError, VectorIndexError  # noqa: E402
from bertfamily.pipelines.embedding.sparse import SparseVector  # noqa: E402
from bertfamily.pipelines.retrieval import (  # noqa: E402
    BinaryIndex,
    Index,
    ModelIdentity,
    SparseIndex,
    VectorIndex,
    open_index,
)

IDENTITY = ModelIdentity("d" * 64, 6, "mean", "m")


def unit(n: int, d: int = 6, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def sparse_rows(values: list[list[float]]) -> list[SparseVector]:
    return [SparseVector(np.arange(len(v)) * 3, np.array(v, np.float32)) for v in values]


def dense_index() -> VectorIndex:
    index = VectorIndex.create(IDENTITY)
    index.add_vectors(unit(3), list("abc"), ["a", "b", "c"])
    return index


def binary_index() -> BinaryIndex:
    return BinaryIndex(unit(3), texts=list("abc"), ids=["a", "b", "c"], identity=IDENTITY)


def sparse_index() -> SparseIndex:
    identity = ModelIdentity("e" * 64, 30, "splade-max-relu", "s")
    rows = sparse_rows([[0.5, 1.0], [2.0], [0.1, 0.2, 0.3]])
    return SparseIndex(rows, texts=list("abc"), ids=["a", "b", "c"], identity=identity)


def nan_rows(index: Index, bad: float):
    """Two vectors for ``index``, the second holding ``bad``."""
    if isinstance(index, SparseIndex):
        return sparse_rows([[1.0, 2.0], [0.3, bad, 0.1]])
    v = unit(2, seed=1)
    v[1, 4] = bad
    return v


@pytest.mark.parametrize("make", [dense_index, binary_index, sparse_index])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_every_kind_refuses_non_finite_vectors(make, bad, tmp_path):
    index = make()
    with pytest.raises(
        InputError, match=r"vector 4 \(0-based row of the index, id 'y'\) holds NaN"
    ):
        index.add_vectors(nan_rows(index, bad), ["x", "y"], ["x", "y"])
    assert len(index) == 3 and index.ids == ["a", "b", "c"]  # nothing added, storage too
    index.save(tmp_path / "i")
    again = open_index(tmp_path / "i")
    assert type(again) is type(index) and len(again) == 3
    again.add_vectors(nan_rows(index, 0.5), ["x", "y"], ["x", "y"])  # the same rows, finite
    assert len(again) == 5 and again.ids[-1] == "y"


def test_constructors_refuse_non_finite_vectors():
    v = unit(3)
    v[2, 0] = np.nan
    with pytest.raises(InputError, match=r"vector 2 \(0-based row of the index, id 2\)"):
        BinaryIndex(v)
    with pytest.raises(InputError, match=r"vector 1 .*id 1\) holds NaN or infinity \(1 of"):
        SparseIndex(sparse_rows([[1.0], [np.inf, 1.0]]))


def test_build_embeddings_refuses_a_nan_vector(cli, tmp_path):
    """Issue 43: `index build --embeddings` of a Parquet vector holding NaN: that row would
    never be found; the build is refused, naming the table, the row and its id."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    vectors = unit(4)
    vectors[2, 3] = np.nan
    table = pa.table(
        {"id": ["d0", "d1", "d2", "d3"], "vector": [list(map(float, r)) for r in vectors]}
    )
    meta = {b"bertfamily": json.dumps({"model": IDENTITY.__dict__}).encode()}
    path = tmp_path / "e.parquet"
    pq.write_table(table.replace_schema_metadata(meta), path)
    r = cli("index", "build", "--embeddings", path, "-o", tmp_path / "idx")
    assert r.exit_code == 2, r.output
    message = " ".join(r.output.split())
    assert "e.parquet" in message and "vector 2 (0-based row of the index, id 'd2')" in message
    assert "NaN" in message and not (tmp_path / "idx").exists()
    vectors[2, 3] = 0.25
    table = pa.table(
        {"id": ["d0", "d1", "d2", "d3"], "vector": [list(map(float, r)) for r in vectors]}
    )
    pq.write_table(table.replace_schema_metadata(meta), path)
    r = cli("index", "build", "--embeddings", path, "-o", tmp_path / "idx")
    assert r.exit_code == 0, r.output
    hits = VectorIndex.load(tmp_path / "idx").search_vectors(vectors[2:3], top_k=1)
    assert hits[0][0].id == "d2" and hits[0][0].score == pytest.approx(1.0, abs=1e-6)


def test_one_base_for_every_kind(tmp_path):
    from bertfamily.pipelines.retrieval import KIND_CLASSES
    from bertfamily.pipelines.retrieval.base import ALL_KINDS

    assert sorted(KIND_CLASSES) == sorted(ALL_KINDS)
    for make, kind in ((dense_index, "flat"), (binary_index, "binary"), (sparse_index, "sparse")):
        index = make()
        assert isinstance(index, Index) and index.kind == kind
        index.save(tmp_path / kind)
        meta = json.loads((tmp_path / kind / "meta.json").read_text())
        assert list(meta)[:3] == ["format_version", "kind", "count"]
        assert (meta["format_version"], meta["kind"], meta["count"]) == (1, kind, 3)
        own = {"flat": "index.faiss", "binary": "index.faiss", "sparse": "sparse.npz"}[kind]
        assert set(meta["files"]) == {own, "texts.jsonl"}  # digests: every kind's texts too
        rows = (tmp_path / kind / "texts.jsonl").read_text().splitlines()
        assert rows == ['{"id": "a", "text": "a"}', '{"id": "b", "text": "b"}',
                        '{"id": "c", "text": "c"}']  # fmt: skip
        with pytest.raises(InputError, match="already in the index"):
            index.add_vectors(nan_rows(index, 0.5)[:1], ["z"], ["b"])
    for cls, other in ((VectorIndex, "sparse"), (BinaryIndex, "flat"), (SparseIndex, "binary")):
        with pytest.raises(VectorIndexError, match=f"is a {other} index, not a {cls.label} one"):
            cls.load(tmp_path / other)


def test_an_index_written_before_the_split_loads_and_saves_the_same_bytes(tmp_path):
    """A sparse index directory exactly as the code before `base` wrote it (meta.json's key
    order and layout, texts.jsonl, sparse.npz) loads, searches, and is written back unchanged
    but for the digests of its files, which meta.json now records last."""
    old = tmp_path / "old"
    old.mkdir()
    meta = (
        '{\n  "format_version": 1,\n  "kind": "sparse",\n  "count": 2,\n  "metric": "dot '
        'product",\n  "nnz": 3,\n  "model": {\n    "digest": "' + "e" * 64 + '",\n    '
        '"dimension": 30,\n    "pooling": "splade-max-relu",\n    "name": "s"\n  }\n}\n'
    )
    (old / "meta.json").write_text(meta, encoding="utf-8")
    (old / "texts.jsonl").write_text(
        '{"id": 7, "text": "café"}\n{"id": "x", "text": "b"}\n', encoding="utf-8"
    )
    with open(old / "sparse.npz", "wb") as fh:
        np.savez(
            fh,
            indptr=np.array([0, 2, 3], np.int64),
            indices=np.array([1, 5, 5], np.int64),
            values=np.array([0.5, 1.0, 2.0], np.float32),
        )
    index = open_index(old)
    assert isinstance(index, SparseIndex) and index.ids == [7, "x"] and index.texts[0] == "café"
    query = SparseVector(np.array([5]), np.array([1.0], np.float32))
    assert [(h.index, h.score) for h in index.search([query])[0]] == [(1, 2.0), (0, 1.0)]
    index.save(tmp_path / "new")
    for name in ("texts.jsonl", "sparse.npz"):
        assert (tmp_path / "new" / name).read_bytes() == (old / name).read_bytes(), name
    new = json.loads((tmp_path / "new" / "meta.json").read_text())
    assert list(new)[-1] == "files" and set(new.pop("files")) == {"sparse.npz", "texts.jsonl"}
    assert json.dumps(new, indent=2) + "\n" == meta


DENSE_NAMES = """VectorIndexError IndexHit ModelIdentity VectorIndex check_identity check_new_ids
check_texts model_identity normalize_rows read_identity read_index_meta read_index_rows
write_index_rows FORMAT_VERSION KINDS ALL_KINDS INDEX_FILE TEXTS_FILE META_FILE _faiss _check_file
_read_rows _sha256 _is_int _file_record""".split()
INDEXES_NAMES = """BinaryIndex Hit SparseIndex fuse open_index sparse_identity VECTORS_FILE
SPARSE_FILE
FORMAT_VERSION VectorIndex IndexHit ModelIdentity read_index_meta check_new_ids _top _bad""".split()


def test_old_import_paths_keep_their_names():
    import bertfamily.pipelines.retrieval as package
    import bertfamily.pipelines.retrieval.dense as dense
    import bertfamily.pipelines.retrieval.indexes as indexes

    for name in indexes.__all__:
        assert getattr(indexes, name) is getattr(package, name)
    assert [n for n in INDEXES_NAMES if not hasattr(indexes, n)] == []
    assert [n for n in DENSE_NAMES if not hasattr(dense, n)] == []
    assert dense.KINDS == ("flat", "hnsw") and dense.VectorIndex is package.VectorIndex
