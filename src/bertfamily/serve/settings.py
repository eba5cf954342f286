"""The server's limits and options (`ServeSettings`), read by the admission checks
(`admission`), the batcher and the HTTP layer."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

__all__ = ["ServeSettings"]


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
