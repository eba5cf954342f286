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

import base64
import hmac
import logging
import time
from collections.abc import Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..checkpoints.io import family_of, read_hf_config, task_of
from ..errors import ArgumentTypeError, InputError, ServeError
from ..files import directory_digest
from ..heads.early_exit import STUDENTS_CONFIG
from ..pipelines.classify import TextClassifier
from ..pipelines.early_exit import EarlyExitClassifier
from ..pipelines.embed import SentenceEmbedder, TokenizedTexts
from ..pipelines.ner import EntityTagger
from ..pipelines.precision import QuantizationError
from ..pipelines.quantize import truncate_dimensions
from ..pipelines.rerank import Reranker
from ..pipelines.sentence_modules import directory_kind, read_sentence_modules
from ..pipelines.sparse import SparseEncoder
from ..resources.resolve import resolve_model
from .batcher import DynamicBatcher
from .http import BodyLimit, error_body
from .wire import (
    DecodeRequest,
    EmbedAllRequest,
    EmbedRequest,
    OpenAIEmbedRequest,
    PredictRequest,
    RerankRequest,
    SimilarityRequest,
    SparseRequest,
    TokenizeRequest,
)

__all__ = ["ServeSettings", "ServeError", "create_app", "load_served_model"]

log = logging.getLogger(__name__)


def _version() -> str:
    """The installed bertfamily's version ("unknown" when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertfamily")
    except PackageNotFoundError:
        return "unknown"


#: Routes anyone may call without the API key (load balancers' liveness probes).
OPEN_ROUTES = ("/health",)


@dataclass(frozen=True)
class ServeSettings:
    """The server's limits and options (TEI's flag names where TEI has one).

    Attributes:
        max_batch_tokens: token budget of one gathered round of requests (and of each forward
            pass).
        batch_size: most sequences in one forward pass: a gathered round runs as length-sorted
            forward passes of at most this many sequences (large passes are slower per token on
            a CPU, whose caches they overflow).
        batching: False answers every request alone (no dynamic batching).
        max_client_batch_size: most inputs one request may hold (413 beyond).
        max_input_chars: most characters one input may hold (413 beyond).
        auto_truncate: the ``truncate`` of requests that do not say (TEI ``--auto-truncate``).
        api_key: when set, every route but /health needs ``Authorization: Bearer <key>``.
        model_id: the model's name in /info and /v1/embeddings (default: the directory name).
        max_body_bytes: the largest request body (413 beyond, from ``Content-Length`` before
            anything is read, and while a chunked body streams in); None: room for
            ``max_client_batch_size`` inputs of ``max_input_chars`` characters written as JSON
            ``\\uXXXX`` escapes, plus 64 KiB.
        timeout_keep_alive: seconds an idle connection (one that sends no request, or no
            complete header) is kept open (uvicorn's ``timeout_keep_alive``).
    """

    max_batch_tokens: int = 16384
    batch_size: int = 32
    batching: bool = True
    max_client_batch_size: int = 32
    max_input_chars: int = 100_000
    auto_truncate: bool = False
    api_key: str | None = None
    model_id: str | None = None
    max_body_bytes: int | None = None
    timeout_keep_alive: float = 5.0

    @property
    def body_limit(self) -> int:
        """The largest request body, in bytes."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return self.max_client_batch_size * self.max_input_chars * 6 + 65536

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "batch_size", "max_client_batch_size", "max_input_chars"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_body_bytes is not None and self.max_body_bytes < 1:
            raise InputError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        if self.timeout_keep_alive <= 0:
            raise InputError(f"timeout_keep_alive must be > 0, got {self.timeout_keep_alive}")
        if self.api_key is not None and not self.api_key.strip():
            raise InputError("api_key must not be empty")


def load_served_model(
    model_dir: str | Path,
    dtype="auto",
    quantize: str | None = None,
    speed: float | None = None,
    device: str = "cpu",
    runtime: str = "torch",
):
    """The pipeline that serves ``model_dir``: a `Reranker` for a cross-encoder directory
    (`sentence_modules.directory_kind`), a `SparseEncoder` for a SPLADE one, an `EntityTagger`
    for a token-classification directory, a `TextClassifier` for a sequence-classification
    one (an `EarlyExitClassifier` when it holds FastBERT students, ``early_exit.json``: default
    ``speed`` 0 = the full model, a request's ``speed`` overrides it), else a
    `SentenceEmbedder` (sentence-transformers modules, or mean pooling).

    Args:
        model_dir: a local directory, a resource name or a cached ``org/name`` (resolved once).
        dtype: the embedder's parameter dtype ("auto", "fp32", "bf16" or a torch dtype; see
            `SentenceEmbedder`); the classifiers run in float32.
        quantize: None or "int8" (the embedder's accuracy-checked int8, `SentenceEmbedder`;
            CPU only).
        device: where the model runs ("cpu", "cuda", "cuda:N").
        runtime: "torch", or "openvino" for an embedding model (`SentenceEmbedder`'s
            accuracy-checked OpenVINO graph; CPU only).

    Raises:
        ModelDirectoryError: and the loaders' other errors (CheckpointError,
            SentenceModulesError, ...).
        QuantizationError: int8 asked for a classification model, or see `SentenceEmbedder`.
        InputError: the OpenVINO runtime asked for a model other than an embedding one.
    """
    path = resolve_model(model_dir)  # the one lookup; the loaders below get the directory
    kind = directory_kind(path)
    if runtime != "torch" and kind != "embedding":
        raise InputError(f"--runtime {runtime} is for embedding models; this is a {kind}")
    if kind != "embedding" and quantize is not None:
        raise QuantizationError(f"--quantize int8 is for embedding models; this is a {kind}")
    if quantize is not None and device != "cpu":
        raise QuantizationError(f"--quantize int8 runs on the CPU, not on {device}")
    if kind == "cross-encoder":
        return Reranker(path, device=device)
    if kind == "sparse":
        return SparseEncoder(path, device=device)
    modules = read_sentence_modules(path)
    hf_config = read_hf_config(modules.model_dir)  # read once, handed to the embedder
    task = task_of(family_of(hf_config), hf_config)
    if quantize is not None and task in ("tokens", "classify"):
        raise QuantizationError("--quantize int8 is for embedding models; this one classifies")
    if runtime != "torch" and task in ("tokens", "classify"):
        raise InputError(f"--runtime {runtime} is for embedding models; this one classifies")
    if task == "tokens":
        return EntityTagger(modules.model_dir, device=device)
    if task == "classify":
        if (Path(modules.model_dir) / STUDENTS_CONFIG).is_file():  # self-distilled: early exit
            return EarlyExitClassifier(
                modules.model_dir, speed=0.0 if speed is None else speed, device=device
            )
        return TextClassifier(modules.model_dir, device=device)
    if quantize is not None and runtime == "torch":
        return SentenceEmbedder(path, dtype="fp32", quantize=quantize, config_json=hf_config)
    return SentenceEmbedder(
        path,
        dtype=dtype,
        config_json=hf_config,
        device=device,
        runtime=runtime,
        quantize=quantize,
    )


class _Metrics:
    """The Prometheus series of one app (its own registry: two apps in one process never
    share counts)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "bertfamily_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=r,
        )
        self.tokens = Counter(
            "bertfamily_tokens", "Input tokens computed (after truncation)", ["route"], registry=r
        )
        self.inputs = Counter("bertfamily_inputs", "Inputs computed", ["route"], registry=r)
        buckets = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        self.batch_inputs = Histogram(
            "bertfamily_batch_inputs", "Inputs per model call", buckets=buckets, registry=r
        )
        self.batch_requests = Histogram(
            "bertfamily_batch_requests", "Requests per model call", buckets=buckets, registry=r
        )
        self.latency = Histogram(
            "bertfamily_request_duration_seconds",
            "Request latency",
            ["route"],
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )

    def on_round(self, requests: int, inputs: int) -> None:
        self.batch_requests.observe(requests)
        self.batch_inputs.observe(inputs)


def _error(request: Request, status: int, message: str, error_type: str) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, status, message, error_type), status)


def create_app(
    model, settings: ServeSettings | None = None, *, model_dir: str | Path | None = None
) -> FastAPI:
    """The FastAPI app serving ``model`` (a `SentenceEmbedder`, `Reranker`, `SparseEncoder`,
    `TextClassifier` or `EntityTagger`; see `load_served_model`). The model worker starts
    and stops with the app's lifespan; on shutdown every request in flight is answered first.

    Args:
        model: the pipeline.
        settings: limits and options.
        model_dir: the directory it was loaded from (for /info's ``model_sha``, the digest of
            its files); default the embedder's ``path``.

    Raises:
        TypeError: ``model`` is none of these pipelines.
        ValueError: no ``model_dir`` for a classifier.
    """
    settings = settings or ServeSettings()
    served = (SentenceEmbedder, Reranker, SparseEncoder, TextClassifier, EntityTagger)
    if not isinstance(model, served):
        raise ArgumentTypeError(f"cannot serve a {type(model).__name__}")
    embedding = isinstance(model, SentenceEmbedder)
    reranker = isinstance(model, Reranker)
    sparse = isinstance(model, SparseEncoder)
    if model_dir is None:
        if not (embedding or reranker or sparse):
            raise InputError("give model_dir: the directory the classifier was loaded from")
        model_dir = model.path
    model_dir = Path(model_dir)
    model_id = settings.model_id or model_dir.name
    max_length = model.max_length  # every pipeline's limit comes from its model
    metrics = _Metrics()

    def run(key, inputs: list) -> Sequence[Any]:
        """The model call of one group (on the worker thread)."""
        kind = key[0]
        sizes = dict(batch_size=settings.batch_size, max_batch_tokens=settings.max_batch_tokens)
        if kind == "embed":  # token rows from `tokenize_once`
            _, normalize, skip = key
            rows = {k: [item[k] for item in inputs] for k in inputs[0]}
            encoded = TokenizedTexts(rows, [False] * len(inputs), skip)
            return model.encode_tokenized(encoded, normalize=normalize, **sizes)
        if kind == "embed_all":
            _, prompt_name, side = key
            return model.encode_tokens(
                inputs,
                prompt_name=prompt_name,
                truncation_side=side,
                batch_size=sizes["batch_size"],
            )
        if kind == "sparse":
            _, prompt_name, side = key
            return model.encode(inputs, prompt_name=prompt_name, truncation_side=side, **sizes)
        if kind == "rerank":
            _, raw, side = key
            return model.predict(inputs, raw_scores=raw, truncation_side=side, **sizes)
        if kind == "classify":
            _, raw, pairs, speed = key
            texts = [x[0] for x in inputs]
            second = [x[1] for x in inputs] if pairs else None
            fn = "none" if raw else "default"
            extra = {"speed": speed} if speed is not None else {}
            return model(texts, second, top_k=None, function_to_apply=fn, batch_size=32, **extra)
        return [[asdict(e) for e in row] for row in model(inputs, batch_size=32)]

    batcher = DynamicBatcher(
        run, settings.max_batch_tokens, batching=settings.batching, on_round=metrics.on_round
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        log.info(
            "serving %s (%s) with max_batch_tokens=%d",
            model_id,
            model_dir,
            settings.max_batch_tokens,
        )
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="bertfamily", version=_version(), lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=settings.body_limit)
    app.state.model = model
    app.state.settings = settings
    app.state.metrics = metrics

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, e: ServeError) -> JSONResponse:
        return _error(request, e.status, str(e), e.error_type)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body it cannot parse: deep nesting, bad bytes) in the
        # documented shape
        status = 422 if e.status_code == 400 else e.status_code
        return _error(request, status, f"invalid request: {e.detail}", "Validation")

    @app.exception_handler(RecursionError)
    async def _too_deep(request: Request, e: RecursionError) -> JSONResponse:
        return _error(request, 400, "request body nests too deeply", "Validation")

    @app.exception_handler(UnicodeError)
    async def _bad_text(request: Request, e: UnicodeError) -> JSONResponse:
        return _error(
            request, 400, f"request body is not valid UTF-8 text ({e.reason})", "Validation"
        )

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, e: RequestValidationError) -> JSONResponse:
        parts = []
        for item in e.errors()[:3]:
            where = ".".join(str(x) for x in item.get("loc", ()) if x != "body")
            parts.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
        return _error(request, 422, "invalid request: " + "; ".join(parts), "Validation")

    @app.middleware("http")
    async def _auth_and_metrics(request: Request, call_next):
        route = request.url.path
        start = time.perf_counter()
        if settings.api_key is not None and route not in OPEN_ROUTES:
            given = request.headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                token.strip().encode(), settings.api_key.encode()
            )
            if not ok:
                response = _error(request, 401, "missing or wrong API key", "Unauthorized")
                metrics.requests.labels(route, "401").inc()
                return response
        response = await call_next(request)
        known = route in {r.path for r in app.routes}
        label = route if known else "other"
        metrics.requests.labels(label, str(response.status_code)).inc()
        metrics.latency.labels(label).observe(time.perf_counter() - start)
        return response

    def check_texts(
        texts: list[str],
        truncate: bool | None,
        pairs: list[str] | None = None,
        prefix: str = "",
        count: bool = True,
    ) -> list[int]:
        """Refuse what is over a limit; the token count of each text (or pair) after
        truncation, ``prefix`` (the prompt) included (``count=False``: the character checks
        only, for a route that tokenizes once itself)."""
        if not texts:
            raise ServeError(422, "inputs cannot be empty", "Empty")
        if len(texts) > settings.max_client_batch_size:
            raise ServeError(
                413,
                f"{len(texts)} inputs in one request; the maximum is "
                f"{settings.max_client_batch_size} (max_client_batch_size)",
            )
        for i, t in enumerate(texts):
            second = pairs[i] if pairs is not None else ""
            try:
                t.encode("utf-8")
                second.encode("utf-8")
            except UnicodeEncodeError:
                raise ServeError(
                    422, f"input {i} is not valid Unicode (a lone surrogate escape)", "Validation"
                ) from None
            if not t.strip() or (pairs is not None and not second.strip()):
                raise ServeError(422, f"input {i} is empty", "Empty")
            chars = len(t) + len(second)
            if chars > settings.max_input_chars:
                raise ServeError(
                    413,
                    f"input {i} has {chars:,} characters; the maximum is "
                    f"{settings.max_input_chars:,} (max_input_chars)",
                )
        if not count:
            return []
        firsts = [prefix + t for t in texts]
        enc = model.tokenizer(firsts, pairs, truncation=False, padding=False, return_tensors=None)
        counts = [len(ids) for ids in enc["input_ids"]]
        if not (settings.auto_truncate if truncate is None else truncate):
            for i, n in enumerate(counts):
                if n > max_length:
                    raise ServeError(
                        413,
                        f"input {i} has {n} tokens; this model takes at most {max_length} "
                        'tokens (send "truncate": true to cut it)',
                    )
        return [min(n, max_length) for n in counts]

    async def submit(inputs: list, tokens: int, key) -> Sequence[Any]:
        """The batcher's answer; a request the model refuses (ValueError: a token id outside
        the vocabulary, non-finite output, ...) fails alone with 422 (the batcher reruns the
        others of its group without it)."""
        try:
            return await batcher.submit(inputs, tokens, key)
        except ValueError as e:
            detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ServeError(422, f"the model cannot run this request: {detail}") from None

    def need(kind: str) -> None:
        what = (
            "an embedding model: use /embed"
            if embedding
            else "a reranker: use /rerank or /predict"
            if reranker
            else "a sparse model: use /embed_sparse"
            if sparse
            else "a classifier: use /predict"
        )
        ok = {
            "embed": embedding,
            "predict": not (embedding or sparse),
            "rerank": reranker,
            "sparse": sparse,
        }
        if not ok[kind]:
            raise ServeError(400, f"{model_id} is {what}", "Validation")

    def prompt_text(prompt_name: str | None) -> str:
        """The prompt prepended to each input (named, or the model's default): it counts
        toward the token limit and ``usage``."""
        prompts = getattr(model, "prompts", {})
        if prompt_name is not None and prompt_name not in prompts:
            raise ServeError(
                422, f"unknown prompt_name {prompt_name!r}; this model has {sorted(prompts)}"
            )
        name = (
            prompt_name if prompt_name is not None else getattr(model, "default_prompt_name", None)
        )
        return prompts.get(name, "") if name is not None else ""

    def as_list(inputs: str | list[str]) -> list[str]:
        return [inputs] if isinstance(inputs, str) else inputs

    async def compute(route: str, texts: list[str], key: tuple, truncate, prompt_name=None):
        prefix = prompt_text(prompt_name)
        # tokenizing runs off the event loop: /health and admission stay responsive
        counts = await run_in_threadpool(check_texts, texts, truncate, None, prefix)
        tokens = sum(counts)
        out = await submit(texts, tokens, key)
        metrics.tokens.labels(route).inc(tokens)
        metrics.inputs.labels(route).inc(len(texts))
        return out, tokens

    def tokenize_once(texts, truncate, prompt_name, side) -> TokenizedTexts:
        """The one tokenization of an embedding request (on a worker thread): limits checked,
        the prompt prepended, cut to the model's limit (or refused when ``truncate`` is off)."""
        check_texts(texts, truncate, count=False)
        encoded = model.tokenize(texts, prompt_name=prompt_name, truncation_side=side)
        if not (settings.auto_truncate if truncate is None else truncate):
            over = next((i for i, cut in enumerate(encoded.truncated) if cut), None)
            if over is not None:  # the refusal says how long it is (the one extra tokenization)
                text = prompt_text(prompt_name) + texts[over]
                n = len(model.tokenizer([text], truncation=False, padding=False)["input_ids"][0])
                raise ServeError(
                    413,
                    f"input {over} has {n} tokens; this model takes at most {max_length} tokens "
                    '(send "truncate": true to cut it)',
                )
        return encoded

    async def embed_texts(route, texts, truncate, normalize, prompt_name, side="right", dims=None):
        need("embed")
        prompt_text(prompt_name)  # an unknown prompt_name: 422 before any work
        encoded = await run_in_threadpool(tokenize_once, texts, truncate, prompt_name, side)
        ids = encoded.rows["input_ids"]
        tokens = sum(len(r) for r in ids)
        # the batcher carries the token rows: the model never tokenizes this request again
        items = [{k: v[i] for k, v in encoded.rows.items()} for i in range(len(ids))]
        vectors = await submit(items, tokens, ("embed", normalize, encoded.skip))
        metrics.tokens.labels(route).inc(tokens)
        metrics.inputs.labels(route).inc(len(texts))
        try:
            vectors = truncate_dimensions(np.asarray(vectors), dims, normalize)
        except InputError as e:
            raise ServeError(422, str(e), "Validation") from None
        return vectors, tokens

    @app.get("/health")
    async def health() -> dict:
        """Liveness: 200 once the model is loaded."""
        return {"status": "ok"}

    @app.get("/info")
    async def info() -> dict:
        """The model and the server's limits (TEI's /info fields, plus ``dimension``)."""
        if embedding:
            pooling = (
                model.pooling.mode
                if isinstance(model.pooling.mode, str)
                else list(model.pooling.mode)
            )
            model_type: dict = {"embedding": {"pooling": pooling, "dimension": model.dimension}}
        elif sparse:
            model_type = {"embedding": {"pooling": "splade", "dimension": model.dimension}}
        else:
            names = list(model.labels)
            kind = (
                "reranker"
                if reranker
                else "classifier"
                if isinstance(model, TextClassifier)
                else "token_classifier"
            )
            model_type = {
                kind: {
                    "id2label": dict(enumerate(names)),
                    "label2id": {n: i for i, n in enumerate(names)},
                }
            }
        if getattr(model, "int8_plan", None) is not None:
            dtype = "int8"  # torch's dynamic int8 of the plan, `SentenceEmbedder(quantize="int8")`
        elif getattr(model, "runtime", "torch") == "openvino":  # no torch parameters
            dtype = {"f32": "float32", "bf16": "bfloat16"}.get(
                model.model.precision, model.model.precision
            )
            if getattr(model.model, "quantized", None):  # NNCF int8, the rest in `dtype`
                dtype = f"int8+{dtype}"
        else:
            dtype = str(next(model.model.parameters()).dtype).removeprefix("torch.")
        return {
            "model_id": model_id,
            "model_sha": app.state.digest,
            "model_dtype": dtype,
            "runtime": getattr(model, "runtime", "torch"),  # ours: torch or openvino
            "model_type": model_type,
            "dimension": model.dimension if embedding or sparse else None,
            "max_input_length": max_length,
            "max_batch_tokens": settings.max_batch_tokens,
            "batching": settings.batching,
            "max_client_batch_size": settings.max_client_batch_size,
            "max_input_chars": settings.max_input_chars,
            "auto_truncate": settings.auto_truncate,
            "version": _version(),
        }

    @app.get("/metrics")
    async def prometheus() -> Response:
        """Prometheus text format: requests, tokens, inputs, batch sizes, latency."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/embed")
    async def embed(body: EmbedRequest) -> list[list[float]]:
        """TEI's /embed: one vector per input, in input order (``dimensions``: the first
        coordinates, renormalised when ``normalize``)."""
        vectors, _ = await embed_texts(
            "/embed",
            as_list(body.inputs),
            body.truncate,
            body.normalize,
            body.prompt_name,
            body.truncation_direction,
            body.dimensions,
        )
        return vectors.tolist()

    @app.post("/embed_all")
    async def embed_all(body: EmbedAllRequest) -> list[list[list[float]]]:
        """TEI's /embed_all: every token's vector (special tokens included) per input."""
        need("embed")
        key = ("embed_all", body.prompt_name, body.truncation_direction)
        rows, _ = await compute(
            "/embed_all", as_list(body.inputs), key, body.truncate, body.prompt_name
        )
        return [r.tolist() for r in rows]

    @app.post("/similarity")
    async def similarity(body: SimilarityRequest) -> list[float]:
        """TEI's /similarity: the cosine of ``source_sentence`` with each of ``sentences``."""
        texts = [body.inputs.source_sentence, *body.inputs.sentences]
        vectors, _ = await embed_texts(
            "/similarity", texts, body.truncate, True, body.prompt_name, body.truncation_direction
        )
        return (vectors[1:] @ vectors[0]).astype(float).tolist()

    @app.post("/embed_sparse")
    async def embed_sparse(body: SparseRequest) -> list[list[dict]]:
        """TEI's /embed_sparse: the non-zero ``{"index", "value"}`` of each input's vector."""
        need("sparse")
        key = ("sparse", body.prompt_name, body.truncation_direction)
        rows, _ = await compute(
            "/embed_sparse", as_list(body.inputs), key, body.truncate, body.prompt_name
        )
        return [
            [{"index": i, "value": v} for i, v in zip(r.indices.tolist(), r.values.tolist())]
            for r in rows
        ]

    @app.post("/v1/embeddings")
    async def openai_embeddings(body: OpenAIEmbedRequest) -> dict:
        """OpenAI's embeddings API (as TEI serves it): ``data`` in input order, ``usage`` the
        input tokens (prompt and special tokens included, after truncation)."""
        texts = as_list(body.input)
        vectors, tokens = await embed_texts(
            "/v1/embeddings", texts, None, True, None, dims=body.dimensions
        )
        data = []
        for i, v in enumerate(vectors):
            if body.encoding_format == "base64":  # little-endian float32 bytes, as OpenAI's
                emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode()
            else:
                emb = v.tolist()
            data.append({"object": "embedding", "embedding": emb, "index": i})
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return {"object": "list", "data": data, "model": model_id, "usage": usage}

    @app.post("/rerank")
    async def rerank(body: RerankRequest) -> list[dict]:
        """TEI's /rerank: ``{"index", "score"}`` (and ``"text"`` with ``return_text``) per text,
        best first; scores through the model's activation unless ``raw_scores``."""
        need("rerank")
        if not body.texts:
            raise ServeError(422, "texts cannot be empty", "Empty")
        if not body.query.strip():
            raise ServeError(422, "query is empty", "Empty")
        pairs = [(body.query, t) for t in body.texts]
        counts = await run_in_threadpool(
            check_texts, [body.query] * len(pairs), body.truncate, list(body.texts)
        )
        tokens = sum(counts)
        key = ("rerank", body.raw_scores, body.truncation_direction)
        scores = np.asarray(await submit(pairs, tokens, key))
        metrics.tokens.labels("/rerank").inc(tokens)
        metrics.inputs.labels("/rerank").inc(len(pairs))
        order = np.argsort(-scores, kind="stable")
        return [
            {"index": int(i), "score": float(scores[i])}
            | ({"text": body.texts[i]} if body.return_text else {})
            for i in order
        ]

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> list[list[dict]]:
        """TEI's /tokenize: per input, its tokens ``{"id", "text", "special", "start",
        "stop"}`` (character offsets into the input, null for special tokens)."""
        prefix = prompt_text(body.prompt_name)
        texts = [prefix + t for t in as_list(body.inputs)]

        def encode() -> dict:  # tokenizer work runs off the event loop
            check_texts(texts, True)
            return model.tokenizer(
                texts,
                add_special_tokens=body.add_special_tokens,
                truncation=False,
                padding=False,
                return_tensors=None,
                return_offsets_mapping=True,
                return_special_tokens_mask=True,
            )

        enc = await run_in_threadpool(encode)
        out = []
        for text, ids, offsets, special in zip(
            texts, enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"]
        ):
            tokens = model.tokenizer.convert_ids_to_tokens(ids)
            out.append(
                [
                    {
                        "id": i,
                        "text": tok if sp else text[a:b],
                        "special": bool(sp),
                        "start": None if sp else a,
                        "stop": None if sp else b,
                    }
                    for i, tok, (a, b), sp in zip(ids, tokens, offsets, special)
                ]
            )
        return out

    @app.post("/decode")
    async def decode(body: DecodeRequest) -> list[str]:
        """TEI's /decode: the text of each id sequence."""
        batch = body.ids if body.ids and isinstance(body.ids[0], list) else [body.ids]
        if not batch or not batch[0]:
            raise ServeError(422, "ids cannot be empty", "Empty")
        vocab = model.tokenizer.vocab_size
        if any(not 0 <= i < vocab for row in batch for i in row):
            raise ServeError(422, f"ids must be in [0, {vocab})", "Validation")
        return [model.tokenizer.decode(row, body.skip_special_tokens) for row in batch]

    @app.post("/predict")
    async def predict(body: PredictRequest) -> list:
        """TEI's /predict, read as TEI reads it (its ``PredictInput``): a string is one text;
        a list of strings is ONE input, a text ``[a]`` or a pair ``[a, b]`` (more strings:
        422); a list of lists is a batch of texts ``[a]`` and pairs ``[a, b]``, mixed or not.
        → labels with scores, best first: one list for one input, one list per input for a
        batch. A reranker answers ``[{"label", "score"}]`` per pair (and refuses single
        texts); a token-classification model answers entities ``{"type", "text", "start",
        "end", "score"}`` (character offsets) per input instead (and refuses pairs). A
        self-distilled classifier adds ``exit_layer`` to each label and takes ``speed``."""
        need("predict")
        raw = body.inputs
        single = isinstance(raw, str) or (bool(raw) and all(isinstance(x, str) for x in raw))
        if isinstance(raw, str):
            items = [[raw]]
        elif single:
            if len(raw) > 2:
                raise ServeError(
                    422,
                    f"a list of strings is one input, a text [a] or a pair [a, b] (as TEI reads "
                    f'it), got {len(raw)} strings: send a batch as [["a"], ["b"], ...] and pairs '
                    'as [["a", "b"], ...]',
                )
            items = [list(raw)]
        else:
            items = [list(x) for x in raw]
        if not items or not items[0]:
            raise ServeError(422, "inputs cannot be empty", "Empty")
        for i, x in enumerate(items):
            if len(x) not in (1, 2):
                raise ServeError(
                    422, f"input {i} has {len(x)} texts; give one text [a] or a pair [a, b]"
                )
        if len(items) > settings.max_client_batch_size:
            raise ServeError(
                413,
                f"{len(items)} inputs in one request; the maximum is "
                f"{settings.max_client_batch_size} (max_client_batch_size)",
            )
        groups = {
            n: [i for i, x in enumerate(items) if len(x) == n] for n in (1, 2)
        }  # row numbers of the single texts and of the pairs
        groups = {n: rows for n, rows in groups.items() if rows}
        if 2 in groups and isinstance(model, EntityTagger):
            raise ServeError(422, "a token-classification model takes single texts, not pairs")
        if reranker and 1 in groups:
            raise ServeError(
                422, 'a reranker scores pairs: send ["query", "text"] or [["query", "text"], ...]'
            )
        if body.speed is not None:
            if not isinstance(model, EarlyExitClassifier):
                raise ServeError(
                    422, "speed is for a self-distilled classifier (finetune --self-distill)"
                )
            if not 0.0 <= body.speed <= 1.0:
                raise ServeError(422, f"speed must lie in [0, 1], got {body.speed}")
        out: list = [None] * len(items)
        tokens = 0
        for n, rows in groups.items():
            part = [items[i] for i in rows]
            is_pair = n == 2
            counts = await run_in_threadpool(
                check_texts,
                [x[0] for x in part],
                body.truncate,
                [x[1] for x in part] if is_pair else None,
            )
            tokens += sum(counts)
            for i, answer in zip(rows, await _predict_part(part, is_pair, sum(counts), body)):
                out[i] = answer
        metrics.tokens.labels("/predict").inc(tokens)
        metrics.inputs.labels("/predict").inc(len(items))
        return out[0] if single else out

    async def _predict_part(items: list[list[str]], is_pair: bool, tokens: int, body) -> list:
        """/predict's answers for inputs that are all single texts or all pairs."""
        if reranker:
            key = ("rerank", body.raw_scores, body.truncation_direction)
            scores = np.asarray(await submit([tuple(x) for x in items], tokens, key))
            label = model.labels[0] if model.num_labels == 1 else None
            if label is not None:
                return [[{"label": label, "score": float(x)}] for x in scores]
            return [
                sorted(
                    ({"label": n, "score": float(v)} for n, v in zip(model.labels, row)),
                    key=lambda d: -d["score"],
                )
                for row in scores
            ]
        if isinstance(model, TextClassifier):
            key = ("classify", body.raw_scores, is_pair, body.speed)
            return list(await submit(items, tokens, key))
        return list(await submit([x[0] for x in items], tokens, ("tokens",)))

    app.state.digest = directory_digest(model_dir)
    return app
