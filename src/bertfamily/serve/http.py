"""The limits of a connection and of a request body.

`HeaderTimeoutProtocol`: uvicorn's h11 protocol with a header timeout: a connection that has
not sent a complete request header within ``timeout_keep_alive`` seconds of connecting, or of
its last response, is closed (uvicorn alone only times out connections after a response, and
any byte, such as half a header, stops that timer: half-open connections were never closed).

`BodyLimit`: ASGI middleware that refuses a body over the limit before reading it whole.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["BodyLimit", "HeaderTimeoutProtocol", "connection_limits", "error_body"]

MAX_HEADER_BYTES = 64 * 1024  # h11's largest incomplete event: a header that never ends


def connection_limits(timeout_keep_alive: float) -> dict:
    """The keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` that bound a connection:
    idle and half-open connections are closed after ``timeout_keep_alive`` seconds
    (`HeaderTimeoutProtocol`, named by its import path so that worker processes load it too),
    and a header larger than `MAX_HEADER_BYTES` is refused."""
    return {
        "timeout_keep_alive": timeout_keep_alive,
        "http": "bertfamily.serve.http:HeaderTimeoutProtocol",
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }


class HeaderTimeoutProtocol(H11Protocol):
    """`H11Protocol` that closes a connection with no request in progress after
    ``timeout_keep_alive`` seconds, whatever bytes it sent."""

    _header_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.timeout_keep_alive, self._header_timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.cycle is None or self.cycle.response_complete:  # no request in progress
            self.timeout_keep_alive_handler()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        """Start the header deadline."""
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc) -> None:
        """Drop the deadline."""
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        """Parse what arrived; a complete request header lifts the deadline."""
        super().handle_events()
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()  # a whole header arrived: the request runs without a deadline

    def on_response_complete(self) -> None:
        """Answered: the next request header has a deadline again."""
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()


def error_body(path: str, status: int, message: str, error_type: str) -> dict[str, Any]:
    """The JSON error body of TEI (``{error, error_type}``), or OpenAI's under ``/v1/``."""
    if path.startswith("/v1/"):
        return {"message": message, "code": status, "type": error_type}
    return {"error": message, "error_type": error_type}


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with 413 before it is
    read: from its ``Content-Length`` when it has one, else (chunked) as soon as the bytes
    received pass the limit, so memory per request stays under the limit."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _reply(self, scope, send, status: int, message: str) -> None:
        body = json.dumps(
            error_body(scope.get("path", ""), status, message, "Validation"), separators=(",", ":")
        )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body.encode()})

    async def __call__(self, scope, receive, send) -> None:  # noqa: D102
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = [v for k, v in scope.get("headers", []) if k == b"content-length"]
        if declared:
            try:
                size = int(declared[0])
            except ValueError:
                await self._reply(scope, send, 400, "Content-Length is not a number")
                return
            if size > self.limit:
                await self._reply(
                    scope,
                    send,
                    413,
                    f"request body of {size:,} bytes; the maximum is {self.limit:,} "
                    "(max_body_bytes)",
                )
                return
        # read the body here, at most `limit` bytes of it, then hand it on: a chunked body
        # over the limit is refused as soon as it passes it (the rest is never read)
        parts, received, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([], message), send)
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.limit:
                await self._reply(
                    scope,
                    send,
                    413,
                    f"request body over {self.limit:,} bytes (max_body_bytes); the rest was "
                    "not read",
                )
                return
            parts.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay([b"".join(parts)], None, receive), send)


def _replay(bodies: list[bytes], last: dict | None, receive=None):
    """An ASGI ``receive`` that gives ``bodies`` as one request message, then ``last`` (or,
    once given, waits on the real ``receive`` for the disconnect)."""
    queue = [{"type": "http.request", "body": b, "more_body": False} for b in bodies]

    async def replayed():
        if queue:
            return queue.pop(0)
        if last is not None:
            return last
        return await receive()

    return replayed
