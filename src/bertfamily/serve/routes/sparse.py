"""The route of a SPLADE model (`adapters.SparseModel`): TEI's ``/embed_sparse``."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from ..adapters import SparseModel, split_rows
from ..admission import as_list
from ..state import ServeState, serving
from ..wire import SparseRequest

__all__ = ["router"]

router = APIRouter()


@router.post("/embed_sparse")
async def embed_sparse(body: SparseRequest, state: ServeState = Depends(serving)) -> list:
    """TEI's /embed_sparse: the non-zero ``{"index", "value"}`` of each input's vector (the
    request tokenized once, on a worker thread; its token rows go through the batcher)."""
    model = state.need(SparseModel)
    model.prompt_text(body.prompt_name)  # an unknown prompt_name: 422 before any work
    texts, side = as_list(body.inputs), body.truncation_direction
    tokens = await run_in_threadpool(model.tokenize, texts, body.truncate, body.prompt_name, side)
    n = sum(tokens.lengths)
    rows = await state.submit(split_rows(tokens), n, (model.encode,))
    state.metrics.computed("/embed_sparse", len(texts), n)
    return [
        [{"index": i, "value": v} for i, v in zip(r.indices.tolist(), r.values.tolist())]
        for r in rows
    ]
