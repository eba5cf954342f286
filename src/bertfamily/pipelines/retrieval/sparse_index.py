"""The sparse index: an inverted index of sparse vectors (SPLADE) on numpy.

`SparseIndex` keeps, per vocabulary id, the documents holding it and their weights; a query's
scores are exact dot products, summed over the query's ids. Only documents sharing an id with
the query are hits.

Its directory (the layout of `base.Index`) holds ``sparse.npz``: the documents in CSR form,
``indptr`` (N + 1,) int64, ``indices`` and ``values`` (nnz,) int64 and float32, each row's
indices ascending (read without pickle); the inverted index is rebuilt from it. ``meta.json``
records ``nnz``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...errors import InputError, VectorIndexError
from ..embedding.sparse import SparseVector
from .base import (
    SPARSE_FILE,
    TEXTS_FILE,
    Hit,
    Index,
    IndexHit,
    ModelIdentity,
    files_disagree,
    model_identity,
    top_hits,
)

__all__ = ["SparseIndex", "sparse_identity"]

#: a sparse index's rows in CSR form: indptr (N + 1,) int64, indices (nnz,) int64, values
#: (nnz,) float32
CSR = tuple[np.ndarray, np.ndarray, np.ndarray]


def sparse_identity(encoder) -> ModelIdentity:
    """The `base.ModelIdentity` of a `sparse.SparseEncoder`: its directory's digest, the
    vocabulary size, ``splade-<pooling>-<activation>`` (`base.model_identity`; hashed once,
    cached on it)."""
    return model_identity(encoder)


def _encode_in_chunks(encode, texts: list, batch_size: int, progress) -> list:
    """``encode(chunk)`` over chunks of ``8 * batch_size`` texts, ``progress(n)`` after each."""
    out: list = []
    step = 8 * batch_size
    for a in range(0, len(texts), step):
        out.extend(encode(texts[a : a + step]))
        if progress is not None:
            progress(len(texts[a : a + step]))
    return out


class SparseIndex(Index):
    """An inverted index of `SparseVector` rows (exact dot-product search).

    Args:
        vectors: the documents' sparse vectors (rows 0..N-1).
        texts: N texts (default: empty strings); ids: N distinct ids (default 0..N-1).
        identity: the model that made the vectors (`sparse_identity`); needed to search with
            texts (`search_texts`) and checked there; its dimension (the vocabulary size)
            bounds the indices.

    Attributes:
        terms, docs, weights: (nnz,) the postings sorted by term: vocabulary id, document row,
            weight; vocabulary: the distinct terms, ascending; starts: (len(vocabulary) + 1,)
            where each term's postings start.

    Raises:
        InputError: no vectors, a vector whose indices and values differ in length, an index
            outside the vocabulary, a value that is NaN or infinite, counts that differ, or a
            repeated id.
    """

    kinds: ClassVar[tuple[str, ...]] = ("sparse",)
    label: ClassVar[str] = "sparse"
    recorded_files: ClassVar[tuple[str, ...]] = (SPARSE_FILE, TEXTS_FILE)

    def __init__(
        self,
        vectors: Sequence[SparseVector],
        *,
        texts: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        identity: ModelIdentity | None = None,
    ) -> None:
        if not len(vectors):
            raise InputError("give at least one sparse vector")
        self._init_empty(identity)
        self.add_vectors(vectors, texts, ids)

    def _init_empty(self, identity: ModelIdentity | None) -> None:
        self._init_rows("sparse", identity, [], [])
        self._set_rows(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))

    @classmethod
    def create(cls, identity: ModelIdentity) -> SparseIndex:
        """An empty index for the vectors of ``identity``'s model (its dimension: the
        vocabulary size)."""
        self = cls.__new__(cls)
        self._init_empty(identity)
        return self

    # --- storage (the hooks of `base.Index`) ---------------------------------------------
    def _prepare(self, vectors: Sequence[SparseVector]) -> CSR:
        """(indptr, indices, values) of ``vectors``, checked."""
        for n, v in enumerate(vectors):
            if np.shape(v.indices) != np.shape(v.values) or np.ndim(v.indices) != 1:
                raise InputError(f"sparse vector {n}: indices and values must be equal-length 1-D")
        lengths = [len(v.indices) for v in vectors]
        indptr = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        indices = np.concatenate([np.zeros(0, np.int64)] + [np.asarray(v.indices) for v in vectors])
        values = np.concatenate([np.zeros(0, np.float32)] + [np.asarray(v.values) for v in vectors])
        indices, values = indices.astype(np.int64), values.astype(np.float32)
        width = self.identity.dimension if self.identity is not None else None
        if len(indices) and (indices.min() < 0 or (width is not None and indices.max() >= width)):
            raise InputError(f"sparse indices must lie in [0, {width or 'vocabulary size'})")
        return indptr, indices, values

    def _finite(self, prepared: CSR) -> np.ndarray:
        indptr, _, values = prepared
        finite = np.ones(len(indptr) - 1, dtype=bool)
        bad = np.flatnonzero(~np.isfinite(values))  # positions in values → their rows
        finite[np.searchsorted(indptr, bad, side="right") - 1] = False
        return finite

    def _append(self, prepared: CSR) -> None:
        """Rebuild the inverted index over the rows so far and ``prepared``."""
        indptr, indices, values = self._rows()
        more_ptr, more_idx, more_val = prepared
        self._set_rows(
            np.concatenate([indptr, indptr[-1] + more_ptr[1:]]),
            np.concatenate([indices, more_idx]),
            np.concatenate([values, more_val]),
        )

    def _set_rows(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
        """Build the inverted index from documents in CSR form."""
        self.size = len(indptr) - 1
        docs = np.repeat(np.arange(self.size), np.diff(indptr))
        order = np.argsort(indices, kind="stable")
        self.terms, self.docs, self.weights = indices[order], docs[order], values[order]
        self.vocabulary, starts = np.unique(self.terms, return_index=True)
        self.starts = np.append(starts, len(self.terms))

    def _rows(self) -> CSR:
        """The documents in CSR form (each row's indices ascending, as `SparseVector`'s)."""
        order = np.lexsort((self.terms, self.docs))
        counts = np.bincount(self.docs, minlength=self.size)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return indptr, self.terms[order], self.weights[order]

    def _encode(
        self, encoder, texts: list[str], batch_size: int, progress: Callable[[int], None] | None
    ) -> list[SparseVector]:
        return _encode_in_chunks(
            lambda chunk: encoder.encode(chunk, batch_size=batch_size), texts, batch_size, progress
        )

    def _settings(self) -> dict[str, Any]:
        return {"metric": "dot product", "nnz": len(self.terms)}

    def _write(self, directory: Path) -> None:
        indptr, indices, values = self._rows()
        with open(directory / SPARSE_FILE, "wb") as fh:
            np.savez(fh, indptr=indptr, indices=indices, values=values)

    def _read(self, path: Path, meta: dict[str, Any]) -> None:
        """``sparse.npz``: a CSR structure of ``meta``'s count and nnz, indices inside the
        model's vocabulary, finite values."""
        try:
            with np.load(path / SPARSE_FILE, allow_pickle=False) as z:
                indptr, indices, values = z["indptr"], z["indices"], z["values"]
        except (OSError, ValueError, KeyError) as e:
            raise VectorIndexError(f"cannot read the index in {path}: {SPARSE_FILE}: {e}") from e
        count = meta["count"]
        if not all(a.ndim == 1 for a in (indptr, indices, values)):
            raise files_disagree(path, f"{SPARSE_FILE} arrays must be 1-D")
        if (
            indptr.dtype.kind not in "iu"
            or indices.dtype.kind not in "iu"
            or values.dtype.kind != "f"
        ):
            raise files_disagree(
                path, f"{SPARSE_FILE} dtypes {indptr.dtype}, {indices.dtype}, {values.dtype}"
            )
        if len(indptr) != count + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise files_disagree(
                path, f"{SPARSE_FILE} indptr is not a CSR row pointer of {count} rows"
            )
        if not (indptr[-1] == len(indices) == len(values) == meta.get("nnz", len(indices))):
            raise files_disagree(
                path,
                f"{SPARSE_FILE}: {len(indices)} indices, {len(values)} values, indptr ends "
                f"at {indptr[-1]}",
            )
        width = self.identity.dimension if self.identity is not None else None
        if len(indices) and (indices.min() < 0 or (width is not None and indices.max() >= width)):
            raise files_disagree(path, f"indices outside [0, {width})")
        if not np.all(np.isfinite(values)):
            raise files_disagree(path, "values that are not finite")
        self._set_rows(indptr.astype(np.int64), indices.astype(np.int64), values.astype(np.float32))

    # --- queries ---------------------------------------------------------------------------
    def scores(self, query: SparseVector) -> np.ndarray:
        """(N,) float32 dot products of ``query`` with every document."""
        return self._scores(query)[0]

    def _scores(self, query: SparseVector) -> tuple[np.ndarray, np.ndarray]:
        """(N,) dot products and (N,) bool: the documents sharing a term with ``query``."""
        out = np.zeros(self.size, dtype=np.float32)
        touched = np.zeros(self.size, dtype=bool)
        indices = np.asarray(query.indices)
        slots = np.searchsorted(self.vocabulary, indices)
        for slot, term, w in zip(slots, indices, np.asarray(query.values)):
            if slot < len(self.vocabulary) and self.vocabulary[slot] == term:
                a, b = self.starts[slot], self.starts[slot + 1]
                np.add.at(out, self.docs[a:b], w * self.weights[a:b])
                touched[self.docs[a:b]] = True
        return out, touched

    def search(self, queries: Sequence[SparseVector], top_k: int = 10) -> list[list[Hit]]:
        """The ``top_k`` documents by dot product per query, best first; only documents that
        share a vocabulary id with the query are hits (possibly fewer than ``top_k``).

        Raises:
            InputError: top_k < 1.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        out = []
        for q in queries:
            scores, touched = self._scores(q)
            rows = np.flatnonzero(touched)
            out.append(
                [Hit(int(rows[h.index]), h.score) for h in top_hits(scores[rows], top_k)]
                if len(rows)
                else []
            )
        return out

    def _search_encoded(self, queries: list[SparseVector], top_k: int) -> list[list[IndexHit]]:
        return self.hits(self.search(queries, top_k=top_k))
