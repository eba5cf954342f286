"""`bertfamily serve`: the HTTP server (TEI and OpenAI embeddings routes, /predict) with dynamic
batching."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import (
    DEVICE_HELP,
    DTYPE_HELP,
    DTYPES,
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
)

commands = App()

MODEL_OPTION = typer.Option(
    None,
    metavar="DIR|NAME",
    help="Model directory, resource name (default: all-MiniLM-L6-v2) or cached org/name: an "
    "embedding model (/embed, /v1/embeddings, /embed_all, /similarity), a cross-encoder "
    "(/rerank, /predict), a SPLADE model (/embed_sparse) or a (token-)classification model "
    "(/predict); every model answers /tokenize and /decode.",
)
MAX_BATCH_TOKENS_OPTION = typer.Option(
    16384, min=1, help="Token budget of the requests gathered into one model call."
)
BATCH_SIZE_OPTION = typer.Option(
    32, min=1, help="Most sequences in one forward pass (a gathered call runs several)."
)
BATCHING_OPTION = typer.Option(
    True, help="Gather concurrent requests into one model call (--no-batching: one by one)."
)
MAX_BODY_BYTES_OPTION = typer.Option(
    None,
    min=1,
    help="Largest request body in bytes: 413 from its Content-Length before it is read, or "
    "as soon as a chunked body passes it (default: room for --max-client-batch-size "
    "inputs of --max-input-chars characters, written as JSON escapes).",
)
TIMEOUT_KEEP_ALIVE_OPTION = typer.Option(
    5.0,
    min=0.001,
    help="Seconds a connection may stay open without a complete request header (idle, or "
    "half a header) before the server closes it.",
)
API_KEY_OPTION = typer.Option(
    None,
    envvar="BERTFAMILY_API_KEY",
    help="Require 'Authorization: Bearer KEY' on every route but /health "
    "(or set BERTFAMILY_API_KEY, which keeps the key out of the process list).",
)
DTYPE_OPTION = typer.Option(
    "auto",
    metavar="auto|fp32|bf16|fastest",
    help=DTYPE_HELP + " Every kind of model (a self-distilled classifier runs fp32 only); "
    "/info and the start-up line say the dtype it runs in.",
)
SPEED_OPTION = typer.Option(
    None,
    min=0.0,
    max=1.0,
    help="A self-distilled classifier: default early-exit speed (0: the full model); "
    "requests may send their own.",
)
WORKERS_OPTION = typer.Option(
    1,
    min=1,
    help="Replicas behind the one address (uvicorn worker processes; each loads the model "
    "and batches its own requests; responses name theirs in X-Replica).",
)


@commands.command()
@handle_errors
def serve(
    model: str | None = MODEL_OPTION,
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every one)."),
    port: int = typer.Option(8080, min=0, max=65535, help="Port to listen on."),
    max_batch_tokens: int = MAX_BATCH_TOKENS_OPTION,
    batch_size: int = BATCH_SIZE_OPTION,
    batching: bool = BATCHING_OPTION,
    max_client_batch_size: int = typer.Option(32, min=1, help="Most inputs in one request."),
    max_input_chars: int = typer.Option(100_000, min=1, help="Most characters in one input."),
    auto_truncate: bool = typer.Option(
        False, help="Truncate long inputs of requests that do not say (else 413)."
    ),
    max_body_bytes: int | None = MAX_BODY_BYTES_OPTION,
    timeout_keep_alive: float = TIMEOUT_KEEP_ALIVE_OPTION,
    api_key: str | None = API_KEY_OPTION,
    dtype: str = DTYPE_OPTION,
    quantize: str | None = typer.Option(
        None, metavar="int8", help=QUANTIZE_HELP + " Embedding models only."
    ),
    runtime: str = typer.Option("torch", help=RUNTIME_HELP + " Embedding models only."),
    speed: float | None = SPEED_OPTION,
    threads: int = typer.Option(
        0, min=0, help=THREADS_HELP + " With --workers N, the free cores are shared out."
    ),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    graceful_timeout: float = typer.Option(
        30.0, min=0, help="Seconds to finish the requests in flight after SIGTERM / Ctrl-C."
    ),
    workers: int = WORKERS_OPTION,
):
    """Serve a model over HTTP: POST /embed, /v1/embeddings, /embed_all, /similarity,
    /embed_sparse, /rerank, /predict, /tokenize, /decode; GET /health, /info, /metrics
    (Prometheus). Routes and JSON as Hugging Face's text-embeddings-inference."""
    device = _checked_options(dtype, quantize, runtime, device)  # the serve extra too
    import uvicorn

    from ..serve.app import ServeSettings, create_app
    from ..serve.http import connection_limits

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
    err.print(_threads(threads, workers), soft_wrap=True, markup=False, highlight=False)
    run = dict(
        host=host, port=port, log_level="warning", timeout_graceful_shutdown=graceful_timeout
    )
    run |= connection_limits(settings.timeout_keep_alive)  # every replica's
    if workers > 1:
        _serve_replicas(path, settings, workers, run, dtype=dtype, quantize=quantize,
                        threads=threads, speed=speed, device=device, runtime=runtime)  # fmt: skip
        return
    served = _load(path, dtype, quantize, speed, device, runtime)
    app = create_app(served, settings, model_dir=path)
    err.print(f"serving {path} on http://{host}:{port}", soft_wrap=True)
    uvicorn.run(app, **run)


def _checked_options(dtype: str, quantize: str | None, runtime: str, device: str) -> str:
    """Refuse what cannot run before anything loads (the serve extra missing, an unknown
    dtype, quantize or runtime, a device torch does not see); → the torch device."""
    from ..runtime import require

    device = torch_device(device)
    for module in ("fastapi", "uvicorn", "prometheus_client"):
        require(module, "serve", "bertfamily serve")
    if dtype not in DTYPES:
        raise typer.BadParameter(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    check_quantize(quantize, dtype)
    check_runtime(runtime, quantize, device)
    return device


def _threads(requested: int, workers: int) -> str:
    """Set this process's threads by the one thread policy (`runtime.apply_threads`: the free
    cores shared out among ``workers`` replicas, kept there while the server runs when the
    count is automatic); each replica applies the same policy (`serve.replicas`). → the line
    that says what was chosen."""
    from ..runtime import apply_threads, threads_are_automatic

    if workers == 1:
        return apply_threads(requested)
    line = apply_threads(requested, workers, adapt=False)  # this process only supervises
    adapts = "; each adapting while it runs" if threads_are_automatic(requested) else ""
    return f"{line} in each of {workers} replicas{adapts}"


def _dtype_line(name: str, dtype: str, device: str, quantize: str | None, runtime: str) -> str:
    """The start-up line of the dtype ``name`` the model runs in (as /info says it) and why."""
    from ..inference.precision import resolve_dtype

    if runtime != "torch":
        why = f"{runtime} runtime"
    elif quantize is not None:
        why = "torch's dynamic int8 of the plan's Linear layers; the rest fp32"
    else:  # resolve_dtype's reason is "fp32 (why)"
        why = resolve_dtype(dtype, device)[1].partition(" (")[2].removesuffix(")")
    return f"dtype: {name} ({why})"


def _load(path: Path, dtype: str, quantize: str | None, speed, device: str, runtime: str):
    """The served pipeline (`serve.app.load_served_model`), printing the dtype it runs in
    (read from the loaded model, as /info says it) and the int8 plan or OpenVINO check."""
    from ..serve.adapters import served_dtype
    from ..serve.app import load_served_model
    from ..train.mixed_precision import bf16_native

    if dtype == "bf16" and not bf16_native():
        err.print(
            "[yellow]warning:[/] this CPU has no native bf16 matrix units; bf16 runs emulated "
            "and is slower than fp32 here (--dtype fastest picks fp32)"
        )
    options = dict(dtype=dtype, speed=speed, device=device, runtime=runtime, quantize=quantize)
    if quantize is not None and runtime == "torch":
        served = load_int8(lambda: load_served_model(path, **options))
    else:
        served = load_served_model(path, **options)
    if runtime != "torch":
        err.print(f"runtime: {served.dtype_reason}", soft_wrap=True)
    line = _dtype_line(served_dtype(served), dtype, device, quantize, runtime)
    err.print(line, soft_wrap=True, markup=False, highlight=False)
    return served


def _serve_replicas(path: Path, settings, workers: int, run: dict, **options) -> None:
    """``workers`` uvicorn processes behind one address, each building its app from the
    environment (`serve.replicas.app_from_environment`)."""
    import os

    import uvicorn

    from ..inference.precision import resolve_dtype
    from ..serve.replicas import ENV, replica_environment

    os.environ[ENV] = replica_environment(path, settings, processes=workers, **options)
    dtype, quantize, runtime = options["dtype"], options["quantize"], options["runtime"]
    if runtime == "torch":  # each replica loads it so (its /info says it too)
        name = "int8" if quantize else str(resolve_dtype(dtype, options["device"])[0])
        line = _dtype_line(name.removeprefix("torch."), dtype, options["device"], quantize, runtime)
        err.print(line + " in each replica", soft_wrap=True, markup=False, highlight=False)
    err.print(f"serving {path} on http://{run['host']}:{run['port']} ({workers} replicas)",
              soft_wrap=True)  # fmt: skip
    uvicorn.run(
        "bertfamily.serve.replicas:app_from_environment", factory=True, workers=workers, **run
    )
