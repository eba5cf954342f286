"""`BinaryIndex` (FAISS binary flat + float rescoring) against exhaustive float and Hamming
search, `SparseIndex` against dense dot products, and `fuse` (RRF, linear) by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertfamily.errors import InputError
from bertfamily.pipelines.embedding.sparse import SparseVector, to_dense
from bertfamily.pipelines.retrieval.indexes import BinaryIndex, Hit, SparseIndex, fuse

pytest.importorskip("faiss")


def test_binary_index_hamming_and_rescoring():
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((300, 60)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:5] + 0.1 * rng.standard_normal((5, 60)).astype(np.float32)
    index = BinaryIndex(docs)
    # rescoring every row = exact float search
    full = index.search(queries, top_k=10, rescore=300)
    exact = np.argsort(-(queries @ docs.T), axis=1)[:, :10]
    assert [[h.index for h in row] for row in full] == exact.tolist()
    bits_q, bits_d = queries > 0, docs > 0
    hamming = (bits_q[:, None, :] != bits_d[None]).sum(-1)  # (5, 300)
    plain = index.search(queries, top_k=3, rescore=None)
    for q, row in enumerate(plain):
        assert [64 - h.score for h in row] == sorted(hamming[q])[:3]
    rescored = index.search(queries, top_k=1)
    assert [row[0].index for row in rescored] == [0, 1, 2, 3, 4]
    with pytest.raises(InputError):
        index.search(queries, top_k=10, rescore=5)


def test_sparse_index_equals_dense_dot():
    rng = np.random.default_rng(1)
    dense = np.where(rng.random((50, 200)) < 0.05, rng.random((50, 200)), 0).astype(np.float32)
    vecs = [SparseVector(np.flatnonzero(r), r[np.flatnonzero(r)]) for r in dense]
    index = SparseIndex(vecs)
    np.testing.assert_allclose(to_dense(vecs, 200), dense)
    queries = vecs[:4]
    for q, hits in zip(queries, index.search(queries, top_k=5)):
        want = dense @ to_dense([q], 200)[0]
        np.testing.assert_allclose(index.scores(q), want, atol=1e-6)
        assert hits[0].score == pytest.approx(want.max())
    unknown = SparseVector(np.array([199_999]), np.array([1.0], np.float32))
    assert not index.scores(unknown).any()


def test_fuse():
    dense = [Hit(1, 0.9), Hit(2, 0.5), Hit(3, 0.1)]
    sparse = [Hit(3, 10.0), Hit(1, 5.0)]
    rrf = fuse(dense, sparse, top_k=3)
    assert [h.index for h in rrf] == [1, 3, 2]
    assert rrf[0].score == pytest.approx(1 / 61 + 1 / 62)
    lin = fuse(dense, sparse, method="linear", weight=0.5)
    assert [h.index for h in lin] == [1, 3, 2]  # 1: .5 + 0 ; 3: 0 + .5 ; 2: .5·.5
    assert [h.score for h in lin] == pytest.approx([0.5, 0.5, 0.25])


# --- persistence: binary and sparse index directories ----------------------------------------
def _identity(dimension: int, pooling: str = "mean"):
    from bertfamily.pipelines.retrieval.dense import ModelIdentity

    return ModelIdentity("d" * 64, dimension, pooling, "m")


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _random_sparse(n: int, width: int, seed: int) -> list[SparseVector]:
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random((n, width)) < 0.04, rng.random((n, width)), 0).astype(np.float32)
    return [SparseVector(np.flatnonzero(r), r[np.flatnonzero(r)]) for r in dense]


def test_binary_index_round_trip_equals_in_memory(tmp_path):
    import json

    from bertfamily.errors import VectorIndexError
    from bertfamily.pipelines.retrieval.dense import VectorIndex
    from bertfamily.pipelines.retrieval.indexes import open_index

    docs, queries = _unit(200, 44, 2), _unit(6, 44, 3)
    ids = [f"doc-{i}" for i in range(200)]
    index = BinaryIndex(docs, texts=[f"t{i}" for i in range(200)], ids=ids, identity=_identity(44))
    index.save(tmp_path / "bin")
    meta = json.loads((tmp_path / "bin" / "meta.json").read_text())
    assert (meta["kind"], meta["count"], meta["binary"]) == (
        "binary",
        200,
        {"dimension": 44, "bits": 48, "floats": True},
    )
    loaded = open_index(tmp_path / "bin")
    assert isinstance(loaded, BinaryIndex) and isinstance(loaded.floats, np.memmap)
    assert loaded.ids == ids and loaded.texts[7] == "t7" and loaded.identity == _identity(44)
    for rescore in (40, None):
        want = index.search(queries, top_k=10, rescore=rescore)
        got = loaded.search(queries, top_k=10, rescore=rescore)
        assert [[(h.index, h.score) for h in r] for r in got] == [
            [(h.index, h.score) for h in r] for r in want
        ]
    # exact float search over every row = brute force cosine
    full = loaded.search(queries, top_k=5, rescore=200)
    assert [[h.index for h in r] for r in full] == np.argsort(-(queries @ docs.T), 1)[
        :, :5
    ].tolist()
    loaded.add_vectors(_unit(3, 44, 4), ["x", "y", "z"], ["n1", "n2", "n3"])
    with pytest.raises(InputError, match="already in the index"):
        loaded.add_vectors(_unit(1, 44, 5), ["w"], ["doc-3"])
    loaded.save(tmp_path / "bin")
    again = BinaryIndex.load(tmp_path / "bin")
    assert len(again) == 203 and again.ids[-1] == "n3"
    assert again.search(_unit(3, 44, 4)[2:], top_k=1)[0][0].index == 202
    with pytest.raises(VectorIndexError, match="binary index, not a dense one"):
        VectorIndex.load(tmp_path / "bin")
    np.save(tmp_path / "bin" / "vectors.npy", np.zeros((203, 40), np.float32))
    with pytest.raises(VectorIndexError, match=r"vectors.npy is float32 \(203, 40\)"):
        BinaryIndex.load(tmp_path / "bin")
    codes_only = BinaryIndex(docs, keep_floats=False)
    codes_only.save(tmp_path / "codes")
    assert not (tmp_path / "codes" / "vectors.npy").exists()
    assert BinaryIndex.load(tmp_path / "codes").floats is None


def test_sparse_index_round_trip_equals_in_memory(tmp_path):
    from bertfamily.errors import VectorIndexError
    from bertfamily.pipelines.retrieval.indexes import open_index

    vecs, queries = _random_sparse(80, 300, 6), _random_sparse(5, 300, 7)
    index = SparseIndex(vecs, texts=[f"t{i}" for i in range(80)], identity=_identity(300, "s"))
    index.save(tmp_path / "sp")
    loaded = open_index(tmp_path / "sp")
    assert isinstance(loaded, SparseIndex) and loaded.ids == list(range(80))
    want, got = index.search(queries, top_k=8), loaded.search(queries, top_k=8)
    assert [[(h.index, h.score) for h in r] for r in got] == [
        [(h.index, h.score) for h in r] for r in want
    ]
    dense = to_dense(vecs, 300)
    for q, hits in zip(queries, got):
        exact = dense @ to_dense([q], 300)[0]
        assert [h.index for h in hits] == np.argsort(-exact, kind="stable")[:8].tolist()
    with np.load(tmp_path / "sp" / "sparse.npz") as z:  # CSR rows = the vectors given
        ptr, idx, val = z["indptr"], z["indices"], z["values"]
    for i in (0, 41, 79):
        np.testing.assert_array_equal(idx[ptr[i] : ptr[i + 1]], vecs[i].indices)
        np.testing.assert_array_equal(val[ptr[i] : ptr[i + 1]], vecs[i].values)
    more = _random_sparse(4, 300, 8)
    loaded.add_vectors(more, list("abcd"), [80, 81, 82, 83])
    whole = SparseIndex(vecs + more)
    assert [[(h.index, h.score) for h in r] for r in loaded.search(queries, 12)] == [
        [(h.index, h.score) for h in r] for r in whole.search(queries, 12)
    ]
    no_overlap = SparseVector(np.array([299_999]), np.array([1.0], np.float32))
    assert loaded.search([no_overlap], top_k=5) == [[]]  # no shared term: no hit
    with pytest.raises(InputError, match=r"\[0, 300\)"):
        loaded.add_vectors([no_overlap], ["e"], [84])

    def tamper(**arrays):
        with np.load(tmp_path / "sp" / "sparse.npz") as z:
            d = dict(z) | arrays
        np.savez(tmp_path / "sp" / "sparse.npz", **d)
        # the recorded SHA-256 would catch any edit first: drop it, as an index written before
        # sparse.npz was recorded, so that the structural checks below are what is tested
        meta = json.loads((tmp_path / "sp" / "meta.json").read_text())
        meta.get("files", {}).pop("sparse.npz", None)
        (tmp_path / "sp" / "meta.json").write_text(json.dumps(meta))

    bad_idx = idx.copy()
    bad_idx[3] = 300
    tamper(indices=bad_idx)
    with pytest.raises(VectorIndexError, match=r"indices outside \[0, 300\)"):
        SparseIndex.load(tmp_path / "sp")
    tamper(indices=idx, indptr=ptr[::-1].copy())
    with pytest.raises(VectorIndexError, match="indptr is not a CSR row pointer of 80 rows"):
        SparseIndex.load(tmp_path / "sp")
    tamper(indptr=np.array([object()] * 81, dtype=object))
    with pytest.raises(VectorIndexError, match="cannot read the index"):  # no pickle
        SparseIndex.load(tmp_path / "sp")
    (tmp_path / "sp" / "texts.jsonl").write_text('{"id": 0, "text": "a"}\n')
    with pytest.raises(VectorIndexError, match="texts.jsonl: 23 bytes, meta.json recorded"):
        SparseIndex.load(tmp_path / "sp")  # its recorded size and digest catch it first
    meta = json.loads((tmp_path / "sp" / "meta.json").read_text())
    meta["files"].pop("texts.jsonl")
    (tmp_path / "sp" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(VectorIndexError, match="1 rows, meta.json says 80: the files disagree"):
        SparseIndex.load(tmp_path / "sp")
