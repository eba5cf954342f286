"""``POST /search`` (ours): the persisted indexes the server loaded (``serve --index``,
`serve.search`) searched with their queries encoded by the served model that built each,
through its adapter and the batcher as /embed, /embed_sparse and /embed_multivector encode
them (a bm25 index tokenises the texts itself); two or more indexes of the same documents are
fused by the code of ``bertfamily search --index`` (`retrieval.hybrid`). Under
``/models/{name}/`` the indexes of that model (and the bm25 ones) alone."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from ...errors import InputError, ServeError
from ...pipelines.retrieval.hybrid import (
    check_fusion,
    check_kinds,
    fused_hits,
    query_depth,
    search_encoded,
)
from ..adapters import EmbeddingModel, SparseModel, split_rows
from ..admission import as_list, check_count
from ..search import ServedIndex
from ..state import MODEL_KEY, ServeState, serving
from ..wire import SearchRequest
from .embedding import embed_texts

__all__ = ["router"]

router = APIRouter()
ROUTE = "/search"
#: Each kind's search options (those of ``bertfamily search --index``'s defaults).
OPTIONS: dict[str, dict[str, Any]] = {"binary": {"rescore": 40}}


@router.post(ROUTE)
async def search(
    body: SearchRequest, request: Request, state: ServeState = Depends(serving)
) -> list[list[dict]]:
    """Per query, its ``top_k`` hits best first: ``{"id", "score", "text"}`` (``text`` with
    ``return_documents``); with several indexes the fused score (`retrieval.fuse`, over each
    index's top `retrieval.hybrid.FUSION_DEPTH`).

    Raises:
        ServeError: 404 no index loaded, or an ``index`` name not loaded; 422 an empty
            ``query`` or ``index``, a name twice, indexes of different documents or of one
            retriever kind (`retrieval.hybrid.check_kinds`), ``fusion`` or ``weights`` with
            one index, weights that are all 0 or above `retrieval.fusion.MAX_WEIGHT`, an index
            of another model than the path's, weights that are not one finite number >= 0
            per index; 413 more queries than ``max_client_batch_size``; and the admission
            checks of the models that encode the queries.
    """
    queries = _queries(body.query, state)
    chosen = _chosen(request, state, body.index)
    try:
        if len(chosen) == 1 and {"fusion", "weights"} & body.model_fields_set:
            used = sorted({"fusion", "weights"} & body.model_fields_set)
            raise InputError(f"{' and '.join(used)}: not used when one index is searched")
        if len(chosen) > 1:
            check_kinds([s.index.kind for s in chosen])
        check_fusion(len(chosen), body.fusion, body.weights)
    except InputError as e:
        raise ServeError(422, str(e)) from None
    cache: dict[str, Any] = {}
    encoded = [await _encoded(s, queries, cache) for s in chosen]

    def run() -> list:
        depth = query_depth(len(chosen), body.top_k)
        lists = [
            search_encoded(s.index, q, depth, **OPTIONS.get(s.index.kind, {}))
            for s, q in zip(chosen, encoded)
        ]
        return fused_hits(chosen[0].index, lists, body.top_k, body.fusion, body.weights)

    try:
        results = await run_in_threadpool(run)
    except InputError as e:
        raise ServeError(422, str(e)) from None
    return [
        [
            {"id": h.id, "score": float(h.score)}
            | ({"text": h.text} if body.return_documents else {})
            for h in hits
        ]
        for hits in results
    ]


def _queries(query: str | list[str], state: ServeState) -> list[str]:
    """The body's queries as a list.

    Raises:
        ServeError: 422 none, or one that is empty or blank; 413 more than
            ``max_client_batch_size``.
    """
    queries = as_list(query)
    if not queries:
        raise ServeError(422, "query cannot be empty", "Empty")
    check_count(len(queries), state.settings.max_client_batch_size)
    for i, q in enumerate(queries):
        if not q.strip():
            raise ServeError(
                422, "query is empty" if isinstance(query, str) else f"query[{i}] is empty", "Empty"
            )
    return queries


def _chosen(
    request: Request, state: ServeState, index: str | list[str] | None
) -> list[ServedIndex]:
    """The indexes the body names (None: every one the request may search: under
    ``/models/{name}/`` those of that model and the bm25 ones), in its order.

    Raises:
        ServeError: as `search`.
    """
    loaded: dict[str, ServedIndex] = getattr(request.app.state, "indexes", {})
    if not loaded:
        raise ServeError(
            404, "this server holds no index: start it with --index DIR", "index_not_found"
        )
    prefixed = request.scope.get(MODEL_KEY) is not None
    usable = {
        n: s for n, s in loaded.items() if not prefixed or s.state is None or s.state is state
    }
    if index is None:
        if not usable:
            raise ServeError(
                404,
                f"the model {state.model_id!r} built none of this server's indexes "
                f"({', '.join(map(repr, loaded))})",
                "index_not_found",
            )
        chosen = list(usable.values())
    else:
        names = as_list(index)
        if not names:
            raise ServeError(
                422, "index cannot be empty: name one or more, or leave it out", "Empty"
            )
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ServeError(422, f"index names {', '.join(map(repr, twice))} more than once")
        unknown = [n for n in names if n not in loaded]
        if unknown:
            raise ServeError(
                404,
                f"no index named {unknown[0]!r}; this server has {', '.join(map(repr, loaded))}",
                "index_not_found",
            )
        other = next((n for n in names if n not in usable), None)
        if other is not None:
            raise ServeError(
                422,
                f"index {other!r} is searched with the model "
                f"{loaded[other].state.model_id!r}, not {state.model_id!r} of the path",
            )
        chosen = [loaded[n] for n in names]
    if len({s.corpus for s in chosen}) > 1:
        a, b = chosen[0], next(s for s in chosen if s.corpus != chosen[0].corpus)
        raise ServeError(
            422,
            f"indexes {a.name!r} and {b.name!r} do not hold the same documents in the same "
            "order: fuse indexes built from one corpus (name them in index)",
        )
    return chosen


async def _encoded(served: ServedIndex, queries: list[str], cache: dict[str, Any]) -> Any:
    """``queries`` as the index's model encodes them (`retrieval.hybrid.search_encoded`),
    through its adapter and the batcher (once per served model and request); a bm25
    index's: the texts."""
    state = served.state
    if state is None:
        return queries
    if state.model_id in cache:
        return cache[state.model_id]
    model = state.model
    if isinstance(model, EmbeddingModel):
        out, _ = await embed_texts(state, ROUTE, queries, None, True, None)
    else:
        if isinstance(model, SparseModel):
            tokens = await run_in_threadpool(model.tokenize, queries, None, None, "right")
            key: tuple = (model.encode,)
        else:  # ColBERT: encoded as queries
            tokens = await run_in_threadpool(model.tokenize_multivector, queries, None, True)
            key = (model.multivector, True)
        n = sum(tokens.lengths)
        out = await state.submit(split_rows(tokens), n, key)
        state.metrics.computed(ROUTE, len(queries), n)
    cache[state.model_id] = out
    return out
