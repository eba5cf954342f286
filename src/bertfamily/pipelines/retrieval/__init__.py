"""Retrieval: the persisted indexes, fusing their results, and hard-negative mining (`mining`).

Every index kind is a `base.Index` (rows, model identity, one directory layout, the load
checks) holding its own vectors and scoring: dense `dense.VectorIndex` (FAISS flat or HNSW),
`binary.BinaryIndex`, `sparse_index.SparseIndex` and the lexical `bm25_index.BM25Index` (no
model); `fusion.fuse` merges any number of hit lists of the same documents; `open_index` opens
a directory of any kind. ``indexes`` keeps the names of the former ``pipelines.retrieval``
module, which are re-exported here too.
"""

from pathlib import Path

from .base import Hit, Index, IndexHit, ModelIdentity, read_index_meta
from .binary import BinaryIndex
from .bm25_index import BM25Index
from .colbert_index import ColBERTIndex
from .dense import VectorIndex
from .fusion import fuse
from .sparse_index import SparseIndex, sparse_identity

__all__ = [
    "BM25Index",
    "BinaryIndex",
    "ColBERTIndex",
    "Hit",
    "Index",
    "IndexHit",
    "ModelIdentity",
    "SparseIndex",
    "VectorIndex",
    "fuse",
    "open_index",
    "sparse_identity",
]

#: the class of each kind ``meta.json`` names
KIND_CLASSES: dict[str, type[Index]] = {
    kind: cls
    for cls in (VectorIndex, BinaryIndex, SparseIndex, BM25Index, ColBERTIndex)
    for kind in cls.kinds
}


def open_index(path: str | Path) -> Index:
    """The index in directory ``path``, of the kind its ``meta.json`` names (flat / hnsw:
    `VectorIndex`; binary: `BinaryIndex`; sparse: `SparseIndex`; bm25: `BM25Index`; colbert:
    `ColBERTIndex`).

    Raises:
        VectorIndexError: see `base.Index.load`.
    """
    return KIND_CLASSES[read_index_meta(path)["kind"]].load(path)
