"""The routes of a cross-encoder (`adapters.RerankerModel`): TEI's ``/rerank``, and
``/v1/rerank`` in the wire of Jina's and Cohere's rerank APIs (also at Cohere's
``/v2/rerank``, where its current client posts); its ``/predict`` on pairs is `tasks`' route,
answered by the same adapter."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from ...errors import ServeError
from ..adapters import RerankerModel, split_rows
from ..admission import InputNames
from ..state import ServeState, serving
from ..wire import RerankRequest, V1RerankRequest

__all__ = ["router"]

router = APIRouter()


async def score_pairs(
    state: ServeState,
    route: str,
    query: str,
    texts: list[str],
    truncate: bool | None,
    side: str = "right",
    raw_scores: bool = False,
    max_inputs: int | None = None,
    field: str = "texts",
) -> tuple[np.ndarray, int]:
    """(N,) float32 scores of ``(query, text)`` pairs (through the model's activation unless
    ``raw_scores``) and the tokens they took. The pairs are tokenized once, on a worker
    thread (``max_inputs``: the route's inputs per request, default
    ``max_client_batch_size``); their token rows go through the batcher. Refusals name the
    query "query" and text i ``field[i]`` (the body's field: TEI's "texts", "documents").

    Raises:
        ServeError: 400 not a cross-encoder; 422 no texts or an empty query; 413/422 as
            `admission`.
    """
    model = state.need(RerankerModel)
    if not texts:
        raise ServeError(422, f"{field} cannot be empty", "Empty")
    if not query.strip():
        raise ServeError(422, "query is empty", "Empty")
    pairs = [[query, t] for t in texts]
    names = InputNames("query", field)
    tokens = await run_in_threadpool(model.tokenize, pairs, truncate, side, max_inputs, names)
    n = sum(tokens.lengths)
    key = model.predict_key(True, raw_scores, None)
    scores = np.asarray(await state.submit(split_rows(tokens), n, key))
    state.metrics.computed(route, len(pairs), n)
    return scores, n


@router.post("/rerank")
async def rerank(body: RerankRequest, state: ServeState = Depends(serving)) -> list[dict]:
    """TEI's /rerank: ``{"index", "score"}`` (and ``"text"`` with ``return_text``) per text,
    best first; scores through the model's activation unless ``raw_scores``."""
    scores, _ = await score_pairs(
        state, "/rerank", body.query, body.texts, body.truncate, body.truncation_direction,
        body.raw_scores,
    )  # fmt: skip
    order = np.argsort(-scores, kind="stable")
    return [
        {"index": int(i), "score": float(scores[i])}
        | ({"text": body.texts[i]} if body.return_text else {})
        for i in order
    ]


def _document_texts(documents: list[str | dict[str, Any]], field: str) -> list[str]:
    """The text scored of each document: a string itself, an object its ``field``.

    Raises:
        ServeError: 422 an object without a string ``field``.
    """
    texts = []
    for i, doc in enumerate(documents):
        text = doc if isinstance(doc, str) else doc.get(field)
        if not isinstance(text, str):
            raise ServeError(422, f"documents[{i}] has no string field {field!r} to rank")
        texts.append(text)
    return texts


@router.post("/v1/rerank")
@router.post("/v2/rerank")
async def v1_rerank(body: V1RerankRequest, state: ServeState = Depends(serving)) -> dict:
    """Jina's and Cohere's rerank API: ``{"id", "model", "results": [{"index",
    "relevance_score", "document"?}], "usage": {"total_tokens"}, "meta"}``, results best
    first (ties keep input order, as `Reranker.rank`), the best ``top_n``; each ``document``
    (with ``return_documents``, the default) as sent: an object as it came, a string as
    ``{"text"}``. Scores through the model's activation (sentence-transformers'
    ``CrossEncoder.rank``). Up to ``openai_max_inputs`` documents; the model is the body's
    ``model`` on a server of several (`ServeState.for_model`). Errors in OpenAI's shape.

    Raises:
        ServeError: 404 an unknown ``model``; 400 not a cross-encoder; 422 a model with
            several labels, a document without its text, ``rank_fields`` of more than one
            field; and `score_pairs`'.
    """
    state = state.for_model(body.model)
    model = state.need(RerankerModel)
    if model.pipeline.num_labels != 1:
        raise ServeError(
            422, f"{state.model_id} has {model.pipeline.num_labels} labels; rerank needs one"
        )
    if not body.documents:
        raise ServeError(422, "documents cannot be empty", "Empty")
    fields = body.rank_fields or ["text"]
    if len(fields) != 1:
        raise ServeError(422, f"rank_fields takes one field here, got {fields}")
    texts = _document_texts(body.documents, fields[0])
    route = "/v1/rerank"
    limit = state.settings.openai_limit
    scores, tokens = await score_pairs(
        state, route, body.query, texts, body.truncate, max_inputs=limit, field="documents"
    )
    order = np.argsort(-scores, kind="stable")[: body.top_n]
    results = []
    for i in order:
        result: dict[str, Any] = {"index": int(i), "relevance_score": float(scores[i])}
        if body.return_documents:
            doc = body.documents[i]
            result["document"] = {"text": doc} if isinstance(doc, str) else doc
        results.append(result)
    return {
        "id": str(uuid.uuid4()),
        "model": state.model_id,
        "results": results,
        "usage": {"total_tokens": tokens, "prompt_tokens": tokens},
        "meta": {"tokens": {"input_tokens": tokens, "output_tokens": 0}},
    }
