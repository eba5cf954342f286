"""The limits of a connection and of a request body.

`HeaderTimeoutProtocol`: uvicorn's h11 protocol with the one timeout policy of a connection:
a connection that has not sent a complete request header within ``timeout_keep_alive`` seconds
of connecting, or of its last response, is closed (uvicorn alone only times out connections
after a response, and any byte, such as half a header, stops that timer: half-open connections
were never closed); a request whose header arrived but whose body is not complete within
``body_timeout`` seconds is answered 408 and closed; a client address holding
``max_connections_per_client`` open connections has its next one answered 429 and closed.

`BodyLimit`: ASGI middleware that refuses a body over the limit before reading it whole.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "LIMITS_ENV",
    "BodyLimit",
    "HeaderTimeoutProtocol",
    "connection_limits",
    "error_body",
    "openai_wire",
]

MAX_HEADER_BYTES = 64 * 1024  # h11's largest incomplete event: a header that never ends


#: The environment variable that carries the connection limits to uvicorn's worker processes
#: (JSON: ``body_timeout``, ``max_connections_per_client``).
LIMITS_ENV = "BERTFAMILY_SERVE_CONNECTION"


def connection_limits(
    timeout_keep_alive: float,
    body_timeout: float = 30.0,
    max_connections_per_client: int = 64,
) -> dict:
    """The keyword arguments of ``uvicorn.run`` / ``uvicorn.Config`` that bound a connection:
    idle and half-open connections are closed after ``timeout_keep_alive`` seconds, a body
    not complete ``body_timeout`` seconds after its header is answered 408, one client
    address holds at most ``max_connections_per_client`` connections (per process)
    (`HeaderTimeoutProtocol`, named by its import path so that worker processes load it too;
    the two limits are set on it here and exported in `LIMITS_ENV` for the workers), and a
    header larger than `MAX_HEADER_BYTES` is refused."""
    HeaderTimeoutProtocol.body_timeout = body_timeout
    HeaderTimeoutProtocol.max_connections_per_client = max_connections_per_client
    os.environ[LIMITS_ENV] = json.dumps(
        {"body_timeout": body_timeout, "max_connections_per_client": max_connections_per_client}
    )
    return {
        "timeout_keep_alive": timeout_keep_alive,
        "http": "bertfamily.serve.http:HeaderTimeoutProtocol",
        "h11_max_incomplete_event_size": MAX_HEADER_BYTES,
    }


def _limits_from_environment() -> dict:
    try:
        return json.loads(os.environ.get(LIMITS_ENV, "{}"))
    except ValueError:
        return {}


def _raw_reply(status: int, reason: str) -> bytes:
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    ).encode()


class HeaderTimeoutProtocol(H11Protocol):
    """`H11Protocol` that closes a connection with no request in progress after
    ``timeout_keep_alive`` seconds, whatever bytes it sent; answers 408 to a request whose
    body is not complete ``body_timeout`` seconds after its header; and answers 429 to a
    connection beyond ``max_connections_per_client`` from one address (counted per process).
    """

    body_timeout: float = float(_limits_from_environment().get("body_timeout", 30.0))
    max_connections_per_client: int = int(
        _limits_from_environment().get("max_connections_per_client", 64)
    )
    _open: Counter = Counter()  # open connections per client address, in this process
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _client: str | None = None

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.timeout_keep_alive, self._header_timeout)

    def _disarm(self) -> None:
        for name in ("_header_timer", "_body_timer"):
            timer = getattr(self, name)
            if timer is not None:
                timer.cancel()
                setattr(self, name, None)

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.cycle is None or self.cycle.response_complete:  # no request in progress
            self.timeout_keep_alive_handler()

    def _body_timeout(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not self.transport.is_closing():
            if not cycle.response_started:
                self.transport.write(_raw_reply(408, "Request Timeout"))
            self.transport.close()  # the app's receive() sees the disconnect

    def connection_made(self, transport) -> None:  # type: ignore[override]
        """Start the header deadline; refuse an address over its connection cap."""
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        client = peer[0] if isinstance(peer, tuple) and peer else None
        if client is not None and self._open[client] >= self.max_connections_per_client:
            transport.write(_raw_reply(429, "Too Many Requests"))
            transport.close()
            return
        if client is not None:
            self._client = client
            self._open[client] += 1
        self._arm()

    def connection_lost(self, exc) -> None:
        """Drop the deadlines and the address's count."""
        self._disarm()
        if self._client is not None:
            self._open[self._client] -= 1
            if self._open[self._client] <= 0:
                del self._open[self._client]
            self._client = None
        super().connection_lost(exc)

    def handle_events(self) -> None:
        """Parse what arrived; a complete request header lifts the header deadline and starts
        the body deadline, a complete body lifts that."""
        super().handle_events()
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        if cycle.more_body:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.body_timeout, self._body_timeout)
        elif self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def on_response_complete(self) -> None:
        """Answered: the next request header has a deadline again."""
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()


#: OpenAI's error ``type`` by HTTP status (its ``code`` is our ``error_type``, lower case).
OPENAI_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                429: "rate_limit_error", 503: "server_error", 500: "server_error"}  # fmt: skip


def openai_wire(path: str) -> bool:
    """Whether ``path`` is a route of OpenAI's wire (``/v1/...``; Cohere's ``/v2/rerank``
    too), whose errors take OpenAI's shape."""
    return path.startswith(("/v1/", "/v2/"))


def error_body(path: str, status: int, message: str, error_type: str) -> dict[str, Any]:
    """The JSON error body of ``path``'s wire: OpenAI's ``{"error": {"message", "type",
    "param", "code"}}`` under ``/v1/`` (``type`` from the status, ``code`` our
    ``error_type`` in lower case), TEI's ``{"error", "error_type"}`` on every other route."""
    if openai_wire(path):
        kind = OPENAI_TYPES.get(status, "invalid_request_error")
        code = error_type.lower()
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
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
