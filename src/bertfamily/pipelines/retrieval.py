"""The other two indexes of a retrieval stack, and fusing their results.

- `BinaryIndex`: one bit per dimension (``x > 0``, `quantize.quantize_embeddings` "ubinary") in
  a FAISS binary flat index (exact Hamming distance; 32x smaller than float32), then the best
  ``rescore`` candidates re-scored by the float query against their float vectors (the
  rescoring of Yamada et al. 2021, "Efficient Passage Retrieval with Hashing for Open-domain
  Question Answering" §3, as sentence-transformers' ``semantic_search_faiss`` does it).
- `SparseIndex`: an inverted index of sparse vectors (SPLADE) on numpy: per vocabulary id, the
  documents and weights; exact dot-product scores, summed over the query's ids.
- `fuse`: dense + sparse hit lists into one, by reciprocal rank fusion (Cormack et al. 2009:
  Σ 1 / (k + rank)) or a weighted sum of per-query min-max normalised scores.
- `open_index`: an index directory of any kind (dense `index.VectorIndex`, binary, sparse).

Both indexes also hold texts, ids and the identity of the model that made their vectors, and
persist as `index.VectorIndex` does: one directory written whole (`files.atomic_directory`)
with ``meta.json`` (format version, kind, row count, model identity) and ``texts.jsonl``, plus

- binary: ``index.faiss`` (the FAISS binary flat index) and, for rescoring, ``vectors.npy``
  (the float32 rows, memory-mapped when loaded: rescoring reads only the candidates' rows);
- sparse: ``sparse.npz`` (the documents in CSR form: ``indptr`` (N + 1,), ``indices`` and
  ``values`` (nnz,); read without pickle), from which the inverted index is rebuilt.

A load checks that the files agree (counts, dimensions, value ranges) and raises
`errors.VectorIndexError` naming what does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, VectorIndexError
from ..files import atomic_directory, directory_digest, write_text_atomic
from ..runtime import require
from .index import (
    FORMAT_VERSION,
    INDEX_FILE,
    META_FILE,
    IndexHit,
    ModelIdentity,
    VectorIndex,
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
from .quantize import quantize_embeddings
from .sparse import SparseVector

__all__ = ["BinaryIndex", "Hit", "SparseIndex", "fuse", "open_index", "sparse_identity"]

VECTORS_FILE, SPARSE_FILE = "vectors.npy", "sparse.npz"


@dataclass(frozen=True)
class Hit:
    """One result: the document's row in the index and its score (higher is better)."""

    index: int
    score: float


def _top(scores: np.ndarray, k: int) -> list[Hit]:
    k = min(k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    best = best[np.lexsort((best, -scores[best]))]  # score descending, then row ascending
    return [Hit(int(i), float(scores[i])) for i in best]


def _hits(index, rows: list[list[Hit]]) -> list[list[IndexHit]]:
    """Row hits as `IndexHit` (id and text of the row)."""
    return [
        [IndexHit(h.index, index.ids[h.index], h.score, index.texts[h.index]) for h in r]
        for r in rows
    ]


def _ids_and_texts(n: int, texts, ids) -> tuple[list[str], list[Any]]:
    texts = [""] * n if texts is None else list(texts)
    ids = list(range(n)) if ids is None else list(ids)
    if not (n == len(texts) == len(ids)):
        raise InputError(f"{n} vectors, {len(texts)} texts, {len(ids)} ids")
    return texts, ids


def _meta(kind: str, count: int, identity: ModelIdentity | None, **extra: Any) -> str:
    import json

    meta = {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "count": count,
        **extra,
        "model": None if identity is None else asdict(identity),
    }
    return json.dumps(meta, indent=2) + "\n"


def _bad(path: Path, what: str) -> VectorIndexError:
    return VectorIndexError(f"{path}: files disagree ({what})")


def _encode_in_chunks(encode, texts: list, batch_size: int, progress) -> list:
    """``encode(chunk)`` over chunks of ``8 * batch_size`` texts, ``progress(n)`` after each."""
    out: list = []
    step = 8 * batch_size
    for a in range(0, len(texts), step):
        out.extend(encode(texts[a : a + step]))
        if progress is not None:
            progress(len(texts[a : a + step]))
    return out


class BinaryIndex:
    """Binary codes of float vectors, searched by Hamming distance, rescored in float.

    Args:
        vectors: (N, D) float rows (L2-normalised here, so rescored scores are cosines).
        keep_floats: keep the float rows for rescoring (else only the codes: Hamming scores).
        texts: N texts (default: empty strings); ids: N distinct ids (default 0..N-1).
        identity: the model that made the vectors (`index.model_identity`); needed to search
            with texts (`search_texts`) and checked there.

    Raises:
        InputError: an empty or non-2-D array, counts that differ, or a repeated id.
    """

    def __init__(
        self,
        vectors: np.ndarray,
        *,
        keep_floats: bool = True,
        texts: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        identity: ModelIdentity | None = None,
    ) -> None:
        faiss = require("faiss", "index", "a binary index")
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            raise InputError("give a non-empty (N, D) array of vectors")
        if identity is not None and vectors.shape[1] != identity.dimension:
            raise InputError(f"vectors must be (N, {identity.dimension}), got {vectors.shape}")
        self.dimension = vectors.shape[1]
        self.bits = 8 * ((self.dimension + 7) // 8)
        self.identity = identity
        self.texts, self.ids = _ids_and_texts(len(vectors), texts, ids)
        self._id_keys = check_new_ids([], None, self.ids)
        vectors = normalize_rows(vectors)
        self.index = faiss.IndexBinaryFlat(self.bits)
        self.index.add(quantize_embeddings(vectors, "ubinary"))
        self.floats = vectors if keep_floats else None

    def __len__(self) -> int:
        return self.index.ntotal

    @classmethod
    def build(
        cls,
        embedder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
        keep_floats: bool = True,
    ) -> BinaryIndex:
        """Embed ``texts`` with ``embedder`` (a `SentenceEmbedder`) into a new binary index.

        Raises:
            InputError: no texts, a blank text, or a repeated id.
        """
        texts = list(texts)
        check_texts(texts)
        vectors = embedder.encode(texts, batch_size=batch_size, progress=progress)
        return cls(
            vectors,
            keep_floats=keep_floats,
            texts=texts,
            ids=ids,
            identity=model_identity(embedder),
        )

    def add_vectors(self, vectors: np.ndarray, texts: Sequence[str], ids: Sequence[Any]) -> None:
        """Append rows (in memory; `save` writes them).

        Raises:
            InputError: shapes or counts that do not match, or an id already in the index.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise InputError(f"vectors must be (N, {self.dimension}), got {vectors.shape}")
        texts, ids = _ids_and_texts(len(vectors), texts, ids)
        keys = check_new_ids(self.ids, self._id_keys, ids)
        vectors = normalize_rows(vectors)
        self.index.add(quantize_embeddings(vectors, "ubinary"))
        if self.floats is not None:
            self.floats = np.concatenate([np.asarray(self.floats), vectors])
        self.texts.extend(texts)
        self.ids.extend(ids)
        self._id_keys = keys

    def add(
        self,
        embedder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Embed ``texts`` and append them (ids default to continuing the row numbers).

        Raises:
            VectorIndexError: ``embedder`` is not the model that built the index.
            InputError: a blank text or an id already in the index.
        """
        self.check_model(embedder)
        check_texts(texts)
        if ids is None:
            ids = list(range(len(self), len(self) + len(texts)))
        vectors = embedder.encode(list(texts), batch_size=batch_size, progress=progress)
        self.add_vectors(vectors, list(texts), list(ids))

    def check_model(self, embedder) -> None:
        """Refuse an embedder that did not make the index's vectors (`index.check_identity`)."""
        check_identity(self.identity, model_identity(embedder))

    def search(
        self, queries: np.ndarray, top_k: int = 10, rescore: int | None = 40
    ) -> list[list[Hit]]:
        """The ``top_k`` rows per query: the ``rescore`` nearest by Hamming distance, ordered
        by the float dot product with the normalised query (cosine; ``rescore=None``: by
        Hamming similarity, bits - distance).

        Args:
            queries: (Q, D) float.

        Raises:
            InputError: top_k < 1, rescore < top_k, rescoring asked without float rows, or
                queries of another dimension.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        if rescore is not None and (rescore < top_k or self.floats is None):
            raise InputError("rescore needs keep_floats=True and at least top_k candidates")
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dimension:
            raise InputError(f"queries must be (Q, {self.dimension}), got {queries.shape}")
        queries = normalize_rows(queries)
        k = min(rescore or top_k, len(self))
        dist, rows = self.index.search(quantize_embeddings(queries, "ubinary"), k)
        out = []
        for q, d, r in zip(queries, dist, rows):
            if rescore is None:
                out.append(_top((self.bits - d).astype(np.float32), top_k))
                out[-1] = [Hit(int(r[h.index]), h.score) for h in out[-1]]
                continue
            scores = np.asarray(self.floats[r]) @ q
            out.append([Hit(int(r[h.index]), h.score) for h in _top(scores, top_k)])
        return out

    def search_texts(
        self,
        embedder,
        queries: Sequence[str],
        top_k: int = 5,
        batch_size: int = 32,
        rescore: int | None = 40,
    ) -> list[list[IndexHit]]:
        """Embed ``queries`` and return `search`'s hits with their ids and texts; ``rescore``
        is raised to ``top_k`` when smaller (None: no rescoring).

        Raises:
            VectorIndexError: ``embedder`` is not the model that built the index.
        """
        self.check_model(embedder)
        vectors = embedder.encode(list(queries), batch_size=batch_size)
        rescore = None if rescore is None or self.floats is None else max(rescore, top_k)
        return _hits(self, self.search(vectors, top_k=top_k, rescore=rescore))

    # --- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the index directory atomically (see the module docstring)."""
        faiss = require("faiss", "index", "a binary index")
        path = Path(path)
        meta = _meta(
            "binary",
            len(self),
            self.identity,
            metric="Hamming distance of sign bits; rescoring: cosine",
            binary={
                "dimension": self.dimension,
                "bits": self.bits,
                "floats": self.floats is not None,
            },
        )
        with atomic_directory(path, keep_existing=False) as tmp:
            faiss.write_index_binary(self.index, str(tmp / INDEX_FILE))
            if self.floats is not None:
                np.save(tmp / VECTORS_FILE, np.asarray(self.floats, dtype=np.float32))
            write_index_rows(tmp, self.ids, self.texts)
            write_text_atomic(tmp / META_FILE, meta)
        return path

    @classmethod
    def load(cls, path: str | Path) -> BinaryIndex:
        """Open a binary index directory (the float rows memory-mapped).

        Raises:
            VectorIndexError: not an index directory, another kind or format version, or files
                that do not agree (row counts, bits, dimension, float rows).
        """
        faiss = require("faiss", "index", "a binary index")
        path = Path(path)
        meta = read_index_meta(path)
        if meta["kind"] != "binary":
            raise VectorIndexError(f"{path} is a {meta['kind']} index, not a binary one")
        identity = read_identity(path, meta)
        ids, texts = read_index_rows(path, meta["count"])
        settings = meta.get("binary")
        if not isinstance(settings, dict) or not isinstance(settings.get("dimension"), int):
            raise VectorIndexError(f"{path}: {META_FILE} has no binary settings")
        dimension, count = settings["dimension"], meta["count"]
        try:
            index = faiss.read_index_binary(str(path / INDEX_FILE))
            floats = (
                np.load(path / VECTORS_FILE, mmap_mode="r", allow_pickle=False)
                if settings.get("floats")
                else None
            )
        except (OSError, ValueError, RuntimeError) as e:
            raise VectorIndexError(f"cannot read the index in {path}: {e}") from e
        bits = 8 * ((dimension + 7) // 8)
        if index.ntotal != count or index.d != bits:
            raise _bad(
                path, f"{index.ntotal} codes of {index.d} bits; {META_FILE}: {count} × {bits}"
            )
        if identity is not None and identity.dimension != dimension:
            raise _bad(path, f"dimension {dimension}, the model's {identity.dimension}")
        if floats is not None and (
            floats.shape != (count, dimension) or floats.dtype != np.float32
        ):
            raise _bad(
                path,
                f"{VECTORS_FILE} is {floats.dtype} {floats.shape}, not float32 "
                f"({count}, {dimension})",
            )
        self = cls.__new__(cls)
        self.dimension, self.bits, self.identity = dimension, bits, identity
        self.texts, self.ids, self._id_keys = texts, ids, None
        self.index, self.floats = index, floats
        return self


class SparseIndex:
    """An inverted index of `SparseVector` rows (exact dot-product search).

    Args:
        vectors: the documents' sparse vectors (rows 0..N-1).
        texts: N texts (default: empty strings); ids: N distinct ids (default 0..N-1).
        identity: the model that made the vectors (`sparse_identity`); needed to search with
            texts (`search_texts`) and checked there; its dimension (the vocabulary size)
            bounds the indices.

    Raises:
        InputError: no vectors, a vector whose indices and values differ in length, an index
            outside the vocabulary, counts that differ, or a repeated id.
    """

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
        self.identity = identity
        self.texts, self.ids = _ids_and_texts(len(vectors), texts, ids)
        self._id_keys = check_new_ids([], None, self.ids)
        self._set_rows(*self._csr(vectors))

    def _csr(self, vectors: Sequence[SparseVector]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indptr, indices, values) of ``vectors``, checked."""
        for n, v in enumerate(vectors):
            if np.shape(v.indices) != np.shape(v.values) or np.ndim(v.indices) != 1:
                raise InputError(f"sparse vector {n}: indices and values must be equal-length 1-D")
        lengths = [len(v.indices) for v in vectors]
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        indices = np.concatenate([np.asarray(v.indices) for v in vectors]).astype(np.int64)
        values = np.concatenate([np.asarray(v.values) for v in vectors]).astype(np.float32)
        self._check_indices(indices)
        return indptr, indices, values

    def _check_indices(self, indices: np.ndarray) -> None:
        width = self.identity.dimension if self.identity is not None else None
        if len(indices) and (indices.min() < 0 or (width is not None and indices.max() >= width)):
            raise InputError(f"sparse indices must lie in [0, {width or 'vocabulary size'})")

    def _set_rows(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
        """Build the inverted index from documents in CSR form."""
        self.size = len(indptr) - 1
        docs = np.repeat(np.arange(self.size), np.diff(indptr))
        order = np.argsort(indices, kind="stable")
        self.terms, self.docs, self.weights = indices[order], docs[order], values[order]
        self.vocabulary, starts = np.unique(self.terms, return_index=True)
        self.starts = np.append(starts, len(self.terms))

    def _rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The documents in CSR form (each row's indices ascending, as `SparseVector`'s)."""
        order = np.lexsort((self.terms, self.docs))
        counts = np.bincount(self.docs, minlength=self.size)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return indptr, self.terms[order], self.weights[order]

    def __len__(self) -> int:
        return self.size

    @classmethod
    def build(
        cls,
        encoder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> SparseIndex:
        """Encode ``texts`` with ``encoder`` (a `sparse.SparseEncoder`) into a new index.

        Raises:
            InputError: no texts, a blank text, or a repeated id.
        """
        texts = list(texts)
        check_texts(texts)
        vectors = _encode_in_chunks(
            lambda chunk: encoder.encode(chunk, batch_size=batch_size), texts, batch_size, progress
        )
        return cls(vectors, texts=texts, ids=ids, identity=sparse_identity(encoder))

    def add_vectors(
        self, vectors: Sequence[SparseVector], texts: Sequence[str], ids: Sequence[Any]
    ) -> None:
        """Append documents (in memory; `save` writes them); the inverted index is rebuilt.

        Raises:
            InputError: see the class; an id already in the index.
        """
        texts, ids = _ids_and_texts(len(vectors), texts, ids)
        keys = check_new_ids(self.ids, self._id_keys, ids)
        indptr, indices, values = self._rows()
        more_ptr, more_idx, more_val = self._csr(vectors)
        self._set_rows(
            np.concatenate([indptr, indptr[-1] + more_ptr[1:]]),
            np.concatenate([indices, more_idx]),
            np.concatenate([values, more_val]),
        )
        self.texts.extend(texts)
        self.ids.extend(ids)
        self._id_keys = keys

    def add(
        self,
        encoder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Encode ``texts`` and append them (ids default to continuing the row numbers).

        Raises:
            VectorIndexError: ``encoder`` is not the model that built the index.
            InputError: a blank text or an id already in the index.
        """
        self.check_model(encoder)
        check_texts(texts)
        if ids is None:
            ids = list(range(len(self), len(self) + len(texts)))
        vectors = _encode_in_chunks(
            lambda chunk: encoder.encode(chunk, batch_size=batch_size),
            list(texts),
            batch_size,
            progress,
        )
        self.add_vectors(vectors, list(texts), list(ids))

    def check_model(self, encoder) -> None:
        """Refuse an encoder that did not make the index's vectors (`index.check_identity`)."""
        check_identity(self.identity, sparse_identity(encoder))

    def scores(self, query: SparseVector) -> np.ndarray:
        """(N,) dot products of ``query`` with every document."""
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
        share a vocabulary id with the query are hits (possibly fewer than ``top_k``)."""
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        out = []
        for q in queries:
            scores, touched = self._scores(q)
            rows = np.flatnonzero(touched)
            out.append(
                [Hit(int(rows[h.index]), h.score) for h in _top(scores[rows], top_k)]
                if len(rows)
                else []
            )
        return out

    def search_texts(
        self, encoder, queries: Sequence[str], top_k: int = 5, batch_size: int = 32
    ) -> list[list[IndexHit]]:
        """Encode ``queries`` and return `search`'s hits with their ids and texts.

        Raises:
            VectorIndexError: ``encoder`` is not the model that built the index.
        """
        self.check_model(encoder)
        vectors = encoder.encode(list(queries), batch_size=batch_size)
        return _hits(self, self.search(vectors, top_k=top_k))

    # --- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the index directory atomically (see the module docstring)."""
        path = Path(path)
        indptr, indices, values = self._rows()
        meta = _meta("sparse", len(self), self.identity, metric="dot product", nnz=len(indices))
        with atomic_directory(path, keep_existing=False) as tmp:
            with open(tmp / SPARSE_FILE, "wb") as fh:
                np.savez(fh, indptr=indptr, indices=indices, values=values)
            write_index_rows(tmp, self.ids, self.texts)
            write_text_atomic(tmp / META_FILE, meta)
        return path

    @classmethod
    def load(cls, path: str | Path) -> SparseIndex:
        """Open a sparse index directory.

        Raises:
            VectorIndexError: not an index directory, another kind or format version, or files
                that do not agree (row count, CSR structure, indices outside the vocabulary,
                values not finite).
        """
        path = Path(path)
        meta = read_index_meta(path)
        if meta["kind"] != "sparse":
            raise VectorIndexError(f"{path} is a {meta['kind']} index, not a sparse one")
        identity = read_identity(path, meta)
        ids, texts = read_index_rows(path, meta["count"])
        try:
            with np.load(path / SPARSE_FILE, allow_pickle=False) as z:
                indptr, indices, values = z["indptr"], z["indices"], z["values"]
        except (OSError, ValueError, KeyError) as e:
            raise VectorIndexError(f"cannot read the index in {path}: {SPARSE_FILE}: {e}") from e
        count = meta["count"]
        if not all(a.ndim == 1 for a in (indptr, indices, values)):
            raise _bad(path, f"{SPARSE_FILE} arrays must be 1-D")
        if (
            indptr.dtype.kind not in "iu"
            or indices.dtype.kind not in "iu"
            or values.dtype.kind != "f"
        ):
            raise _bad(
                path, f"{SPARSE_FILE} dtypes {indptr.dtype}, {indices.dtype}, {values.dtype}"
            )
        if len(indptr) != count + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
            raise _bad(path, f"{SPARSE_FILE} indptr is not a CSR row pointer of {count} rows")
        if not (indptr[-1] == len(indices) == len(values) == meta.get("nnz", len(indices))):
            raise _bad(
                path,
                f"{SPARSE_FILE}: {len(indices)} indices, {len(values)} values, indptr ends "
                f"at {indptr[-1]}",
            )
        width = identity.dimension if identity is not None else None
        if len(indices) and (indices.min() < 0 or (width is not None and indices.max() >= width)):
            raise _bad(path, f"indices outside [0, {width})")
        if not np.all(np.isfinite(values)):
            raise _bad(path, "values that are not finite")
        self = cls.__new__(cls)
        self.identity, self.texts, self.ids, self._id_keys = identity, texts, ids, None
        self._set_rows(indptr.astype(np.int64), indices.astype(np.int64), values.astype(np.float32))
        return self


def sparse_identity(encoder) -> ModelIdentity:
    """The `index.ModelIdentity` of a `sparse.SparseEncoder`: its directory's digest, the
    vocabulary size, ``splade-<pooling>-<activation>`` (hashed once, cached on it)."""
    cached = getattr(encoder, "_identity", None)
    if cached is None:
        cached = ModelIdentity(
            digest=directory_digest(encoder.path),
            dimension=encoder.dimension,
            pooling=f"splade-{encoder.spec.pooling}-{encoder.spec.activation}",
            name=Path(encoder.path).name,
        )
        encoder._identity = cached
    return cached


def open_index(path: str | Path) -> VectorIndex | BinaryIndex | SparseIndex:
    """The index in directory ``path``, of the kind its ``meta.json`` names (flat / hnsw:
    `index.VectorIndex`; binary: `BinaryIndex`; sparse: `SparseIndex`).

    Raises:
        VectorIndexError: see the kinds' ``load``.
    """
    kind = read_index_meta(path)["kind"]
    if kind == "binary":
        return BinaryIndex.load(path)
    if kind == "sparse":
        return SparseIndex.load(path)
    return VectorIndex.load(path)


def fuse(
    dense: Sequence[Hit],
    sparse: Sequence[Hit],
    top_k: int = 10,
    *,
    method: str = "rrf",
    weight: float = 0.5,
    k: int = 60,
) -> list[Hit]:
    """One query's dense and sparse hits fused, best first.

    Args:
        method: "rrf" (Σ 1/(k + rank), rank from 1; a list a document is missing from adds
            nothing) or "linear" (``weight`` · dense + (1 - weight) · sparse, each list's
            scores min-max normalised to [0, 1]; missing = 0).
    """
    if method not in ("rrf", "linear"):
        raise InputError(f"method must be 'rrf' or 'linear', got {method!r}")
    total: dict[int, float] = {}
    for hits, w in ((dense, weight), (sparse, 1 - weight)):
        if not hits:
            continue
        if method == "rrf":
            for rank, h in enumerate(hits, 1):
                total[h.index] = total.get(h.index, 0.0) + 1.0 / (k + rank)
            continue
        s = np.array([h.score for h in hits], dtype=np.float64)
        span = s.max() - s.min()
        norm = (s - s.min()) / span if span > 0 else np.ones_like(s)
        for h, x in zip(hits, norm):
            total[h.index] = total.get(h.index, 0.0) + w * float(x)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:top_k]
    return [Hit(i, s) for i, s in ranked]
