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
        openai_max_inputs: most inputs one /v1/embeddings request may hold (OpenAI's 2,048;
            never fewer than ``max_client_batch_size``); a large request runs as several
            forward passes.
        max_concurrent_requests: most requests computed or queued at once; one more is
            answered 429 (TEI ``--max-concurrent-requests``).
        max_batch_requests: most requests gathered into one model call (None: as many as
            ``max_batch_tokens`` allows; TEI ``--max-batch-requests``).
        body_timeout: seconds a request body may take to arrive once its header has (408 and
            the connection closed beyond; `http.HeaderTimeoutProtocol`).
        max_connections_per_client: most open connections from one client address, per
            process (429 beyond).
        default_prompt_name: the prompt (of the model's) of requests that name none (TEI
            ``--default-prompt-name``; None: the model's default).
        default_prompt: a prompt text for requests that name none (TEI ``--default-prompt``;
            not with ``default_prompt_name``).
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
    openai_max_inputs: int = 2048
    max_concurrent_requests: int = 512
    max_batch_requests: int | None = None
    body_timeout: float = 30.0
    max_connections_per_client: int = 64
    default_prompt_name: str | None = None
    default_prompt: str | None = None

    @property
    def openai_limit(self) -> int:
        """Inputs per /v1/embeddings request."""
        return max(self.openai_max_inputs, self.max_client_batch_size)

    @property
    def body_limit(self) -> int:
        """The largest request body, in bytes."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return self.max_client_batch_size * self.max_input_chars * 6 + 65536

    def __post_init__(self) -> None:
        names = (
            "max_batch_tokens",
            "batch_size",
            "max_client_batch_size",
            "max_input_chars",
            "openai_max_inputs",
            "max_concurrent_requests",
            "max_connections_per_client",
        )
        for name in names:
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_body_bytes is not None and self.max_body_bytes < 1:
            raise InputError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        if self.max_batch_requests is not None and self.max_batch_requests < 1:
            raise InputError(f"max_batch_requests must be >= 1, got {self.max_batch_requests}")
        if self.body_timeout <= 0:
            raise InputError(f"body_timeout must be > 0, got {self.body_timeout}")
        if self.timeout_keep_alive <= 0:
            raise InputError(f"timeout_keep_alive must be > 0, got {self.timeout_keep_alive}")
        if self.default_prompt is not None and self.default_prompt_name is not None:
            raise InputError("give default_prompt or default_prompt_name, not both")
        if self.api_key is not None and not self.api_key.strip():
            raise InputError("api_key must not be empty")
