"""The HTTP server of `bertfamily serve`: a FastAPI app over one model directory.

Routes and shapes follow Hugging Face's text-embeddings-inference (TEI) router
(``router/src/http/types.rs``; the bodies, every field, in `wire`): ``POST /embed`` (→
``[[float]]``), ``/embed_all`` (token vectors), ``/similarity``, the OpenAI-compatible ``POST
/v1/embeddings`` (→ ``{"object": "list", "data", "model", "usage"}``) for embedding models;
``/embed_sparse`` for SPLADE models; ``/rerank`` and ``/predict`` for cross-encoders;
``/predict`` for classification and token-classification directories; ``/tokenize`` and
``/decode`` for all; ``GET /health``, ``GET /info`` and ``GET /metrics`` (Prometheus text).
Unknown body fields are ignored, as TEI and OpenAI ignore them. Errors are TEI's JSON, ``{"error",
"error_type"}`` (``{"message", "code", "type"}`` on ``/v1/``): 413 for a request over a limit
(inputs per request, characters per input, tokens without ``truncate``), 422 for an empty or
malformed request, 401 for a missing or wrong API key (checked before anything is read).

Requests that arrive together run together (`batcher.DynamicBatcher`), up to
``max_batch_tokens``; each is answered with its own rows in its own order.
"""

from __future__ import annotations

import hmac
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request

from ..checkpoints.io import family_of, read_hf_config, task_of
from ..errors import InputError, QuantizationError, ServeError
from ..files import directory_digest
from ..heads.early_exit import STUDENTS_CONFIG
from ..pipelines.embedding.sentence_modules import directory_kind, read_sentence_modules
from ..resources.resolve import resolve_model
from .adapters import (
    ClassifierModel,
    EarlyExitModel,
    EmbeddingModel,
    RerankerModel,
    ServedModel,
    SparseModel,
    TaggerModel,
    adapter_for,
)
from .errors import error_response, install_error_handlers
from .http import BodyLimit
from .routes import ROUTERS
from .routes.common import version
from .settings import ServeSettings
from .state import ServeState

__all__ = ["ServeSettings", "ServeError", "create_app", "load_served_model", "served_kind"]

log = logging.getLogger(__name__)

#: Routes anyone may call without the API key (load balancers' liveness probes).
OPEN_ROUTES = ("/health",)


def served_kind(path: Path) -> tuple[type[ServedModel], Path, dict | None]:
    """The adapter of the model directory ``path`` (`sentence_modules.directory_kind`, then
    config.json's head), the directory its pipeline loads, and the parsed config.json when it
    was read: a cross-encoder → `RerankerModel`; SPLADE → `SparseModel`; a
    token-classification head → `TaggerModel`; a sequence-classification head →
    `ClassifierModel` (`EarlyExitModel` when the directory holds FastBERT students,
    ``early_exit.json``); anything else → `EmbeddingModel`.

    Raises:
        ModelDirectoryError, SentenceModulesError: as the readers.
    """
    kind = directory_kind(path)
    if kind == "cross-encoder":
        return RerankerModel, path, None
    if kind == "sparse":
        return SparseModel, path, None
    modules = read_sentence_modules(path)
    hf_config = read_hf_config(modules.model_dir)  # read once, handed to the loader
    task = task_of(family_of(hf_config), hf_config)
    if task == "tokens":
        return TaggerModel, Path(modules.model_dir), hf_config
    if task == "classify":
        early_exit = (Path(modules.model_dir) / STUDENTS_CONFIG).is_file()
        adapter = EarlyExitModel if early_exit else ClassifierModel
        return adapter, Path(modules.model_dir), hf_config
    return EmbeddingModel, path, hf_config


def load_served_model(
    model_dir: str | Path,
    dtype="auto",
    quantize: str | None = None,
    speed: float | None = None,
    device: str = "cpu",
    runtime: str = "torch",
):
    """The pipeline that serves ``model_dir``, loaded by the adapter of its kind
    (`served_kind`): a `Reranker`, `SparseEncoder`, `EntityTagger`, `TextClassifier`,
    `EarlyExitClassifier` (default ``speed`` 0 = the full model; a request's ``speed``
    overrides it) or `SentenceEmbedder` (sentence-transformers modules, or mean pooling).

    Args:
        model_dir: a local directory, a resource name or a cached ``org/name`` (resolved once).
        dtype: the parameter dtype of every kind ("auto" = fp32, "fp32", "bf16", "fastest" or
            a torch dtype; `inference.precision.resolve_dtype`); an early-exit classifier
            runs fp32 only.
        quantize: None or "int8" (the embedder's accuracy-checked int8, `SentenceEmbedder`;
            CPU only).
        device: where the model runs ("cpu", "cuda", "cuda:N").
        runtime: "torch", or "openvino" for an embedding model (`SentenceEmbedder`'s
            accuracy-checked OpenVINO graph; CPU only).

    Raises:
        ModelDirectoryError: and the loaders' other errors (CheckpointError,
            SentenceModulesError, ...).
        QuantizationError: int8 asked for a model other than an embedding one, or off the CPU;
            see `SentenceEmbedder`.
        InputError: the OpenVINO runtime asked for a model other than an embedding one; a
            dtype other than fp32 for an early-exit classifier.
    """
    path = resolve_model(model_dir)  # the one lookup; the loaders below get the directory
    adapter, directory, hf_config = served_kind(path)
    if runtime != "torch" and adapter is not EmbeddingModel:
        raise InputError(f"--runtime {runtime} is for embedding models; {adapter.refusal}")
    if quantize is not None and adapter is not EmbeddingModel:
        raise QuantizationError(f"--quantize int8 is for embedding models; {adapter.refusal}")
    if quantize is not None and device != "cpu":
        raise QuantizationError(f"--quantize int8 runs on the CPU, not on {device}")
    return adapter.load(
        directory, hf_config, dtype=dtype, device=device, quantize=quantize, runtime=runtime,
        speed=speed,
    )  # fmt: skip


def _guard(app: FastAPI, state: ServeState) -> None:
    """The API key (every route but `OPEN_ROUTES`, checked before the body is read) and the
    per-route request count and latency."""
    settings, metrics = state.settings, state.metrics
    known = {getattr(r, "path", None) for r in app.routes}  # FastAPI's own (/docs, ...)
    known |= {r.path for router in ROUTERS for r in router.routes}

    @app.middleware("http")
    async def auth_and_metrics(request: Request, call_next):
        route = request.url.path
        start = time.perf_counter()
        if settings.api_key is not None and route not in OPEN_ROUTES:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                token.strip().encode(), settings.api_key.encode()
            )
            if not ok:
                metrics.requests.labels(route, "401").inc()
                return error_response(request, 401, "missing or wrong API key", "Unauthorized")
        response = await call_next(request)
        label = route if route in known else "other"
        metrics.requests.labels(label, str(response.status_code)).inc()
        metrics.latency.labels(label).observe(time.perf_counter() - start)
        return response


def create_app(
    model, settings: ServeSettings | None = None, *, model_dir: str | Path | None = None
) -> FastAPI:
    """The FastAPI app serving ``model`` (a `SentenceEmbedder`, `Reranker`, `SparseEncoder`,
    `TextClassifier`, `EarlyExitClassifier` or `EntityTagger`; see `load_served_model`),
    through its adapter (`adapters.adapter_for`). The model worker starts and stops with the
    app's lifespan; on shutdown every request in flight is answered first.

    Args:
        model: the pipeline.
        settings: limits and options.
        model_dir: the directory it was loaded from (for /info's ``model_sha``, the digest of
            its files); default the pipeline's ``path``.

    Raises:
        ArgumentTypeError: ``model`` is none of these pipelines.
        InputError: no ``model_dir`` for a classifier.
    """
    settings = settings or ServeSettings()
    served = adapter_for(model, settings)
    if model_dir is None:
        if served.directory is None:
            raise InputError("give model_dir: the directory the classifier was loaded from")
        model_dir = served.directory
    model_dir = Path(model_dir)
    model_id = settings.model_id or model_dir.name
    state = ServeState(served, settings, model_id, model_dir, directory_digest(model_dir))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.batcher.start()
        log.info("serving %s (%s) with max_batch_tokens=%d", model_id, model_dir,
                 settings.max_batch_tokens)  # fmt: skip
        try:
            yield
        finally:
            await state.batcher.stop()

    app = FastAPI(title="bertfamily", version=version(), lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=settings.body_limit)
    app.state.serve = state
    app.state.model, app.state.settings, app.state.metrics = model, settings, state.metrics
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    _guard(app, state)
    return app
