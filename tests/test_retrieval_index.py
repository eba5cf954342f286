"""`BinaryIndex` (FAISS binary flat + float rescoring) against exhaustive float and Hamming
search, `SparseIndex` against dense dot products, and `fuse` (RRF, linear) by hand."""

from __future__ import annotations

import numpy as np
import pytest

from bertfamily.errors import InputError
from bertfamily.pipelines.retrieval import BinaryIndex, Hit, SparseIndex, fuse
from bertfamily.pipelines.sparse import SparseVector, to_dense

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
