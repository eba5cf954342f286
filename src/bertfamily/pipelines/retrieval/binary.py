"""The binary index: one bit per dimension, searched by Hamming distance, rescored in float.

`BinaryIndex` keeps the codes (``x > 0``, `quantize.quantize_embeddings` "ubinary") in a FAISS
binary flat index (exact Hamming distance; 32x smaller than float32), then re-scores the best
``rescore`` candidates by the float query against their float vectors (the rescoring of Yamada
et al. 2021, "Efficient Passage Retrieval with Hashing for Open-domain Question Answering" §3,
as sentence-transformers' ``semantic_search_faiss`` does it).

Its directory (the layout of `base.Index`) holds ``index.faiss`` (the FAISS binary flat index)
and, for rescoring, ``vectors.npy`` (the L2-normalised float32 rows, memory-mapped when loaded:
rescoring reads only the candidates' rows); ``meta.json``'s ``binary`` holds the dimension, the
bits and whether the float rows are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...errors import InputError, VectorIndexError
from ...runtime import require
from ..embedding.quantize import quantize_embeddings
from .base import (
    INDEX_FILE,
    META_FILE,
    TEXTS_FILE,
    VECTORS_FILE,
    Hit,
    Index,
    IndexHit,
    ModelIdentity,
    files_disagree,
    is_int,
    meta_error,
    normalize_rows,
    top_hits,
)

__all__ = ["BinaryIndex"]


def _faiss():
    return require("faiss", "index", "a binary index")


def _float_rows(vectors) -> np.ndarray:
    """``vectors`` as a float32 array (not yet checked for shape)."""
    try:
        return np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        raise InputError("vectors must be an (N, D) array of numbers") from None


class BinaryIndex(Index):
    """Binary codes of float vectors, searched by Hamming distance, rescored in float.

    Args:
        vectors: (N, D) float rows (L2-normalised here, so rescored scores are cosines).
        keep_floats: keep the float rows for rescoring (else only the codes: Hamming scores).
        texts: N texts (default: empty strings); ids: N distinct ids (default 0..N-1).
        identity: the model that made the vectors (`base.model_identity`); needed to search
            with texts (`search_texts`) and checked there.

    Attributes:
        dimension: D; bits: D rounded up to a multiple of 8 (the code length).
        index: the FAISS binary flat index of the (N, bits / 8) uint8 codes.
        floats: (N, D) float32 L2-normalised rows (memory-mapped once loaded), or None.

    Raises:
        InputError: an empty or non-2-D array, a vector holding NaN or infinity, counts that
            differ, or a repeated id.
    """

    kinds: ClassVar[tuple[str, ...]] = ("binary",)
    label: ClassVar[str] = "binary"
    recorded_files: ClassVar[tuple[str, ...]] = (INDEX_FILE, TEXTS_FILE)

    def __init__(
        self,
        vectors: np.ndarray,
        *,
        keep_floats: bool = True,
        texts: Sequence[str] | None = None,
        ids: Sequence[Any] | None = None,
        identity: ModelIdentity | None = None,
    ) -> None:
        vectors = _float_rows(vectors)
        if vectors.ndim != 2 or len(vectors) == 0:
            raise InputError("give a non-empty (N, D) array of vectors")
        if identity is not None and vectors.shape[1] != identity.dimension:
            raise InputError(f"vectors must be (N, {identity.dimension}), got {vectors.shape}")
        self._init_empty(vectors.shape[1], identity, keep_floats)
        self.add_vectors(vectors, texts, ids)

    def _init_empty(self, dimension: int, identity: ModelIdentity | None, keep_floats: bool):
        self._init_rows("binary", identity, [], [])
        self.dimension = dimension
        self.bits = 8 * ((dimension + 7) // 8)
        self.index = _faiss().IndexBinaryFlat(self.bits)
        self.floats = np.zeros((0, dimension), np.float32) if keep_floats else None

    @classmethod
    def create(cls, identity: ModelIdentity, *, keep_floats: bool = True) -> BinaryIndex:
        """An empty index for vectors of ``identity.dimension`` (``keep_floats``: see the
        class)."""
        self = cls.__new__(cls)
        self._init_empty(identity.dimension, identity, keep_floats)
        return self

    # --- storage (the hooks of `base.Index`) ---------------------------------------------
    def _prepare(self, vectors) -> np.ndarray:
        v = _float_rows(vectors)
        if v.ndim != 2 or v.shape[1] != self.dimension:
            raise InputError(f"vectors must be (N, {self.dimension}), got {v.shape}")
        return v

    def _finite(self, prepared: np.ndarray) -> np.ndarray:
        return np.isfinite(prepared).all(axis=1)

    def _append(self, prepared: np.ndarray) -> None:
        vectors = normalize_rows(prepared)
        self.index.add(quantize_embeddings(vectors, "ubinary"))
        if self.floats is not None:
            self.floats = np.concatenate([np.asarray(self.floats), vectors])

    def _settings(self) -> dict[str, Any]:
        return {
            "metric": "Hamming distance of sign bits; rescoring: cosine",
            "binary": {
                "dimension": self.dimension,
                "bits": self.bits,
                "floats": self.floats is not None,
            },
        }

    def _write(self, directory: Path) -> None:
        _faiss().write_index_binary(self.index, str(directory / INDEX_FILE))
        if self.floats is not None:
            np.save(directory / VECTORS_FILE, np.asarray(self.floats, dtype=np.float32))

    def _read(self, path: Path, meta: dict[str, Any]) -> None:
        """``index.faiss`` and the memory-mapped ``vectors.npy``; their counts, bits and
        dimension must agree with ``meta`` and the model identity."""
        faiss = _faiss()
        settings = meta.get("binary")
        if not isinstance(settings, dict) or not is_int(settings.get("dimension"), 1):
            raise meta_error(path, f"binary {str(settings)[:80]!r} holds no dimension")
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
            raise files_disagree(
                path, f"{index.ntotal} codes of {index.d} bits; {META_FILE}: {count} × {bits}"
            )
        if self.identity is not None and self.identity.dimension != dimension:
            raise files_disagree(
                path, f"dimension {dimension}, the model's {self.identity.dimension}"
            )
        if floats is not None and (
            floats.shape != (count, dimension) or floats.dtype != np.float32
        ):
            raise files_disagree(
                path,
                f"{VECTORS_FILE} is {floats.dtype} {floats.shape}, not float32 "
                f"({count}, {dimension})",
            )
        self.dimension, self.bits, self.index, self.floats = dimension, bits, index, floats

    # --- queries ---------------------------------------------------------------------------
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
        queries = _float_rows(queries)
        if queries.ndim != 2 or queries.shape[1] != self.dimension:
            raise InputError(f"queries must be (Q, {self.dimension}), got {queries.shape}")
        queries = normalize_rows(queries)
        k = min(rescore or top_k, len(self))
        if k == 0:
            return [[] for _ in queries]
        dist, rows = self.index.search(quantize_embeddings(queries, "ubinary"), k)  # (Q, k)
        out = []
        for q, d, r in zip(queries, dist, rows):
            if rescore is None:
                scores = (self.bits - d).astype(np.float32)
            else:
                scores = np.asarray(self.floats[r]) @ q  # (k,)
            out.append([Hit(int(r[h.index]), h.score) for h in top_hits(scores, top_k)])
        return out

    def _search_encoded(
        self, queries: np.ndarray, top_k: int, rescore: int | None = 40
    ) -> list[list[IndexHit]]:
        rescore = None if rescore is None or self.floats is None else max(rescore, top_k)
        return self.hits(self.search(queries, top_k=top_k, rescore=rescore))

    def search_texts(
        self,
        embedder,
        queries: Sequence[str],
        top_k: int = 5,
        batch_size: int = 32,
        rescore: int | None = 40,
    ) -> list[list[IndexHit]]:
        """Embed ``queries`` and return `search`'s hits with their ids and texts; ``rescore``
        is raised to ``top_k`` when smaller (None, or no float rows: no rescoring).

        Raises:
            VectorIndexError: ``embedder`` is not the model that built the index.
        """
        return super().search_texts(embedder, queries, top_k, batch_size, rescore=rescore)
