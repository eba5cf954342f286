"""The routes of multi-vector models: ``/embed_multivector`` (a ColBERT model's token
matrices, `adapters.ColBERTModel`, or BGE-M3's multi-vectors) and ``/embed_m3`` (BGE-M3's
dense, sparse and multi-vector outputs from one pass, `adapters.M3Model`). Ours: TEI has
neither."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from ...errors import ServeError
from ..adapters import ColBERTModel, M3Model, split_rows
from ..admission import as_list
from ..state import ServeState, serving
from ..wire import M3Request, MultivectorRequest

__all__ = ["router"]

router = APIRouter()


@router.post("/embed_multivector")
async def embed_multivector(body: MultivectorRequest, state: ServeState = Depends(serving)):
    """Per input, its (T_i, D) token vectors: a ColBERT model's (as PyLate's
    ``ColBERT.encode(is_query=)``: queries with their marker and [MASK] expansion, documents
    without the skiplist's punctuation), or BGE-M3's multi-vectors (as FlagEmbedding's
    ``colbert_vecs``). Each request is tokenized once, on a worker thread; its rows go
    through the batcher.

    Raises:
        ServeError: 400 another kind of model; 422 ``truncation_direction`` Left for a
            ColBERT model (its inputs are cut on the right, as PyLate's); and the admission
            checks'.
    """
    texts = as_list(body.inputs)
    if isinstance(state.model, M3Model):
        rows = await _m3(state, "/embed_multivector", texts, body, ("colbert",))
        return [r["colbert"] for r in rows]
    model = state.need(ColBERTModel)
    if body.truncation_direction != "right":
        raise ServeError(422, "a ColBERT model cuts its inputs on the right (as PyLate)")
    if body.prompt_name is not None:
        raise ServeError(422, "a ColBERT model takes no prompt_name (its markers are its own)")
    encoded = await run_in_threadpool(
        model.tokenize_multivector, texts, body.truncate, body.is_query
    )
    tokens = sum(encoded.lengths)
    key = (model.multivector, body.is_query)
    matrices = await state.submit(split_rows(encoded), tokens, key)
    state.metrics.computed("/embed_multivector", len(texts), tokens)
    return [m.tolist() for m in matrices]


@router.post("/embed_m3")
async def embed_m3(body: M3Request, state: ServeState = Depends(serving)) -> list[dict]:
    """Per input, BGE-M3's ``{"dense": [H floats], "sparse": {"token id": weight},
    "colbert": [[D floats], ...]}`` (the asked-for ``outputs``) from one pass of the encoder,
    as FlagEmbedding's ``BGEM3FlagModel.encode`` (``dense_vecs``, ``lexical_weights``,
    ``colbert_vecs``).

    Raises:
        ServeError: 400 not a BGE-M3 model; 422 no ``outputs``, a ``prompt_name``; and the
            admission checks'.
    """
    if not body.outputs:
        raise ServeError(422, "outputs cannot be empty: some of dense, sparse, colbert")
    outputs = tuple(dict.fromkeys(body.outputs))
    return await _m3(state, "/embed_m3", as_list(body.inputs), body, outputs)


async def _m3(state: ServeState, route: str, texts: list[str], body, outputs) -> list[dict]:
    model = state.need(M3Model)
    if body.prompt_name is not None:
        raise ServeError(422, "a BGE-M3 model takes no prompt_name")
    encoded = await run_in_threadpool(
        model.tokenize_m3, texts, body.truncate, body.truncation_direction
    )
    tokens = sum(encoded.lengths)
    rows = await state.submit(split_rows(encoded), tokens, (model.outputs, outputs))
    state.metrics.computed(route, len(texts), tokens)
    return list(rows)
