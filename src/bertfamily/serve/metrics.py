"""The Prometheus series of one server (``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE_LATEST", "ServeMetrics"]


class ServeMetrics:
    """The series of one app, in a registry of its own (two apps in one process never share
    counts): requests by route and status, input tokens and inputs computed by route, inputs
    and requests per model call, and request latency (seconds)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "bertfamily_requests", "HTTP requests by route and status", ["route", "status"],
            registry=r,
        )  # fmt: skip
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
        """One model call of the batcher: ``requests`` gathered, ``inputs`` rows in all."""
        self.batch_requests.observe(requests)
        self.batch_inputs.observe(inputs)

    def computed(self, route: str, inputs: int, tokens: int) -> None:
        """A request of ``route`` answered: ``inputs`` inputs, ``tokens`` tokens computed."""
        self.tokens.labels(route).inc(tokens)
        self.inputs.labels(route).inc(inputs)

    def text(self) -> bytes:
        """The Prometheus text format of every series."""
        return generate_latest(self.registry)
