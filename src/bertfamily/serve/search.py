"""The persisted indexes a server searches (``bertfamily serve --index``, ``POST /search``):
each opened once at start-up and bound to the served model that encodes its queries, the one
that built it (`base.Index.check_model`, the check of ``bertfamily search --index``); a bm25
index needs none. Indexes that hold the same documents in the same order share a ``corpus``
number: only those are fused (`retrieval.hybrid.check_same_documents`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, VectorIndexError
from ..pipelines.retrieval import Index, open_index
from ..pipelines.retrieval.hybrid import check_same_documents
from .adapters import ColBERTModel, EmbeddingModel, SparseModel
from .state import ServeState

__all__ = ["ServedIndex", "load_indexes"]

#: The served kind whose model encodes the queries of each index kind (bm25: none).
QUERY_MODELS: dict[str, type] = {
    "flat": EmbeddingModel,
    "hnsw": EmbeddingModel,
    "binary": EmbeddingModel,
    "sparse": SparseModel,
    "colbert": ColBERTModel,
}


@dataclass
class ServedIndex:
    """One index of the server.

    Attributes:
        name: its name in ``/search``'s ``index`` (``--index NAME=DIR``; default the
            directory's name).
        index: the opened index.
        state: the served model that encodes its queries (None: a bm25 index).
        corpus: indexes of one number hold the same documents in the same order.
        where: the directory it was opened from (None: given opened).
    """

    name: str
    index: Index
    state: ServeState | None
    corpus: int
    where: Path | None = None


def load_indexes(
    indexes: Mapping[str, str | Path | Index], peers: Mapping[str, ServeState]
) -> dict[str, ServedIndex]:
    """Open each index (a directory, or an opened `retrieval.Index`) and bind it to the served
    model of ``peers`` that built it.

    Raises:
        VectorIndexError: a directory that is missing or not a readable index (as
            `retrieval.open_index`), or no served model that built it (the message names the
            index and, with one candidate, both models).
        InputError: an empty or untrimmed name; an index of a kind no served model encodes
            (serve its model too).
    """
    served: dict[str, ServedIndex] = {}
    for name, given in indexes.items():
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise InputError(f"an index's name must be a non-empty word, got {name!r}")
        where = None if isinstance(given, Index) else Path(given)
        try:
            index = given if isinstance(given, Index) else open_index(given)
        except VectorIndexError as e:
            raise VectorIndexError(f"--index {name}={given}: {e}") from None
        state = _model_of(name, index, peers)
        corpus = next(
            (s.corpus for s in served.values() if _same_documents(s.index, index)), len(served)
        )
        served[name] = ServedIndex(name, index, state, corpus, where)
    return served


def _same_documents(a: Index, b: Index) -> bool:
    try:
        check_same_documents([a, b], ["a", "b"])
    except VectorIndexError:
        return False
    return True


def _model_of(name: str, index: Index, peers: Mapping[str, ServeState]) -> ServeState | None:
    """The served model that built ``index`` (None for bm25): the first of its kind whose
    identity matches (`base.Index.check_model`)."""
    kind = index.kind
    wanted = QUERY_MODELS.get(kind)
    if wanted is None:
        return None
    candidates = [s for s in peers.values() if isinstance(s.model, wanted)]
    if not candidates:
        raise InputError(
            f"index {name!r} is a {kind} index and no served model of its kind encodes its "
            f"queries: serve the model that built it too (--model)"
        )
    problems: list[Any] = []
    for state in candidates:
        try:
            index.check_model(state.model.pipeline)
        except VectorIndexError as e:
            problems.append(f"{state.model_id}: {e}")
            continue
        return state
    if len(problems) == 1:
        raise VectorIndexError(f"index {name!r}: {str(problems[0]).partition(': ')[2]}")
    raise VectorIndexError(
        f"index {name!r}: no served model built it (" + "; ".join(problems) + ")"
    )
