"""uvicorn's h11 protocol with a header timeout: a connection that has not sent a complete
request header within ``timeout_keep_alive`` seconds of connecting, or of its last response,
is closed (uvicorn alone only times out connections after a response, and any byte, such as
half a header, stops that timer: half-open connections were never closed)."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutProtocol", "connection_limits"]

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
