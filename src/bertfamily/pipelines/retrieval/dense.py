"""The dense index of a corpus: embed once, query many times (`bertfamily index`).

`VectorIndex` holds the float vectors in FAISS (Johnson, Douze & Jégou 2019, "Billion-scale
similarity search with GPUs"), ``index.faiss`` in its directory:

- ``flat``: exact inner-product search (``IndexFlatIP``), the default;
- ``hnsw``: HNSW (``IndexHNSWFlat``; Malkov & Yashunin 2018, "Efficient and robust approximate
  nearest neighbor search using Hierarchical Navigable Small World graphs") for large corpora,
  its settings (M, efConstruction, efSearch) in ``meta.json``'s ``hnsw``.

Rows are L2-normalised, so the inner product is the cosine similarity that `semantic_search`
ranks by. The rows, the model identity, the directory layout (``meta.json``, ``texts.jsonl``,
atomic writes, the load checks) are `base.Index`'s; a dense index's ``meta.json`` also records
the size and SHA-256 of ``index.faiss`` and ``texts.jsonl``, checked before FAISS reads
anything.

The names of `base` that this module held before the split (``ModelIdentity``,
``model_identity``, ``read_index_meta``, ...) are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...errors import InputError, VectorIndexError
from ...runtime import require

# ALL_KINDS, FORMAT_VERSION and the private helpers: names this module held before `base`
# took them, importable from here as before
from .base import (
    ALL_KINDS,  # noqa: F401
    DENSE_KINDS,
    FORMAT_VERSION,  # noqa: F401
    INDEX_FILE,
    META_FILE,
    TEXTS_FILE,
    Index,
    IndexHit,
    ModelIdentity,
    _check_file,  # noqa: F401
    _file_record,  # noqa: F401
    _read_rows,  # noqa: F401
    _sha256,  # noqa: F401
    check_identity,
    check_new_ids,
    check_texts,
    files_disagree,
    is_int,
    meta_error,
    model_identity,
    normalize_rows,
    read_identity,
    read_index_meta,
    read_index_rows,
    write_index_rows,
)

__all__ = [
    "VectorIndexError",
    "IndexHit",
    "ModelIdentity",
    "VectorIndex",
    "check_identity",
    "check_new_ids",
    "check_texts",
    "model_identity",
    "normalize_rows",
    "read_identity",
    "read_index_meta",
    "read_index_rows",
    "write_index_rows",
]

log = logging.getLogger(__name__)
_is_int = is_int  # its name before `base`

KINDS = DENSE_KINDS
HNSW_DEFAULTS = {"m": 32, "ef_construction": 200, "ef_search": 128}
# the largest HNSW setting meta.json may hold: far above any useful one (FAISS takes C ints,
# and sizes its search heaps by ef)
HNSW_MAX = 2**16
METRIC = "cosine (inner product of L2-normalised rows)"


def _faiss():
    return require("faiss", "index", "the vector index (bertfamily index)")


class VectorIndex(Index):
    """Float vectors in a FAISS flat or HNSW index, with the rows and model identity of
    `base.Index` (see the module docstring).

    Build one with `build` (or `create` and `add_vectors`, or `from_embeddings`), open one with
    `load` (or `retrieval.open_index`).

    Attributes:
        faiss_index: the FAISS index: (N, dimension) L2-normalised float32 rows.
        kind: "flat" or "hnsw"; hnsw_m, ef_construction, ef_search: the HNSW settings.
    """

    kinds: ClassVar[tuple[str, ...]] = DENSE_KINDS
    label: ClassVar[str] = "dense"
    recorded_files: ClassVar[tuple[str, ...]] = (INDEX_FILE, TEXTS_FILE)
    needs_identity: ClassVar[bool] = True

    def __init__(
        self,
        faiss_index,
        texts: list[str],
        ids: list[Any],
        identity: ModelIdentity,
        kind: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
    ) -> None:
        self._init_rows(kind, identity, texts, ids)
        self.faiss_index = faiss_index
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search

    @classmethod
    def create(
        cls,
        identity: ModelIdentity,
        *,
        kind: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
    ) -> VectorIndex:
        """An empty index for vectors of ``identity.dimension``.

        Args:
            kind: "flat" (exact) or "hnsw" (approximate).
            hnsw_m: HNSW neighbours per node (M).
            ef_construction: HNSW candidate-list size when building.
            ef_search: HNSW candidate-list size when querying.

        Raises:
            InputError: an unknown kind, or a setting < 1.
        """
        if kind not in KINDS:
            raise InputError(f"index kind must be one of {KINDS}, got {kind!r}")
        for name, v in (
            ("hnsw_m", hnsw_m),
            ("ef_construction", ef_construction),
            ("ef_search", ef_search),
        ):
            if v < 1:
                raise InputError(f"{name} must be >= 1, got {v}")
        faiss = _faiss()
        d = identity.dimension
        if kind == "flat":
            index = faiss.IndexFlatIP(d)
        else:
            index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = ef_construction
        return cls(index, [], [], identity, kind, hnsw_m, ef_construction, ef_search)

    @classmethod
    def from_embeddings(
        cls,
        path: str | Path,
        *,
        embedder=None,
        id_column: str = "id",
        vector_column: str = "vector",
        text_column: str = "text",
        **settings: Any,
    ) -> VectorIndex:
        """An index of the vectors already in a Parquet embedding table (``embed --output
        x.parquet``, or the directory of shards ``embed --engine ray`` writes): nothing is
        embedded again and every row keeps its id; texts come from the table's text column
        (empty when it has none).

        Args:
            embedder: the model that made the vectors; needed only when the table does not
                record one (then its identity is the index's), else checked against it.
            settings: `create`'s (kind, hnsw_m, ef_construction, ef_search).

        Raises:
            VectorIndexError: no model identity in the table and no ``embedder``, an
                ``embedder`` that is not the table's model, vectors of another dimension, or a
                sparse table (a SPLADE model's). A quantized column beside ``vector`` is left
                alone: the index holds the float vectors.
            InputError: a vector holding NaN or infinity, or a repeated id (the table named).
        """
        from ...data.table_io import iter_embedding_table, table_identity, table_metadata

        meta = table_metadata(path)
        if meta.get("kind") == "sparse":
            raise VectorIndexError(
                f"{path} holds sparse vectors (a SPLADE model's sparse_indices and "
                "sparse_values); this index holds dense vectors: read them with "
                "data.table_io.iter_sparse_table into pipelines.retrieval.SparseIndex"
            )
        recorded = table_identity(path)  # validated
        if recorded is None and embedder is None:
            raise VectorIndexError(
                f"{path} does not record the model that made its vectors: give the model "
                "(--model) to build the index"
            )
        identity = ModelIdentity(**recorded) if recorded is not None else model_identity(embedder)
        index = cls.create(identity, **settings)
        if embedder is not None:
            index.check_model(embedder)
        for ids, vectors, texts in iter_embedding_table(
            path, id_column=id_column, vector_column=vector_column, text_column=text_column
        ):
            if vectors.shape[1:] != (identity.dimension,):
                raise VectorIndexError(
                    f"{path}: vectors of dimension {vectors.shape[1:]} but the model's is "
                    f"{identity.dimension}"
                )
            try:
                index.add_vectors(vectors, texts, ids)
            except InputError as e:
                raise InputError(f"{path}: {e}") from None
        return index

    # --- storage (the hooks of `base.Index`) ---------------------------------------------
    def _prepare(self, vectors) -> np.ndarray:
        """(N, dimension) float32, refused when of another shape."""
        try:
            v = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError):
            raise InputError("vectors must be an (N, D) array of numbers") from None
        if v.ndim != 2 or v.shape[1] != self.identity.dimension:
            raise InputError(
                f"vectors must be (N, {self.identity.dimension}), got {tuple(np.shape(vectors))}"
            )
        return v

    def _finite(self, prepared: np.ndarray) -> np.ndarray:
        return np.isfinite(prepared).all(axis=1)

    def _append(self, prepared: np.ndarray) -> None:
        self.faiss_index.add(normalize_rows(prepared))

    def _settings(self) -> dict[str, Any]:
        return {
            "metric": METRIC,
            "hnsw": {
                "m": self.hnsw_m,
                "ef_construction": self.ef_construction,
                "ef_search": self.ef_search,
            },
        }

    def _write(self, directory: Path) -> None:
        _faiss().write_index(self.faiss_index, str(directory / INDEX_FILE))

    def _read(self, path: Path, meta: dict[str, Any]) -> None:
        """``index.faiss`` (its digest already checked) and the HNSW settings of ``meta``
        (the defaults when absent); the vector count and dimension must agree."""
        faiss = _faiss()
        hnsw = meta.get("hnsw", HNSW_DEFAULTS)
        if not isinstance(hnsw, dict) or not all(
            is_int(hnsw.get(k), 1) and hnsw[k] <= HNSW_MAX for k in HNSW_DEFAULTS
        ):
            raise meta_error(
                path,
                f"hnsw {hnsw!r} must hold m, ef_construction and ef_search, each in "
                f"[1, {HNSW_MAX:,}]",
            )
        try:
            index = faiss.read_index(str(path / INDEX_FILE))
        except (OSError, ValueError, RuntimeError) as e:
            raise VectorIndexError(f"cannot read the index in {path}: {e}") from e
        if index.ntotal != meta["count"] or index.d != self.identity.dimension:
            raise files_disagree(
                path,
                f"{index.ntotal} vectors of dimension {index.d}, {len(self.texts)} texts, "
                f"{META_FILE} says {meta['count']} × {self.identity.dimension}",
            )
        self.faiss_index = index
        self.hnsw_m, self.ef_construction = hnsw["m"], hnsw["ef_construction"]
        self.ef_search = hnsw["ef_search"]

    # --- queries ---------------------------------------------------------------------------
    def search_vectors(self, queries: np.ndarray, top_k: int = 5) -> list[list[IndexHit]]:
        """The ``top_k`` rows closest (cosine) to each query vector, best first.

        Args:
            queries: (Q, dimension) float.

        Raises:
            InputError: top_k < 1, or queries of another dimension.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        queries = np.asarray(queries)
        if queries.ndim != 2 or queries.shape[1] != self.identity.dimension:
            raise InputError(
                f"queries must be (Q, {self.identity.dimension}), got {tuple(queries.shape)}"
            )
        if self.kind == "hnsw":
            self.faiss_index.hnsw.efSearch = max(self.ef_search, top_k)
        k = min(top_k, len(self))
        if k == 0:
            return [[] for _ in queries]
        scores, rows = self.faiss_index.search(normalize_rows(queries), k)  # (Q, k) each
        return [
            [
                IndexHit(int(r), self.ids[r], float(s), self.texts[r])
                for s, r in zip(srow, rrow)
                if r >= 0
            ]
            for srow, rrow in zip(scores, rows)
        ]

    def _search_encoded(self, queries: np.ndarray, top_k: int) -> list[list[IndexHit]]:
        return self.search_vectors(queries, top_k)

    def search(
        self, embedder, queries: Sequence[str], top_k: int = 5, batch_size: int = 32
    ) -> list[list[IndexHit]]:
        """Embed ``queries`` and return `search_vectors`' hits; the corpus is not re-embedded
        (`base.Index.search_texts`).

        Raises:
            VectorIndexError: ``embedder`` is not the model that built the index.
        """
        return self.search_texts(embedder, queries, top_k=top_k, batch_size=batch_size)
