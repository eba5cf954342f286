"""What every route of one app shares: the served model's adapter, the settings, the
metrics and the dynamic batcher (`ServeState`), and the FastAPI dependency that hands it to a
route (`serving`)."""

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

__all__ = ["ServeState", "serving"]

M = TypeVar("M", bound=ServedModel)

#: Seconds between two looks at whether a waiting request's client is still there.
DISCONNECT_POLL_S = 0.25
_REQUEST: ContextVar[Request | None] = ContextVar("bertfamily_serve_request", default=None)


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
    """

    model: ServedModel
    settings: ServeSettings
    model_id: str
    model_dir: Path
    digest: str
    metrics: ServeMetrics = field(default_factory=ServeMetrics)
    batcher: DynamicBatcher = field(init=False)

    def __post_init__(self) -> None:
        self.batcher = DynamicBatcher(
            run_key,
            self.settings.max_batch_tokens,
            batching=self.settings.batching,
            on_round=self.metrics.on_round,
            max_batch_requests=self.settings.max_batch_requests,
            on_computed=self.metrics.on_computed,
        )

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


def serving(request: Request) -> ServeState:
    """The `ServeState` of the app answering ``request`` (a FastAPI dependency; it also
    notes the request, for `ServeState.submit` to see its client leave)."""
    _REQUEST.set(request)
    return request.app.state.serve
