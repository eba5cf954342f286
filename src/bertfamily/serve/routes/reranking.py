"""The route of a cross-encoder (`adapters.RerankerModel`): TEI's ``/rerank`` (its
``/predict`` on pairs is `tasks`' route, answered by the same adapter)."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from ...errors import ServeError
from ..adapters import RerankerModel, split_rows
from ..state import ServeState, serving
from ..wire import RerankRequest

__all__ = ["router"]

router = APIRouter()


@router.post("/rerank")
async def rerank(body: RerankRequest, state: ServeState = Depends(serving)) -> list[dict]:
    """TEI's /rerank: ``{"index", "score"}`` (and ``"text"`` with ``return_text``) per text,
    best first; scores through the model's activation unless ``raw_scores``. The pairs are
    tokenized once, on a worker thread; their token rows go through the batcher."""
    model = state.need(RerankerModel)
    if not body.texts:
        raise ServeError(422, "texts cannot be empty", "Empty")
    if not body.query.strip():
        raise ServeError(422, "query is empty", "Empty")
    pairs = [[body.query, t] for t in body.texts]
    side = body.truncation_direction
    tokens = await run_in_threadpool(model.tokenize, pairs, body.truncate, side)
    n = sum(tokens.lengths)
    key = model.predict_key(True, body.raw_scores, None)
    scores = np.asarray(await state.submit(split_rows(tokens), n, key))
    state.metrics.computed("/rerank", len(pairs), n)
    order = np.argsort(-scores, kind="stable")
    return [
        {"index": int(i), "score": float(scores[i])}
        | ({"text": body.texts[i]} if body.return_text else {})
        for i in order
    ]
