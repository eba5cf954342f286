"""Searching one or several persisted indexes of the same documents, the one code path of
``bertfamily search --index`` and the server's ``POST /search``: each index's hits of queries
its model has encoded (`search_encoded`), and with two or more indexes their lists fused
(`fused_hits`, `fusion.fuse`) over each index's top `FUSION_DEPTH`.

The caller encodes the queries with each index's model (the command line with the loaded
encoder, `base.Index.search_texts`; the server through its batcher), so that nothing here
runs a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import InputError, VectorIndexError
from .base import Index, IndexHit
from .fusion import _weights, fuse

__all__ = [
    "FUSIONS",
    "FUSION_DEPTH",
    "check_fusion",
    "check_same_documents",
    "fused_hits",
    "query_depth",
    "search_encoded",
]

#: Hits of each index that hybrid search fuses (at least the ``top_k`` asked for).
FUSION_DEPTH = 100
#: The fusion methods of `fusion.fuse` (rrf with weights is weighted RRF).
FUSIONS = ("rrf", "linear")


def query_depth(count: int, top_k: int) -> int:
    """Hits to ask of each of ``count`` indexes for ``top_k`` results: ``top_k`` of one
    index, ``max(FUSION_DEPTH, top_k)`` of each of several (the fused lists)."""
    return top_k if count == 1 else max(FUSION_DEPTH, top_k)


def search_encoded(index: Index, queries: Any, top_k: int, **options: Any) -> list[list[IndexHit]]:
    """The ``top_k`` hits of each query, best first, with ids and texts.

    Args:
        index: an opened index of any kind.
        queries: the queries as the index's model encodes them (dense and binary: (Q, D)
            float; sparse: `SparseVector` rows; colbert: (T, D) token matrices encoded as
            queries); a bm25 index: the query texts (it tokenises them itself).
        options: the kind's (binary: ``rescore``, raised to ``top_k`` when smaller).

    Raises:
        InputError: top_k < 1, queries of another dimension, a bm25 option.
    """
    if index.kind == "bm25":
        return index.search_texts(list(queries), top_k=top_k, **options)
    return index._search_encoded(queries, top_k, **options)


def check_fusion(count: int, fusion: str = "rrf", weights: Sequence[float] | None = None) -> None:
    """Refuse a fusion of ``count`` indexes' lists that `fused_hits` would refuse, before any
    query is encoded.

    Raises:
        InputError: another fusion method (`FUSIONS`), or weights that are not ``count``
            finite numbers >= 0.
    """
    if fusion not in FUSIONS:
        raise InputError(f"fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}")
    _weights(count, fusion, None, weights)  # `fuse`'s own check


#: The retriever each index kind is, for hybrid search: at most one of each is fused.
HYBRID_GROUPS = {"flat": "dense", "hnsw": "dense", "binary": "dense"}


def check_kinds(kinds: Sequence[str]) -> None:
    """Refuse to fuse index kinds that are not different retrievers (the rule of
    ``bertfamily search --index`` and ``/search``): at most one dense or binary index, one
    sparse, one bm25, one ColBERT — and not a dense and a ColBERT one together (both read the
    one embedding model).

    Raises:
        InputError: two of one group, or dense with ColBERT (the message lists ``kinds``).
    """
    groups = [HYBRID_GROUPS.get(k, k) for k in kinds]
    if len(set(groups)) != len(groups):
        raise InputError(
            "hybrid search fuses different retrievers: at most one dense or binary index and "
            f"one sparse index (SPLADE) and one bm25 index, got {list(kinds)}"
        )
    if "dense" in groups and "colbert" in groups:
        raise InputError(
            "a dense and a ColBERT index both take their model from --model: fuse either one "
            f"with the sparse and bm25 indexes, got {list(kinds)}"
        )


def check_same_documents(indexes: Sequence[Index], names: Sequence[Any]) -> None:
    """Refuse to fuse indexes that do not hold the same documents (ids and texts) in the same
    order: fusing counts rows.

    Raises:
        VectorIndexError: two that differ (``names``: how the message names each index).
    """
    first = indexes[0]
    for other, name in zip(indexes[1:], names[1:]):
        if other.ids != first.ids or other.texts != first.texts:
            raise VectorIndexError(
                f"{names[0]} and {name} do not hold the same documents in the same "
                "order: build both from the same corpus"
            )


def fused_hits(
    index: Index,
    lists: Sequence[Sequence[Sequence[IndexHit]]],
    top_k: int,
    fusion: str = "rrf",
    weights: Sequence[float] | None = None,
) -> list[list[IndexHit]]:
    """Per query, the ``top_k`` hits of several indexes of ``index``'s documents fused
    (`fusion.fuse`: ``fusion`` "rrf" or "linear", one weight per list), with their ids and
    texts; one list: its first ``top_k`` as they are.

    Args:
        index: one of the indexes (for the ids and texts; `check_same_documents`).
        lists: per index, per query, its hits best first (`query_depth` of them).

    Raises:
        InputError: as `check_fusion`.
    """
    check_fusion(len(lists), fusion, weights)
    if len(lists) == 1:
        return [list(hits[:top_k]) for hits in lists[0]]
    fused = [
        fuse(*per_query, top_k=top_k, method=fusion, weights=weights) for per_query in zip(*lists)
    ]
    return [
        [IndexHit(h.index, index.ids[h.index], h.score, index.texts[h.index]) for h in row]
        for row in fused
    ]
