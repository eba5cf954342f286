"""TEI's ``/predict``, for every model that predicts (`adapters.PredictingModel`): a
classifier (labels), an early-exit classifier (labels and ``exit_layer``), a token
classifier (entities) and a cross-encoder (a score per pair)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from ..adapters import PredictingModel, split_rows
from ..admission import predict_items
from ..state import ServeState, serving
from ..wire import PredictRequest

__all__ = ["router"]

router = APIRouter()


@router.post("/predict")
async def predict(body: PredictRequest, state: ServeState = Depends(serving)) -> list:
    """TEI's /predict, read as TEI reads it (its ``PredictInput``): a string is one text;
    a list of strings is ONE input, a text ``[a]`` or a pair ``[a, b]`` (more strings:
    422); a list of lists is a batch of texts ``[a]`` and pairs ``[a, b]``, mixed or not.
    → labels with scores, best first: one list for one input, one list per input for a
    batch. A reranker answers ``[{"label", "score"}]`` per pair (and refuses single
    texts); a token-classification model answers entities ``{"type", "text", "start",
    "end", "score"}`` (character offsets) per input instead (and refuses pairs). A
    self-distilled classifier adds ``exit_layer`` to each label and takes ``speed``. Each
    group is tokenized once, on a worker thread; its token rows go through the batcher."""
    model = state.need(PredictingModel)
    items, single = predict_items(body.inputs, state.settings)
    model.check_predict(items, body.speed)
    out: list = [None] * len(items)
    tokens = 0
    for n in (1, 2):  # the single texts, then the pairs: one model call each
        rows = [i for i, x in enumerate(items) if len(x) == n]
        if not rows:
            continue
        part, side = [items[i] for i in rows], body.truncation_direction
        encoded = await run_in_threadpool(model.tokenize, part, body.truncate, side)
        key = model.predict_key(n == 2, body.raw_scores, body.speed)
        results = await state.submit(split_rows(encoded), sum(encoded.lengths), key)
        for i, answer in zip(rows, model.predict_answers(results)):
            out[i] = answer
        tokens += sum(encoded.lengths)
    state.metrics.computed("/predict", len(items), tokens)
    return out[0] if single else out
