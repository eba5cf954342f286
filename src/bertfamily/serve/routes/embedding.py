"""The routes of an embedding model (`adapters.EmbeddingModel`): TEI's ``/embed``,
``/embed_all``, ``/similarity`` and OpenAI's ``/v1/embeddings``, ``/v1/models``."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from ...errors import ServeError
from ...pipelines.embedding.quantize import truncate_dimensions
from ..adapters import EmbeddingModel, split_rows
from ..admission import as_list, check_dimensions, token_inputs
from ..state import ServeState, serving
from ..wire import EmbedAllRequest, EmbedRequest, OpenAIEmbedRequest, SimilarityRequest

__all__ = ["embed_texts", "router"]

router = APIRouter()


async def embed_texts(
    state: ServeState,
    route: str,
    texts: list[str] | list[int] | list[list[int]],
    truncate: bool | None,
    normalize: bool,
    prompt_name: str | None,
    side: str = "right",
    dimensions: int | None = None,
    max_inputs: int | None = None,
) -> tuple[np.ndarray, int]:
    """(N, dimensions or the model's width) float32 vectors of ``texts`` (or token ids: one
    sequence or a batch, `admission.token_inputs`) and the tokens they took (prompt and
    special tokens included, after truncation). Every refusal comes before the model runs:
    the kind, ``dimensions``, the prompt, then the limits (``max_inputs``: the route's inputs
    per request, default ``max_client_batch_size``) as the request is tokenized, once, on a
    worker thread; its token rows go through the batcher, which runs a large request as
    several forward passes.

    Raises:
        ServeError: 400 not an embedding model; 413/422 as `admission`.
    """
    model = state.need(EmbeddingModel)
    check_dimensions(dimensions, model.dimension)
    model.prompt_text(prompt_name)  # an unknown prompt_name: 422 before any work
    if token_inputs(texts):
        encoded = await run_in_threadpool(model.tokenize_ids, texts, truncate, side, max_inputs)
    else:
        texts = as_list(texts)  # type: ignore[arg-type]
        encoded = await run_in_threadpool(
            model.tokenize, texts, truncate, prompt_name, side, max_inputs
        )
    tokens = sum(encoded.lengths)
    key = (model.embed, normalize, encoded.skip)
    vectors = await state.submit(split_rows(encoded), tokens, key)
    state.metrics.computed(route, len(encoded), tokens)
    return truncate_dimensions(np.asarray(vectors), dimensions, normalize), tokens


@router.post("/embed")
async def embed(body: EmbedRequest, state: ServeState = Depends(serving)) -> list[list[float]]:
    """TEI's /embed: one vector per input (a text, or a sequence of token ids), in input
    order (``dimensions``: the first coordinates, renormalised when ``normalize``)."""
    vectors, _ = await embed_texts(
        state, "/embed", body.inputs, body.truncate, body.normalize,
        body.prompt_name, body.truncation_direction, body.dimensions,
    )  # fmt: skip
    return vectors.tolist()


@router.post("/embed_all")
async def embed_all(
    body: EmbedAllRequest, state: ServeState = Depends(serving)
) -> list[list[list[float]]]:
    """TEI's /embed_all: every token's vector (special tokens included) per input."""
    model = state.need(EmbeddingModel)
    model.prompt_text(body.prompt_name)  # an unknown prompt_name: 422 before any work
    texts = as_list(body.inputs)
    encoded = await run_in_threadpool(
        model.tokenize, texts, body.truncate, body.prompt_name, body.truncation_direction
    )
    tokens = sum(encoded.lengths)
    rows = await state.submit(split_rows(encoded), tokens, (model.embed_tokens,))
    state.metrics.computed("/embed_all", len(texts), tokens)
    return [r.tolist() for r in rows]


@router.post("/similarity")
async def similarity(body: SimilarityRequest, state: ServeState = Depends(serving)) -> list:
    """TEI's /similarity: the cosine of ``source_sentence`` with each of ``sentences``."""
    texts = [body.inputs.source_sentence, *body.inputs.sentences]
    vectors, _ = await embed_texts(
        state, "/similarity", texts, body.truncate, True, body.prompt_name,
        body.truncation_direction,
    )  # fmt: skip
    return (vectors[1:] @ vectors[0]).astype(float).tolist()


@router.post("/v1/embeddings")
async def openai_embeddings(body: OpenAIEmbedRequest, state: ServeState = Depends(serving)):
    """OpenAI's embeddings API: texts or token ids, up to ``openai_max_inputs`` (2,048) per
    request; ``data`` in input order, ``usage`` the input tokens (prompt and special tokens
    included, after truncation); ``dimensions`` wider than the model is refused (422)
    before the model runs. On a server of several models, ``model`` chooses (404 for one
    it does not serve; `ServeState.for_model`)."""
    state = state.for_model(body.model)
    vectors, tokens = await embed_texts(
        state, "/v1/embeddings", body.input, None, True, None,
        dimensions=body.dimensions, max_inputs=state.settings.openai_limit,
    )  # fmt: skip
    data = []
    for i, v in enumerate(vectors):
        if body.encoding_format == "base64":  # little-endian float32 bytes, as OpenAI's
            emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode()
        else:
            emb = v.tolist()
        data.append({"object": "embedding", "embedding": emb, "index": i})
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": state.model_id, "usage": usage}


def _model_card(state: ServeState) -> dict:
    """OpenAI's model object of the served model."""
    created = int(state.model_dir.stat().st_mtime) if state.model_dir.exists() else 0
    return {"id": state.model_id, "object": "model", "created": created, "owned_by": "bertfamily"}


@router.get("/v1/models")
async def openai_models(state: ServeState = Depends(serving)) -> dict:
    """OpenAI's model list: every served model, the default first."""
    return {"object": "list", "data": [_model_card(s) for s in state.peers.values()]}


@router.get("/v1/models/{model_id:path}")
async def openai_model(model_id: str, state: ServeState = Depends(serving)) -> dict:
    """OpenAI's model object of ``model_id`` (404 unless the server serves it)."""
    if model_id not in state.peers:
        raise ServeError(404, f"the model {model_id!r} does not exist; this server has "
                         f"{', '.join(map(repr, state.peers))}", "model_not_found")  # fmt: skip
    return _model_card(state.peers[model_id])
