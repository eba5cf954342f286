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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..deps import require
from ..errors import InputError
from .quantize import quantize_embeddings
from .sparse import SparseVector

__all__ = ["BinaryIndex", "Hit", "SparseIndex", "fuse"]


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


class BinaryIndex:
    """Binary codes of float vectors, searched by Hamming distance, rescored in float.

    Args:
        vectors: (N, D) float32 rows (normalised for cosine).
        keep_floats: keep the float rows for rescoring (else only the codes: Hamming scores).
    """

    def __init__(self, vectors: np.ndarray, *, keep_floats: bool = True) -> None:
        faiss = require("faiss", "index", "a binary index")
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(vectors) == 0:
            raise InputError("give a non-empty (N, D) array of vectors")
        self.dimension = vectors.shape[1]
        self.bits = 8 * ((self.dimension + 7) // 8)
        self.index = faiss.IndexBinaryFlat(self.bits)
        self.index.add(quantize_embeddings(vectors, "ubinary"))
        self.floats = vectors if keep_floats else None

    def __len__(self) -> int:
        return self.index.ntotal

    def search(
        self, queries: np.ndarray, top_k: int = 10, rescore: int | None = 40
    ) -> list[list[Hit]]:
        """The ``top_k`` rows per query: the ``rescore`` nearest by Hamming distance, ordered
        by the float dot product (``rescore=None``: by Hamming similarity, bits - distance).

        Raises:
            InputError: top_k < 1, rescore < top_k, or rescoring asked without float rows.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        if rescore is not None and (rescore < top_k or self.floats is None):
            raise InputError("rescore needs keep_floats=True and at least top_k candidates")
        queries = np.asarray(queries, dtype=np.float32)
        k = min(rescore or top_k, len(self))
        dist, rows = self.index.search(quantize_embeddings(queries, "ubinary"), k)
        out = []
        for q, d, r in zip(queries, dist, rows):
            if rescore is None:
                out.append(_top((self.bits - d).astype(np.float32), top_k))
                out[-1] = [Hit(int(r[h.index]), h.score) for h in out[-1]]
                continue
            scores = self.floats[r] @ q
            out.append([Hit(int(r[h.index]), h.score) for h in _top(scores, top_k)])
        return out


class SparseIndex:
    """An inverted index of `SparseVector` rows (exact dot-product search).

    Args:
        vectors: the documents' sparse vectors (rows 0..N-1).
    """

    def __init__(self, vectors: Sequence[SparseVector]) -> None:
        if not len(vectors):
            raise InputError("give at least one sparse vector")
        self.size = len(vectors)
        terms = np.concatenate([v.indices for v in vectors]).astype(np.int64)
        docs = np.concatenate([np.full(len(v.indices), i) for i, v in enumerate(vectors)])
        weights = np.concatenate([v.values for v in vectors]).astype(np.float32)
        order = np.argsort(terms, kind="stable")
        self.terms, self.docs, self.weights = terms[order], docs[order], weights[order]
        self.vocabulary, starts = np.unique(self.terms, return_index=True)
        self.starts = np.append(starts, len(self.terms))

    def __len__(self) -> int:
        return self.size

    def scores(self, query: SparseVector) -> np.ndarray:
        """(N,) dot products of ``query`` with every document."""
        out = np.zeros(self.size, dtype=np.float32)
        slots = np.searchsorted(self.vocabulary, query.indices)
        for slot, term, w in zip(slots, query.indices, query.values):
            if slot < len(self.vocabulary) and self.vocabulary[slot] == term:
                a, b = self.starts[slot], self.starts[slot + 1]
                np.add.at(out, self.docs[a:b], w * self.weights[a:b])
        return out

    def search(self, queries: Sequence[SparseVector], top_k: int = 10) -> list[list[Hit]]:
        """The ``top_k`` documents by dot product per query, best first."""
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        return [_top(self.scores(q), top_k) for q in queries]


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
