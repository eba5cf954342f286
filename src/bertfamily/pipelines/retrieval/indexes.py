"""The names of the former ``bertfamily.pipelines.retrieval`` module (the binary and sparse
indexes, fusing, opening an index of any kind), now in `binary`, `sparse_index`, `fusion` and
the package; importable from here as before, with the other names that module held (its
constants, and what it imported from `dense`)."""

# ruff: noqa: F401  (a module of re-exports)
from __future__ import annotations

from . import open_index
from .base import (
    FORMAT_VERSION,
    INDEX_FILE,
    META_FILE,
    SPARSE_FILE,
    VECTORS_FILE,
    Hit,
    IndexHit,
    ModelIdentity,
    check_identity,
    check_new_ids,
    check_texts,
    model_identity,
    normalize_rows,
    read_identity,
    read_index_meta,
    read_index_rows,
    write_index_rows,
)
from .base import files_disagree as _bad
from .base import top_hits as _top
from .binary import BinaryIndex
from .dense import VectorIndex
from .fusion import fuse
from .sparse_index import SparseIndex, _encode_in_chunks, sparse_identity

__all__ = ["BinaryIndex", "Hit", "SparseIndex", "fuse", "open_index", "sparse_identity"]
