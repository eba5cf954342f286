"""`bertfamily serve`: the HTTP server (TEI and OpenAI embeddings routes, /predict) with dynamic
batching."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import (
    DEVICE_HELP,
    DTYPE_HELP,
    QUANTIZE_HELP,
    RUNTIME_HELP,
    THREADS_HELP,
    App,
    check_quantize,
    check_runtime,
    err,
    handle_errors,
    load_int8,
    model_path,
    torch_device,
    torch_dtype,
)

commands = App()


@commands.command()
@handle_errors
def serve(
    model: str | None = typer.Option(
        None,
        metavar="DIR|NAME",
        help="Model directory, resource name (default: all-MiniLM-L6-v2) or cached org/name: an "
        "embedding model (/embed, /v1/embeddings, /embed_all, /similarity), a cross-encoder "
        "(/rerank, /predict), a SPLADE model (/embed_sparse) or a (token-)classification model "
        "(/predict); every model answers /tokenize and /decode.",
    ),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every one)."),
    port: int = typer.Option(8080, min=0, max=65535, help="Port to listen on."),
    max_batch_tokens: int = typer.Option(
        16384, min=1, help="Token budget of the requests gathered into one model call."
    ),
    batch_size: int = typer.Option(
        32, min=1, help="Most sequences in one forward pass (a gathered call runs several)."
    ),
    batching: bool = typer.Option(
        True, help="Gather concurrent requests into one model call (--no-batching: one by one)."
    ),
    max_client_batch_size: int = typer.Option(32, min=1, help="Most inputs in one request."),
    max_input_chars: int = typer.Option(100_000, min=1, help="Most characters in one input."),
    auto_truncate: bool = typer.Option(
        False, help="Truncate long inputs of requests that do not say (else 413)."
    ),
    max_body_bytes: int | None = typer.Option(
        None,
        min=1,
        help="Largest request body in bytes: 413 from its Content-Length before it is read, or "
        "as soon as a chunked body passes it (default: room for --max-client-batch-size "
        "inputs of --max-input-chars characters, written as JSON escapes).",
    ),
    timeout_keep_alive: float = typer.Option(
        5.0,
        min=0.001,
        help="Seconds a connection may stay open without a complete request header (idle, or "
        "half a header) before the server closes it.",
    ),
    api_key: str | None = typer.Option(
        None,
        envvar="BERTFAMILY_API_KEY",
        help="Require 'Authorization: Bearer KEY' on every route but /health "
        "(or set BERTFAMILY_API_KEY, which keeps the key out of the process list).",
    ),
    dtype: str = typer.Option("auto", help=DTYPE_HELP + " Embedding models only."),
    quantize: str | None = typer.Option(
        None, metavar="int8", help=QUANTIZE_HELP + " Embedding models only."
    ),
    runtime: str = typer.Option("torch", help=RUNTIME_HELP + " Embedding models only."),
    speed: float | None = typer.Option(
        None,
        min=0.0,
        max=1.0,
        help="A self-distilled classifier: default early-exit speed (0: the full model); "
        "requests may send their own.",
    ),
    threads: int = typer.Option(
        0, min=0, help=THREADS_HELP + " With --workers N, the free cores are shared out."
    ),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    graceful_timeout: float = typer.Option(
        30.0, min=0, help="Seconds to finish the requests in flight after SIGTERM / Ctrl-C."
    ),
    workers: int = typer.Option(
        1,
        min=1,
        help="Replicas behind the one address (uvicorn worker processes; each loads the model "
        "and batches its own requests; responses name theirs in X-Replica).",
    ),
):
    """Serve a model over HTTP: POST /embed, /v1/embeddings, /embed_all, /similarity,
    /embed_sparse, /rerank, /predict, /tokenize, /decode; GET /health, /info, /metrics
    (Prometheus). Routes and JSON as Hugging Face's text-embeddings-inference."""
    from ..runtime import require

    for module in ("fastapi", "uvicorn", "prometheus_client"):
        require(module, "serve", "bertfamily serve")
    import torch
    import uvicorn

    from ..runtime import (
        AdaptiveThreads,
        choose_threads,
        max_threads_per_process,
        threads_are_automatic,
    )
    from ..serve.app import ServeSettings, create_app, load_served_model
    from ..serve.http import connection_limits

    device = torch_device(device)
    adapt = threads_are_automatic(threads)
    max_threads = max_threads_per_process(workers)
    threads, why = choose_threads(threads, workers)
    if adapt:
        why += "; adapting to the load between batches"
    err.print(f"threads: {threads} torch intra-op per replica ({why})", soft_wrap=True)
    torch.set_num_threads(threads)
    if adapt and workers == 1:
        AdaptiveThreads(max_threads, threads=threads).start()
    settings = ServeSettings(
        max_batch_tokens=max_batch_tokens,
        batch_size=batch_size,
        batching=batching,
        max_client_batch_size=max_client_batch_size,
        max_input_chars=max_input_chars,
        auto_truncate=auto_truncate,
        max_body_bytes=max_body_bytes,
        timeout_keep_alive=timeout_keep_alive,
        api_key=api_key,
        model_id=model if model and not Path(model).exists() else None,  # org/name
    )
    path = model_path(model)
    check_quantize(quantize, dtype)
    check_runtime(runtime, quantize, device)
    limits = connection_limits(settings.timeout_keep_alive)  # every replica's
    if workers > 1:
        import os

        from ..serve.replicas import ENV, replica_environment

        os.environ[ENV] = replica_environment(
            path,
            settings,
            dtype=dtype,
            quantize=quantize,
            threads=threads,
            adaptive_max_threads=max_threads if adapt else 0,
            speed=speed,
            device=device,
            runtime=runtime,
        )
        err.print(f"serving {path} on http://{host}:{port} ({workers} replicas)", soft_wrap=True)
        uvicorn.run(
            "bertfamily.serve.replicas:app_from_environment",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=graceful_timeout,
            **limits,
        )
        return
    if quantize is None or runtime != "torch":
        served = load_served_model(
            path,
            dtype=dtype if runtime != "torch" else torch_dtype(dtype, device),
            speed=speed,
            device=device,
            runtime=runtime,
            quantize=quantize,
        )
        if runtime != "torch":
            err.print(f"runtime: {served.dtype_reason}", soft_wrap=True)
    else:
        served = load_int8(lambda: load_served_model(path, quantize=quantize, device=device))
    app = create_app(served, settings, model_dir=path)
    err.print(f"serving {path} on http://{host}:{port}", soft_wrap=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=graceful_timeout,
        **limits,
    )
