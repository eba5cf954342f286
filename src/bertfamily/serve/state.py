"""What every route of one app shares: per served model, its adapter, settings, metrics and
dynamic batcher (`ServeState`; a server of several models holds one each, `ServeState.peers`),
and the FastAPI dependency that hands a route the state of the model its request is for
(`serving`: the path prefix ``/models/{name}/``, else the first model; the OpenAI-style routes
then choose by the body's ``model``, `ServeState.for_model`)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from ..errors import ServeError
from .adapters import ServedModel, run_key
from .batcher import DynamicBatcher
from .metrics import ServeMetrics
from .settings import ServeSettings

__all__ = ["MODEL_KEY", "SERVED_KEY", "ServeState", "serving"]

M = TypeVar("M", bound=ServedModel)

#: Seconds between two looks at whether a waiting request's client is still there.
DISCONNECT_POLL_S = 0.25
_REQUEST: ContextVar[Request | None] = ContextVar("bertfamily_serve_request", default=None)
#: The ASGI scope key of the model a path prefix ``/models/{name}/`` named (`app.ModelPrefix`).
MODEL_KEY = "bertfamily.model"
#: The ASGI scope key of a one-item list the metrics middleware puts there and `ServeState.
#: for_model` fills with the model that answered (a list: routing may copy the scope).
SERVED_KEY = "bertfamily.served"


@dataclass
class ServeState:
    """The served model and everything its routes share.

    Attributes:
        model: the adapter of the served pipeline.
        settings: limits and options.
        model_id: the model's name in /info and /v1/embeddings.
        model_dir: the directory it was loaded from.
        digest: /info's ``model_sha`` (the digest of the directory's files).
        metrics: the app's Prometheus series.
        batcher: the dynamic batcher every model call goes through (started by the app's
            lifespan).
        peers: every served model's state by name, in serving order (the first is the
            default; shared by all of them; this one alone on a one-model server).
    """

    model: ServedModel
    settings: ServeSettings
    model_id: str
    model_dir: Path
    digest: str
    metrics: ServeMetrics = field(default_factory=ServeMetrics)
    batcher: DynamicBatcher = field(init=False)
    peers: dict[str, ServeState] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.peers = {self.model_id: self}
        self.batcher = DynamicBatcher(
            run_key,
            self.settings.max_batch_tokens,
            batching=self.settings.batching,
            on_round=self.metrics.on_round,
            max_batch_requests=self.settings.max_batch_requests,
            on_computed=self.metrics.on_computed,
        )

    def for_model(self, name: str | None) -> ServeState:
        """The state of the model a request's ``model`` field names (the OpenAI-style routes).
        On a one-model server the field is ignored, as before (OpenAI clients send any name);
        on a server of several, None is the model the path chose (``/models/{name}/``, else
        the first).

        Raises:
            ServeError: 404 (``model_not_found``) a name the server does not serve (the
                message lists those it does); 422 a name other than the one the path prefix
                chose.
        """
        chosen = self
        if name is not None and len(self.peers) > 1 and name != self.model_id:
            request = _REQUEST.get()
            if request is not None and request.scope.get(MODEL_KEY) is not None:
                raise ServeError(
                    422, f"the path is for the model {self.model_id!r}, the body names {name!r}"
                )
            if name not in self.peers:
                raise ServeError(
                    404,
                    f"the model {name!r} does not exist; this server has "
                    f"{', '.join(map(repr, self.peers))}",
                    "model_not_found",
                )
            chosen = self.peers[name]
        request = _REQUEST.get()
        served = request.scope.get(SERVED_KEY) if request is not None else None
        if served is not None:  # the metrics middleware's holder (the scope may be a copy)
            served[0] = chosen.model_id
        return chosen

    def need(self, kind: type[M]) -> M:
        """The model, when it is of ``kind``.

        Raises:
            ServeError: 400 the served model is another kind (the message names its routes).
        """
        if not isinstance(self.model, kind):
            raise ServeError(400, f"{self.model_id} is {self.model.describe}", "Validation")
        return self.model

    async def submit(self, inputs: list, tokens: int, key: Hashable) -> Sequence[Any]:
        """The batcher's answer for one request's ``inputs`` (``key``: ``(model call,
        *options)``, `adapters.run_key`); a request the model refuses (ValueError: a token id
        outside the vocabulary, non-finite output, ...) fails alone with 422 (the batcher
        reruns the others of its group without it). While it waits, a client that closes
        its connection has its rows taken out of the queue (checked every
        `DISCONNECT_POLL_S` seconds): abandoned requests never hold up the others.

        Raises:
            ServeError: 422 as above; 499 the client went away.
        """
        job = asyncio.ensure_future(self.batcher.submit(inputs, tokens, key))
        request = _REQUEST.get()
        try:
            while True:  # a client that went away: its queued rows are dropped, never computed
                done, _ = await asyncio.wait({job}, timeout=DISCONNECT_POLL_S)
                if done:
                    return job.result()
                if request is not None and await request.is_disconnected():
                    job.cancel()
                    raise ServeError(499, "the client closed the connection", "Cancelled")
        except ValueError as e:
            detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ServeError(422, f"the model cannot run this request: {detail}") from None

    async def compute(
        self,
        route: str,
        texts: list[str],
        key: Hashable,
        truncate: bool | None,
        prompt_name: str | None = None,
    ) -> tuple[Sequence[Any], int]:
        """Admit ``texts`` (limits checked and tokens counted off the event loop, so /health
        and admission stay responsive), run them under ``key``, count them in the metrics;
        → (the model's answers, tokens computed).

        Raises:
            ServeError: as `ServedModel.admit` and `submit`.
        """
        prefix = self.model.prompt_text(prompt_name)
        counts = await run_in_threadpool(self.model.admit, texts, truncate, None, prefix)
        tokens = sum(counts)
        out = await self.submit(texts, tokens, key)
        self.metrics.computed(route, len(texts), tokens)
        return out, tokens


async def serving(request: Request) -> ServeState:
    """The `ServeState` of the model ``request`` is for: the one its path prefix
    ``/models/{name}/`` named, else the app's first (a FastAPI dependency; it also notes the
    request, for `ServeState.submit` to see its client leave and `ServeState.for_model` to
    see the path prefix: async, so that it runs in the request's own context, where the
    route reads it; FastAPI runs a plain function on a worker thread, in a copy)."""
    _REQUEST.set(request)
    state: ServeState = request.app.state.serve
    name = request.scope.get(MODEL_KEY)
    return state.peers[name] if name is not None else state
