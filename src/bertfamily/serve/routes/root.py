"""TEI's root routes: ``POST /`` and ``POST /invocations`` (SageMaker's) answer as the route
of the served model's kind: an embedding model as ``/embed`` (or ``/similarity`` when
``inputs`` is ``{"source_sentence", "sentences"}``, the Hugging Face sentence-similarity
task's body), a cross-encoder as ``/rerank`` (a body with ``query``) or ``/predict``, a
SPLADE model as ``/embed_sparse``, a (token-)classification model as ``/predict``. ``GET /``
and ``GET /ping`` are liveness, as ``/health``."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from ...errors import ServeError
from ..adapters import EmbeddingModel, PredictingModel, RerankerModel, SparseModel
from ..state import ServeState, serving
from ..wire import EmbedRequest, PredictRequest, RerankRequest, SimilarityRequest, SparseRequest
from .embedding import embed, similarity
from .reranking import rerank
from .sparse import embed_sparse
from .tasks import predict

__all__ = ["router"]

router = APIRouter()


def _route_of(model, body: dict) -> tuple[type[BaseModel], object]:
    """The request body class and the handler of ``body`` for ``model``'s kind."""
    if isinstance(model, EmbeddingModel):
        if isinstance(body.get("inputs"), dict):
            return SimilarityRequest, similarity
        return EmbedRequest, embed
    if isinstance(model, SparseModel):
        return SparseRequest, embed_sparse
    if isinstance(model, RerankerModel) and "query" in body:
        return RerankRequest, rerank
    if isinstance(model, PredictingModel):
        return PredictRequest, predict
    raise ServeError(400, "POST / has no route for this model", "Validation")


async def _dispatch(request: Request, state: ServeState):
    try:
        body = json.loads(await request.body())
    except ValueError as e:  # not JSON (UnicodeDecodeError is a ValueError too)
        raise ServeError(422, f"invalid request: the body is not JSON ({e})") from None
    if not isinstance(body, dict):
        raise ServeError(422, "invalid request: the body must be a JSON object")
    wire, handler = _route_of(state.model, body)
    try:
        parsed = wire.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None
    return await handler(parsed, state)  # type: ignore[operator]


@router.post("/")
async def root(request: Request, state: ServeState = Depends(serving)):
    """TEI's ``POST /``: the route of the served model's kind (module docstring)."""
    return await _dispatch(request, state)


@router.post("/invocations")
async def invocations(request: Request, state: ServeState = Depends(serving)):
    """SageMaker's ``POST /invocations``: as ``POST /``."""
    return await _dispatch(request, state)


@router.get("/")
async def root_health() -> dict:
    """TEI's ``GET /`` (the Inference API's health route): liveness, as /health."""
    return {"status": "ok"}


@router.get("/ping")
async def ping() -> dict:
    """SageMaker's ``GET /ping``: liveness, as /health."""
    return {"status": "ok"}
