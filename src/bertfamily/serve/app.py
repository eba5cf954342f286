"""The HTTP server of `bertfamily serve`: a FastAPI app over one model directory.

Routes and shapes follow Hugging Face's text-embeddings-inference (TEI) router
(``router/src/http/types.rs``; the bodies, every field, in `wire`): ``POST /embed`` (→
``[[float]]``), ``/embed_all`` (token vectors), ``/similarity``, the OpenAI-compatible ``POST
/v1/embeddings`` (→ ``{"object": "list", "data", "model", "usage"}``) for embedding models;
``/embed_sparse`` for SPLADE models; ``/rerank`` and ``/predict`` for cross-encoders;
``/predict`` for classification and token-classification directories; ``/tokenize`` and
``/decode`` for all; TEI's root routes (``POST /`` and ``/invocations`` answer as the route of
the model's kind, `routes.root`); ``GET /health``, ``/``, ``/ping`` (liveness, no key),
``/info``, ``/v1/models`` and ``/metrics`` (Prometheus text, TEI's ``te_*`` names too); ours,
``POST /search`` over the persisted indexes given to `create_app` (`search`, `routes.search`).
Unknown body fields are ignored, as TEI and OpenAI ignore them. Errors take one shape per wire
(`http.error_body`): TEI's ``{"error", "error_type"}``, and OpenAI's ``{"error": {"message",
"type", "param", "code"}}`` on ``/v1/``: 413 for a request over a limit (inputs per request,
characters per input, tokens without ``truncate``), 422 for an empty or malformed request, 429
over ``max_concurrent_requests``, 401 for a missing or wrong API key (checked before anything
is read).

Requests that arrive together run together (`batcher.DynamicBatcher`), up to
``max_batch_tokens``; each is answered with its own rows in its own order.

Several models behind one server (`create_app` given a mapping of names to pipelines): each has
its own adapter, settings (limits), batcher and metrics (`state.ServeState`). The
OpenAI-style routes (``/v1/embeddings``, ``/v1/rerank``) choose by the body's ``model`` (404
for a name not served); every route also answers under ``/models/{name}/`` for that model
(`ModelPrefix`); the plain routes are the first model's. ``/v1/models`` lists them all and
``/metrics`` labels each series with its ``model``.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from ..checkpoints.io import family_of, read_hf_config, task_of
from ..errors import InputError, QuantizationError, ServeError
from ..files import directory_digest
from ..heads.early_exit import STUDENTS_CONFIG
from ..pipelines.embedding.bge_m3 import is_bge_m3
from ..pipelines.embedding.colbert import is_colbert_directory
from ..pipelines.embedding.sentence_modules import directory_kind, read_sentence_modules
from ..resources.resolve import resolve_model
from .adapters import (
    ClassifierModel,
    ColBERTModel,
    EarlyExitModel,
    EmbeddingModel,
    M3Model,
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
from .search import load_indexes
from .settings import ServeSettings
from .state import MODEL_KEY, SERVED_KEY, ServeState

__all__ = [
    "ModelPrefix",
    "ServeError",
    "ServeSettings",
    "create_app",
    "load_served_model",
    "served_kind",
]

log = logging.getLogger(__name__)

#: Routes anyone may GET without the API key (load balancers' liveness probes; TEI's
#: ``/`` and SageMaker's ``/ping`` too).
OPEN_ROUTES = ("/health", "/", "/ping")

#: The ASGI scope key that marks a path ``/models/{name}/`` of a model not served.
UNKNOWN_MODEL_KEY = "bertfamily.unknown_model"

#: The routes that compute: counted in TEI's series and held to ``max_concurrent_requests``.
INFERENCE_ROUTES = frozenset(
    ("/", "/invocations", "/embed", "/embed_all", "/embed_sparse", "/similarity",
     "/v1/embeddings", "/rerank", "/v1/rerank", "/v2/rerank", "/predict", "/embed_multivector",
     "/embed_m3", "/search")
)  # fmt: skip


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
    if is_colbert_directory(path):
        return ColBERTModel, path, None
    if is_bge_m3(path):
        return M3Model, path, None
    kind = directory_kind(path)
    if kind == "cross-encoder":
        return RerankerModel, path, None
    if kind == "sparse":
        return SparseModel, path, None
    modules = read_sentence_modules(path)
    if modules.static is not None:  # a static embedding table: no encoder config
        return EmbeddingModel, path, None
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
    pooling: str | None = None,
    adapter: str | Path | None = None,
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
        pooling: TEI's ``--pooling`` ("cls", "mean", "last-token") for an embedding model
            (`adapters.with_pooling`); None: the directory's.
        adapter: a PEFT LoRA adapter directory merged into an embedding model's encoder
            (`SentenceEmbedder`'s ``adapter``); None: none.

    Raises:
        ModelDirectoryError: and the loaders' other errors (CheckpointError,
            SentenceModulesError, ...).
        QuantizationError: int8 asked for a model other than an embedding one, or off the CPU;
            see `SentenceEmbedder`.
        InputError: the OpenVINO runtime or ``pooling`` asked for a model other than an
            embedding one; a dtype other than fp32 for an early-exit classifier.
    """
    path = resolve_model(model_dir)  # the one lookup; the loaders below get the directory
    lora = adapter  # below, "adapter" is the served kind's class (`adapters`)
    adapter, directory, hf_config = served_kind(path)
    if runtime != "torch" and adapter is not EmbeddingModel:
        raise InputError(f"--runtime {runtime} is for embedding models; {adapter.refusal}")
    if pooling is not None and adapter is not EmbeddingModel:
        raise InputError(f"--pooling is for embedding models; {adapter.refusal}")
    if lora is not None and adapter is not EmbeddingModel:
        raise InputError(f"--adapter (LoRA) is for embedding models; {adapter.refusal}")
    if quantize is not None and adapter is not EmbeddingModel:
        raise QuantizationError(f"--quantize int8 is for embedding models; {adapter.refusal}")
    if quantize is not None and device != "cpu":
        raise QuantizationError(f"--quantize int8 runs on the CPU, not on {device}")
    return adapter.load(
        directory, hf_config, dtype=dtype, device=device, quantize=quantize, runtime=runtime,
        speed=speed, pooling=pooling, **({} if lora is None else {"adapter": lora}),
    )  # fmt: skip


def _authorized(request: Request, api_key: str | None) -> bool:
    """Whether ``request`` may run: no key set, an open liveness route, or the right bearer
    token (compared in constant time)."""
    if api_key is None or (request.method == "GET" and request.url.path in OPEN_ROUTES):
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), api_key.encode()
    )


def _guard(app: FastAPI, state: ServeState, settings: ServeSettings) -> None:
    """The API key (every route but the GET of `OPEN_ROUTES`, checked before the body is
    read), the cap on requests in flight (`INFERENCE_ROUTES`: 429 beyond
    ``max_concurrent_requests``, counted over every model the server holds), the per-route
    request count and latency, and TEI's request series (in the metrics of the model that
    answered: the one the path prefix or the body's ``model`` chose, else the first).
    ``settings``: the server's (the key and the cap), not any one model's."""
    known = {getattr(r, "path", None) for r in app.routes}  # FastAPI's own (/docs, ...)
    known |= {r.path for router in ROUTERS for r in router.routes}
    in_flight = [0]

    def metrics_of(request: Request):
        name = (request.scope.get(SERVED_KEY) or [None])[0] or request.scope.get(MODEL_KEY)
        return state.peers[name].metrics if name in state.peers else state.metrics

    @app.middleware("http")
    async def auth_and_metrics(request: Request, call_next):
        request.scope[SERVED_KEY] = [None]  # `ServeState.for_model` names the model in it
        route = request.url.path
        start = time.perf_counter()
        if not _authorized(request, settings.api_key):
            label = route if route in known else "other"
            metrics_of(request).requests.labels(label, "401").inc()
            return error_response(request, 401, "missing or wrong API key", "Unauthorized")
        if request.scope.get(UNKNOWN_MODEL_KEY):
            metrics_of(request).requests.labels("other", "404").inc()
            served = ", ".join(map(repr, state.peers))
            message = f"no served model in the path {route!r}; this server has {served}"
            return error_response(request, 404, message, "model_not_found")
        inference = request.method == "POST" and route in INFERENCE_ROUTES
        if inference and in_flight[0] >= settings.max_concurrent_requests:
            metrics = metrics_of(request)
            metrics.requests.labels(route, "429").inc()
            metrics.request(route, 429, "Overloaded", 0.0)
            message = (
                f"model is overloaded: {in_flight[0]} requests in flight (max_concurrent_requests)"
            )
            return error_response(request, 429, message, "Overloaded")
        in_flight[0] += inference
        try:
            response = await call_next(request)
        finally:
            in_flight[0] -= inference
        label = route if route in known else "other"
        seconds = time.perf_counter() - start
        metrics = metrics_of(request)
        metrics.requests.labels(label, str(response.status_code)).inc()
        metrics.latency.labels(label).observe(seconds)
        if inference:
            kind = _ERROR_TYPES.get(response.status_code, "Validation")
            metrics.request(route, response.status_code, kind, seconds)
        return response


class ModelPrefix:
    """ASGI middleware: a request to ``/models/{name}/ROUTE`` is answered by ``ROUTE`` for the
    served model ``name`` (noted in the scope under `state.MODEL_KEY`, read by
    `state.serving`); a name the server does not serve is marked (`UNKNOWN_MODEL_KEY`) for
    the guard to answer 404 once the API key is checked. Names may hold ``/``
    (``org/name``): the longest served name that fits wins."""

    def __init__(self, app, names: list[str]) -> None:
        self.app = app
        self.names = sorted(names, key=len, reverse=True)

    async def __call__(self, scope, receive, send) -> None:  # noqa: D102
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/models/"):
            scope = dict(scope, **{UNKNOWN_MODEL_KEY: True})
            for name in self.names:
                prefix = f"/models/{name}"
                if path.startswith(prefix + "/"):
                    rest = path[len(prefix) :]
                    scope = dict(scope, path=rest, raw_path=rest.encode())
                    scope[MODEL_KEY], scope[UNKNOWN_MODEL_KEY] = name, False
                    break
        await self.app(scope, receive, send)


#: TEI's ``error_type`` of a failed request's status, for ``te_request_failure{err}``.
_ERROR_TYPES = {401: "Unauthorized", 413: "Validation", 422: "Validation", 429: "Overloaded",
                500: "Backend", 503: "Unhealthy"}  # fmt: skip


def create_app(
    model,
    settings: ServeSettings | None = None,
    *,
    model_dir: str | Path | None = None,
    indexes: Mapping[str, Any] | None = None,
) -> FastAPI:
    """The FastAPI app serving ``model`` (a `SentenceEmbedder`, `Reranker`, `SparseEncoder`,
    `TextClassifier`, `EarlyExitClassifier` or `EntityTagger`; see `load_served_model`),
    through its adapter (`adapters.adapter_for`); or several models, ``model`` a mapping of
    names to pipelines (or to ``(pipeline, model_dir)`` or ``(pipeline, model_dir,
    settings)``: per-model limits), the first the default (module docstring). Every model's
    worker starts and stops with the app's lifespan; on shutdown every request in flight is
    answered first.

    Args:
        model: the pipeline, or name → pipeline (see above).
        settings: limits and options (with several models: the server's — API key, body
            and connection limits, ``max_concurrent_requests`` over all models — and each
            model's unless it has its own; ``model_id`` is then the mapping's name).
        model_dir: the directory it was loaded from (for /info's ``model_sha``, the digest of
            its files); default the pipeline's ``path``. One model only.
        indexes: name → index directory (or opened `retrieval.Index`) that ``POST /search``
            searches, each bound to the served model that built it (`search.load_indexes`).

    Raises:
        ArgumentTypeError: ``model`` is none of these pipelines.
        InputError: no ``model_dir`` for a classifier; a ``default_prompt_name`` the model
            does not have; an empty mapping, an empty name, or ``model_dir`` with a mapping;
            an index no served model of its kind encodes.
        VectorIndexError: an index directory missing or unreadable, or built by none of the
            served models (`search.load_indexes`).
    """
    settings = settings or ServeSettings()
    if isinstance(model, Mapping):
        if model_dir is not None:
            raise InputError("give each model's directory in the mapping, not model_dir")
        if not model:
            raise InputError("give at least one model to serve")
        states = []
        for name, entry in model.items():
            if not isinstance(name, str) or not name.strip() or name != name.strip():
                raise InputError(f"a served model's name must be a non-empty word, got {name!r}")
            entry = entry if isinstance(entry, tuple) else (entry,)
            pipeline, directory, own = (*entry, None, None)[:3]
            own = replace(own or settings, model_id=name)
            states.append(_state(pipeline, own, directory))
    else:
        states = [_state(model, settings, model_dir)]
    state = states[0]
    peers = {s.model_id: s for s in states}
    for s in states:
        s.peers = peers
    searched = load_indexes(indexes or {}, peers)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for s in states:
            await s.batcher.start()
            log.info("serving %s (%s) with max_batch_tokens=%d", s.model_id, s.model_dir,
                     s.settings.max_batch_tokens)  # fmt: skip
        try:
            yield
        finally:
            for s in states:
                await s.batcher.stop()

    app = FastAPI(title="bertfamily", version=version(), lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=settings.body_limit)
    app.state.serve = state
    app.state.model, app.state.settings = state.model.pipeline, settings
    app.state.metrics = state.metrics
    app.state.indexes = searched
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    _guard(app, state, settings)
    app.add_middleware(ModelPrefix, names=list(peers))  # outermost: the rest see the route
    return app


def _state(model: Any, settings: ServeSettings, model_dir: str | Path | None) -> ServeState:
    """The `ServeState` of one served pipeline (`create_app`'s checks)."""
    served = adapter_for(model, settings)
    if settings.default_prompt_name is not None:
        prompts = getattr(model, "prompts", {})
        if settings.default_prompt_name not in prompts:
            raise InputError(
                f"default_prompt_name {settings.default_prompt_name!r} is not a prompt of this "
                f"model; it has {sorted(prompts)}"
            )
    if model_dir is None:
        if served.directory is None:
            raise InputError("give model_dir: the directory the classifier was loaded from")
        model_dir = served.directory
    model_dir = Path(model_dir)
    model_id = settings.model_id or model_dir.name
    return ServeState(served, settings, model_id, model_dir, directory_digest(model_dir))
