"""The Prometheus series of one server (``GET /metrics``): ours (``bertfamily_*``) and
text-embeddings-inference's names (``te_*``), so that TEI's dashboards work unchanged. TEI's
counters are written under their exact names (``te_request_count``, no ``_total``: typed
``untyped``, as prometheus_client writes a counter only with ``_total``).

With ``--workers N`` every replica writes its series to the files of prometheus_client's
multiprocess mode (the directory in ``PROMETHEUS_MULTIPROC_DIR``, which `bertfamily serve`
creates), and each scrape, whichever replica answers it, adds up every replica's.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

__all__ = ["CONTENT_TYPE_LATEST", "MULTIPROCESS_ENV", "ServeMetrics", "models_text"]

#: prometheus_client's multiprocess directory: set, the series of every process add up.
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
_TOKENS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class _TeiNames:
    """A collector that writes the ``te_*`` counters of ``source`` under TEI's exact sample
    names (without ``_total``), and every other family as it is."""

    def __init__(self, source) -> None:
        self.source = source

    def collect(self):
        for family in self.source.collect():
            if family.type != "counter" or not family.name.startswith("te_"):
                yield family
                continue
            plain = Metric(family.name, family.documentation, "unknown")
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    plain.add_sample(family.name, sample.labels, sample.value)
            yield plain


class _ModelLabelled:
    """A collector of several models' series (``sources``: name → collector), each family
    written once with every model's samples, labelled ``model``."""

    def __init__(self, sources: dict) -> None:
        self.sources = sources

    def collect(self):
        families: dict[str, Metric] = {}
        for model, source in self.sources.items():
            for family in source.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                for sample in family.samples:
                    labels = {**sample.labels, "model": model}
                    merged.add_sample(
                        sample.name, labels, sample.value, sample.timestamp, sample.exemplar
                    )
        yield from families.values()


class _TeiSeries:
    """TEI's series (``router/src`` and ``core/src/infer.rs`` of text-embeddings-inference):
    requests by method, successes, failures by error type; durations in seconds; batch sizes
    and tokens; inputs per kind."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.count = Counter("te_request_count", "Requests", ["method"], registry=r)
        self.success = Counter("te_request_success", "Successful requests", ["method"], registry=r)
        self.failure = Counter("te_request_failure", "Failed requests", ["err"], registry=r)
        self.embed = Counter("te_embed_count", "Embedding requests computed", registry=r)
        self.embed_ok = Counter("te_embed_success", "Embedding requests answered", registry=r)
        self.predict = Counter("te_predict_count", "Predict/rerank requests computed", registry=r)
        self.predict_ok = Counter(
            "te_predict_success", "Predict/rerank requests answered", registry=r
        )
        self.duration = Histogram(
            "te_request_duration", "Request duration (s)", buckets=_SECONDS, registry=r
        )
        self.queue = Histogram(
            "te_queue_duration", "Time in the batcher's queue (s)", buckets=_SECONDS, registry=r
        )
        self.inference = Histogram(
            "te_inference_duration", "Model call duration (s)", buckets=_SECONDS, registry=r
        )
        self.input_length = Histogram(
            "te_request_input_length", "Tokens per input", buckets=_TOKENS, registry=r
        )
        self.batch_size = Histogram(
            "te_batch_size", "Inputs per model call", buckets=_SIZES, registry=r
        )
        self.next_size = Histogram(
            "te_batch_next_size", "Inputs per model call", buckets=_SIZES, registry=r
        )
        self.next_tokens = Histogram(
            "te_batch_next_tokens", "Tokens per model call", buckets=_TOKENS, registry=r
        )


class ServeMetrics:
    """The series of one app, in a registry of its own (two apps in one process never share
    counts; with ``PROMETHEUS_MULTIPROC_DIR`` set, every process's are added up): requests by
    route and status, input tokens and inputs computed by route, inputs and requests per
    model call, and request latency (seconds); and TEI's (`_TeiSeries`, ``self.tei``)."""

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
            buckets=_SECONDS,
        )
        self.tei = _TeiSeries(r)

    def on_round(self, requests: int, inputs: int) -> None:
        """One model call of the batcher: ``requests`` gathered, ``inputs`` rows in all."""
        self.batch_requests.observe(requests)
        self.batch_inputs.observe(inputs)

    def on_computed(self, waits: list[float], seconds: float, inputs: int, tokens: int) -> None:
        """One model call done: the seconds each of its requests ``waits``-ed in the queue,
        the call's ``seconds``, its ``inputs`` and ``tokens``."""
        for w in waits:
            self.tei.queue.observe(w)
        self.tei.inference.observe(seconds)
        self.tei.batch_size.observe(inputs)
        self.tei.next_size.observe(inputs)
        self.tei.next_tokens.observe(tokens)

    def computed(self, route: str, inputs: int, tokens: int) -> None:
        """A request of ``route`` answered: ``inputs`` inputs, ``tokens`` tokens computed."""
        self.tokens.labels(route).inc(tokens)
        self.inputs.labels(route).inc(inputs)
        if route in ("/predict", "/rerank", "/v1/rerank"):
            self.tei.predict.inc()
            self.tei.predict_ok.inc()
        else:
            self.tei.embed.inc()
            self.tei.embed_ok.inc()
        if inputs:
            self.tei.input_length.observe(tokens / inputs)

    def request(self, route: str, status: int, error_type: str, seconds: float) -> None:
        """One inference request answered (TEI's series): ``status``, ``error_type`` (TEI's,
        for a failure) and its ``seconds``."""
        method = route.strip("/") or "root"
        self.tei.count.labels(method).inc()
        if status < 400:
            self.tei.success.labels(method).inc()
            self.tei.duration.observe(seconds)
        else:
            self.tei.failure.labels(error_type.lower()).inc()

    def text(self) -> bytes:
        """The Prometheus text format of every series (every process's, in multiprocess
        mode)."""
        if os.environ.get(MULTIPROCESS_ENV):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(_TeiNames(registry))
        return generate_latest(_TeiNames(self.registry))


def models_text(metrics: dict[str, ServeMetrics]) -> bytes:
    """The Prometheus text of several models' series (name → `ServeMetrics`), each sample
    labelled ``model`` with its model's name (one model: its own text, unlabelled, as
    `ServeMetrics.text`)."""
    if len(metrics) == 1:
        return next(iter(metrics.values())).text()
    sources = {name: _TeiNames(m.registry) for name, m in metrics.items()}
    return generate_latest(_ModelLabelled(sources))
