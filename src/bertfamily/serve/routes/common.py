"""The routes every model answers: ``GET /health``, ``/info``, ``/metrics``; ``POST
/tokenize``, ``/decode`` (each also under ``/models/{name}/`` on a server of several)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from ..admission import as_list, check_ids, check_texts
from ..metrics import CONTENT_TYPE_LATEST, models_text
from ..state import MODEL_KEY, ServeState, serving
from ..wire import DecodeRequest, TokenizeRequest

__all__ = ["router", "version"]

router = APIRouter()


def version() -> str:
    """The installed bertfamily's version ("unknown" when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("bertfamily")
    except PackageNotFoundError:
        return "unknown"


@router.get("/health")
async def health() -> dict:
    """Liveness: 200 once the model is loaded."""
    return {"status": "ok"}


@router.get("/info")
async def info(state: ServeState = Depends(serving)) -> dict:
    """The model and the server's limits (TEI's /info fields, plus ``dimension`` and
    ``runtime``): the first model's, or the one of the path prefix ``/models/{name}/``; on a
    server of several models, ``models`` names them all."""
    model, settings = state.model, state.settings
    several = {"models": list(state.peers)} if len(state.peers) > 1 else {}
    return several | {
        "model_id": state.model_id,
        "model_sha": state.digest,
        "model_dtype": model.dtype,
        "runtime": model.runtime,  # ours: torch or openvino
        "model_type": model.model_type(),
        "dimension": model.dimension,
        "max_input_length": model.max_length,
        "max_batch_tokens": settings.max_batch_tokens,
        "batching": settings.batching,
        "max_client_batch_size": settings.max_client_batch_size,
        "max_input_chars": settings.max_input_chars,
        "auto_truncate": settings.auto_truncate,
        "version": version(),
    }


@router.get("/metrics")
async def prometheus(request: Request, state: ServeState = Depends(serving)) -> Response:
    """Prometheus text format: requests, tokens, inputs, batch sizes, latency. On a server
    of several models every series carries a ``model`` label (`metrics.models_text`); under
    ``/models/{name}/`` the series of that model alone, unlabelled."""
    if request.scope.get(MODEL_KEY) is not None:
        return Response(state.metrics.text(), media_type=CONTENT_TYPE_LATEST)
    text = models_text({name: s.metrics for name, s in state.peers.items()})
    return Response(text, media_type=CONTENT_TYPE_LATEST)


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, state: ServeState = Depends(serving)) -> list:
    """TEI's /tokenize: per input, its tokens ``{"id", "text", "special", "start", "stop"}``
    (character offsets into the input, prompt included; null for special tokens)."""
    prefix = state.model.prompt_text(body.prompt_name)
    texts = [prefix + t for t in as_list(body.inputs)]
    tokenizer = state.model.tokenizer

    def encode() -> dict:  # tokenizer work runs off the event loop
        check_texts(texts, state.settings)
        return tokenizer(
            texts,
            add_special_tokens=body.add_special_tokens,
            truncation=False,
            padding=False,
            return_tensors=None,
            return_offsets_mapping=True,
            return_special_tokens_mask=True,
        )

    enc = await run_in_threadpool(encode)
    rows = zip(texts, enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"])
    return [
        [
            {
                "id": i,
                "text": tok if sp else text[a:b],
                "special": bool(sp),
                "start": None if sp else a,
                "stop": None if sp else b,
            }
            for i, tok, (a, b), sp in zip(ids, tokenizer.convert_ids_to_tokens(ids), offs, special)
        ]
        for text, ids, offs, special in rows
    ]


@router.post("/decode")
async def decode(body: DecodeRequest, state: ServeState = Depends(serving)) -> list[str]:
    """TEI's /decode: the text of each id sequence."""
    tokenizer = state.model.tokenizer
    batch = check_ids(body.ids, tokenizer.vocab_size, state.settings.max_client_batch_size)
    return [tokenizer.decode(row, body.skip_special_tokens) for row in batch]
