"""`bertfamily serve`: the HTTP server (TEI and OpenAI embeddings routes, /predict) with dynamic
batching."""

from __future__ import annotations

import os
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
    "--model",
    "--model-id",
    metavar="[NAME=]DIR|NAME",
    help="Model directory, resource name (default: all-MiniLM-L6-v2) or cached org/name "
    "(TEI: --model-id, MODEL_ID): an embedding model (/embed, /v1/embeddings, /embed_all, "
    "/similarity), a cross-encoder (/rerank, /v1/rerank, /predict), a SPLADE model "
    "(/embed_sparse) or a (token-)classification model (/predict); every model answers "
    "/tokenize and /decode, and POST / answers as its kind's route. Repeat it to serve "
    "several models (NAME=DIR names one; default its directory's name): the first answers "
    "the plain routes, /models/NAME/ROUTE any one, and /v1/embeddings and /v1/rerank choose "
    "by the body's model.",
)
MAX_BATCH_TOKENS_OPTION = typer.Option(
    16384, min=1, envvar="MAX_BATCH_TOKENS",
    help="Token budget of the requests gathered into one model call.",
)  # fmt: skip
BATCH_SIZE_OPTION = typer.Option(
    32, min=1, help="Most sequences in one forward pass (a gathered call runs several)."
)
BATCHING_OPTION = typer.Option(
    True, help="Gather concurrent requests into one model call (--no-batching: one by one)."
)
MAX_BODY_BYTES_OPTION = typer.Option(
    None,
    "--max-body-bytes",
    "--payload-limit",
    envvar="PAYLOAD_LIMIT",
    min=1,
    help="Largest request body in bytes (TEI: --payload-limit): 413 from its Content-Length "
    "before it is read, or as soon as a chunked body passes it (default: room for "
    "--max-client-batch-size inputs of --max-input-chars characters, written as JSON "
    "escapes).",
)
TIMEOUT_KEEP_ALIVE_OPTION = typer.Option(
    5.0,
    min=0.001,
    help="Seconds a connection may stay open without a complete request header (idle, or "
    "half a header) before the server closes it.",
)
BODY_TIMEOUT_OPTION = typer.Option(
    30.0, min=0.001,
    help="Seconds a request body may take to arrive once its header has (408 and the "
    "connection closed beyond).",
)  # fmt: skip
CONNECTIONS_OPTION = typer.Option(
    64, min=1,
    help="Most open connections from one client address (per replica); one more is "
    "answered 429 and closed.",
)  # fmt: skip
API_KEY_OPTION = typer.Option(
    None,
    envvar=["API_KEY", "BERTFAMILY_API_KEY"],
    help="Require 'Authorization: Bearer KEY' on every route but GET /health, / and /ping "
    "(or set API_KEY / BERTFAMILY_API_KEY, which keeps the key out of the process list).",
)
DTYPE_OPTION = typer.Option(
    "auto",
    envvar="DTYPE",
    metavar="auto|fp32|bf16|fastest|float32|bfloat16",
    help=DTYPE_HELP + " Every kind of model (a self-distilled classifier runs fp32 only); "
    "/info and the start-up line say the dtype it runs in. TEI's float32 and bfloat16 are "
    "fp32 and bf16.",
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
    "and batches its own requests; responses name theirs in X-Replica; /metrics adds up "
    "every replica's series).",
)
HOST_OPTION = typer.Option(
    "127.0.0.1", "--host", "--hostname",
    help="Address to listen on (0.0.0.0: every one). TEI's HOSTNAME variable is not read: "
    "shells set it to the machine's name.",
)  # fmt: skip
PORT_OPTION = typer.Option(8080, min=0, max=65535, envvar="PORT", help="Port to listen on.")
CLIENT_BATCH_OPTION = typer.Option(
    32, min=1, envvar="MAX_CLIENT_BATCH_SIZE",
    help="Most inputs in one request on every route (413 beyond); /v1/embeddings takes "
    "--openai-max-inputs.",
)  # fmt: skip
OPENAI_INPUTS_OPTION = typer.Option(
    2048, min=1, help="Most inputs in one /v1/embeddings request (OpenAI's limit)."
)
CONCURRENT_OPTION = typer.Option(
    512, min=1, envvar="MAX_CONCURRENT_REQUESTS",
    help="Most requests computed or queued at once; one more is answered 429.",
)  # fmt: skip
BATCH_REQUESTS_OPTION = typer.Option(
    None, min=1, envvar="MAX_BATCH_REQUESTS", help="Most requests in one model call."
)
AUTO_TRUNCATE_OPTION = typer.Option(
    False, envvar="AUTO_TRUNCATE",
    help="Truncate long inputs of requests that do not say (else 413).",
)  # fmt: skip
POOLING_OPTION = typer.Option(
    None, envvar="POOLING", metavar="cls|mean|last-token",
    help="An embedding model's pooling, instead of its directory's.",
)  # fmt: skip
PROMPT_NAME_OPTION = typer.Option(
    None, envvar="DEFAULT_PROMPT_NAME",
    help="The model's prompt for requests that name none (embedding routes).",
)  # fmt: skip
PROMPT_OPTION = typer.Option(
    None, envvar="DEFAULT_PROMPT", help="A prompt text for requests that name none."
)
REVISION_OPTION = typer.Option(
    None, envvar="REVISION", help="The revision of a cached org/name model (never downloaded)."
)
JSON_OUTPUT_OPTION = typer.Option(
    False, envvar="JSON_OUTPUT", help="Log lines as JSON objects (one a line)."
)
ACCESS_LOG_OPTION = typer.Option(
    True, help="One log line per request on stdout (client, method, path, status)."
)
UDS_OPTION = typer.Option(
    None, envvar="UDS_PATH", help="Listen on this Unix socket instead of --host/--port."
)


ADAPTER_OPTION = typer.Option(
    None,
    "--adapter",
    metavar="[NAME=]DIR",
    help="A PEFT LoRA adapter directory merged into an embedding model's encoder "
    "(`finetune --lora`): DIR for the one --model, NAME=DIR for the served model NAME "
    "(required with several --model; repeat it for several models).",
)
INDEX_OPTION = typer.Option(
    None,
    "--index",
    metavar="[NAME=]DIR",
    help="An index built by `bertfamily index build` that POST /search searches (NAME=DIR "
    "names it; default its directory's name); repeat it for several, which /search fuses "
    "(indexes of the same documents). Each is checked at start-up against the served "
    "models: the one that built it encodes its queries (a bm25 index needs none).",
)


@commands.command()
@handle_errors
def serve(
    model: list[str] | None = MODEL_OPTION,
    host: str = HOST_OPTION,
    port: int = PORT_OPTION,
    max_batch_tokens: int = MAX_BATCH_TOKENS_OPTION,
    batch_size: int = BATCH_SIZE_OPTION,
    batching: bool = BATCHING_OPTION,
    max_client_batch_size: int = CLIENT_BATCH_OPTION,
    openai_max_inputs: int = OPENAI_INPUTS_OPTION,
    max_concurrent_requests: int = CONCURRENT_OPTION,
    max_batch_requests: int | None = BATCH_REQUESTS_OPTION,
    max_input_chars: int = typer.Option(100_000, min=1, help="Most characters in one input."),
    auto_truncate: bool = AUTO_TRUNCATE_OPTION,
    max_body_bytes: int | None = MAX_BODY_BYTES_OPTION,
    timeout_keep_alive: float = TIMEOUT_KEEP_ALIVE_OPTION,
    body_timeout: float = BODY_TIMEOUT_OPTION,
    max_connections_per_client: int = CONNECTIONS_OPTION,
    api_key: str | None = API_KEY_OPTION,
    dtype: str = DTYPE_OPTION,
    pooling: str | None = POOLING_OPTION,
    default_prompt_name: str | None = PROMPT_NAME_OPTION,
    default_prompt: str | None = PROMPT_OPTION,
    revision: str | None = REVISION_OPTION,
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
    json_output: bool = JSON_OUTPUT_OPTION,
    access_log: bool = ACCESS_LOG_OPTION,
    uds_path: str | None = UDS_OPTION,
    adapter: list[str] | None = ADAPTER_OPTION,
    index: list[str] | None = INDEX_OPTION,
):
    """Serve a model over HTTP: POST /embed, /v1/embeddings, /embed_all, /similarity,
    /embed_sparse, /rerank, /v1/rerank, /predict, /tokenize, /decode, / and /invocations
    (the model's kind); GET /health, /, /ping, /info, /v1/models, /metrics (Prometheus).
    Routes, JSON, flags and environment variables as Hugging Face's
    text-embeddings-inference; /v1/rerank as Jina's and Cohere's rerank APIs. Several
    --model: one server, each model with its own batcher (the flags apply to each). With
    --index: POST /search over persisted indexes (hybrid: fused)."""
    dtype = TEI_DTYPES.get(dtype, dtype)
    given = model or [os.environ.get("MODEL_ID") or None]
    _given_once(given)
    specs = [_model_spec(m) for m in given]
    if len(specs) > 1 and workers > 1:
        raise typer.BadParameter("--workers N serves one model; give one --model")
    if index and workers > 1:
        raise typer.BadParameter("--index is searched by one replica: leave out --workers")
    indexes = _index_dirs(index or [])  # every meta.json read before any model loads
    device = _checked_options(dtype, quantize, runtime, device)  # the serve extra too
    import uvicorn

    from ..serve.app import ServeSettings
    from ..serve.http import connection_limits
    from ..serve.logs import log_config

    settings = ServeSettings(
        max_batch_tokens=max_batch_tokens, batch_size=batch_size, batching=batching,
        max_client_batch_size=max_client_batch_size, max_input_chars=max_input_chars,
        auto_truncate=auto_truncate, max_body_bytes=max_body_bytes,
        timeout_keep_alive=timeout_keep_alive, api_key=api_key,
        model_id=_model_id(*specs[0]) if len(specs) == 1 else None,
        openai_max_inputs=openai_max_inputs, max_concurrent_requests=max_concurrent_requests,
        max_batch_requests=max_batch_requests, body_timeout=body_timeout,
        max_connections_per_client=max_connections_per_client,
        default_prompt_name=default_prompt_name, default_prompt=default_prompt,
    )  # fmt: skip
    paths = [_model_dir(where, revision) for _, where in specs]
    path = paths[0]
    names = _model_names(specs, paths)
    adapters = _adapters(adapter or [], names)
    err.print(_threads(threads, workers), soft_wrap=True, markup=False, highlight=False)
    where = dict(uds=uds_path) if uds_path else dict(host=host, port=port)
    run = dict(
        **where, log_level=None, log_config=log_config(json_output, access_log),
        access_log=access_log, timeout_graceful_shutdown=graceful_timeout,
    )  # fmt: skip
    run |= connection_limits(timeout_keep_alive, body_timeout, max_connections_per_client)
    options = dict(dtype=dtype, quantize=quantize, speed=speed, device=device, runtime=runtime,
                   pooling=pooling)  # fmt: skip
    if workers > 1:
        adapter_dir = adapters.get(names[0])
        _serve_replicas(path, settings, workers, run, threads=threads, adapter=adapter_dir,
                        **options)  # fmt: skip
        return
    app = _app(names, paths, adapters, indexes, settings, options)
    listing = (
        str(path) if len(paths) == 1 else ", ".join(f"{n} ({p})" for n, p in zip(names, paths))
    )
    err.print(f"serving {listing} on {_address(run)}", soft_wrap=True)
    uvicorn.run(app, **run)


def _app(names: list[str], paths: list[Path], adapters: dict, indexes: dict, settings, options):
    """The app of `serve.app.create_app` over the ``--model`` directories (each loaded by
    `_load` with its ``--adapter``) and the ``--index`` directories."""
    from ..serve.app import create_app

    if len(paths) == 1:
        served = _load(paths[0], **options, adapter=adapters.get(names[0]))
        return create_app(served, settings, model_dir=paths[0], indexes=indexes)
    models = {n: (_load(p, **options, adapter=adapters.get(n)), p) for n, p in zip(names, paths)}
    return create_app(models, settings, indexes=indexes)


def _model_spec(spec: str | None, option: str = "--model") -> tuple[str | None, str | None]:
    """A ``--model`` (``--index``, ``--adapter``) value as (its name, where the model is):
    ``NAME=DIR`` names it, unless the whole value is an existing path."""
    if spec is None or "=" not in spec or Path(spec).exists():
        return None, spec
    name, _, where = spec.partition("=")
    if not name.strip() or not where:
        raise typer.BadParameter(f"{option} {spec!r}: give NAME=DIR, DIR or NAME")
    return name, where


def _given_once(models: list[str | None]) -> None:
    """Refuse a ``--model`` value given twice (it would be served once, silently).

    Raises:
        typer.BadParameter: the value repeated.
    """
    twice = next((m for i, m in enumerate(models) if m in models[:i]), None)
    if twice is not None:
        raise typer.BadParameter(
            f"--model {twice} is given twice: serve each model once (two copies need two "
            "names, --model NAME=DIR)"
        )


def _index_dirs(values: list[str]) -> dict[str, Path]:
    """The ``--index [NAME=]DIR`` values as name → directory (default name: the directory's),
    each directory's ``meta.json`` read (`retrieval.read_index_meta`) before anything loads.

    Raises:
        typer.BadParameter: a value without a name or a directory, two indexes of one name.
        VectorIndexError: a directory that is not an index (missing, no or bad meta.json).
    """
    from ..errors import VectorIndexError
    from ..pipelines.retrieval import read_index_meta

    dirs: dict[str, Path] = {}
    for value in values:
        name, where = _model_spec(value, "--index")
        directory = Path(where)
        name = name or directory.resolve().name
        if name in dirs:
            raise typer.BadParameter(
                f"two indexes are named {name!r}: name them with --index NAME=DIR"
            )
        try:
            read_index_meta(directory)
        except VectorIndexError as e:
            raise VectorIndexError(f"--index {value}: {e}") from None
        dirs[name] = directory
    return dirs


def _adapters(values: list[str], names: list[str]) -> dict[str, Path]:
    """The ``--adapter [NAME=]DIR`` values as served model name → LoRA adapter directory: DIR
    alone is the one model's.

    Raises:
        typer.BadParameter: DIR alone with several models, a NAME not served, one model
            given two adapters.
    """
    chosen: dict[str, Path] = {}
    for value in values:
        name, where = _model_spec(value, "--adapter")
        if name is None and len(names) > 1:
            raise typer.BadParameter(
                f"--adapter {value}: several models are served ({', '.join(names)}): give "
                "--adapter NAME=DIR for the model it adapts"
            )
        name = names[0] if name is None else name
        if name not in names:
            raise typer.BadParameter(
                f"--adapter {value}: no served model is named {name!r}; the served models "
                f"are {', '.join(names)}"
            )
        if name in chosen:
            raise typer.BadParameter(f"--adapter: the model {name!r} is given two adapters")
        chosen[name] = Path(where)
    return chosen


def _model_id(name: str | None, where: str | None) -> str | None:
    """The served name of one ``--model``: its ``NAME=``, an org/name as given, else None
    (the directory's name)."""
    if name is not None:
        return name
    return where if where and not Path(where).exists() else None  # org/name


def _model_names(specs: list[tuple[str | None, str | None]], paths: list[Path]) -> list[str]:
    """The served names of several ``--model`` values (`_model_id`, else the directory's
    name).

    Raises:
        typer.BadParameter: two models of one name.
    """
    names = [_model_id(*spec) or p.name for spec, p in zip(specs, paths)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise typer.BadParameter(
            f"two models are named {', '.join(twice)}: give each --model a name of its own "
            "(--model NAME=DIR)"
        )
    return names


#: TEI's ``--dtype`` names and ours.
TEI_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


def _address(run: dict) -> str:
    """Where the server listens, for the start-up line."""
    return f"unix:{run['uds']}" if run.get("uds") else f"http://{run['host']}:{run['port']}"


def _model_dir(model: str | None, revision: str | None) -> Path:
    """The ``--model`` directory (`common.model_path`), or with ``--revision`` that revision
    of a cached org/name (`resources.resolve.resolve_model`, offline)."""
    if revision is None:
        return model_path(model)
    from ..resources.resolve import resolve_model

    return resolve_model(model, revision)


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


def _load(
    path: Path,
    dtype: str,
    quantize: str | None,
    speed,
    device: str,
    runtime: str,
    pooling: str | None = None,
    adapter: Path | None = None,
):
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
    options = dict(
        dtype=dtype, speed=speed, device=device, runtime=runtime, quantize=quantize,
        pooling=pooling, adapter=adapter,
    )  # fmt: skip
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
    import shutil
    import tempfile

    import uvicorn

    from ..inference.precision import resolve_dtype
    from ..serve.metrics import MULTIPROCESS_ENV
    from ..serve.replicas import ENV, replica_environment

    os.environ[ENV] = replica_environment(path, settings, processes=workers, **options)
    own_dir = not os.environ.get(MULTIPROCESS_ENV)
    if own_dir:  # the replicas' metrics add up in files here (prometheus_client multiprocess)
        os.environ[MULTIPROCESS_ENV] = tempfile.mkdtemp(prefix="bertfamily-metrics-")
    dtype, quantize, runtime = options["dtype"], options["quantize"], options["runtime"]
    if runtime == "torch":  # each replica loads it so (its /info says it too)
        name = "int8" if quantize else str(resolve_dtype(dtype, options["device"])[0])
        line = _dtype_line(name.removeprefix("torch."), dtype, options["device"], quantize, runtime)
        err.print(line + " in each replica", soft_wrap=True, markup=False, highlight=False)
    err.print(f"serving {path} on {_address(run)} ({workers} replicas)", soft_wrap=True)
    try:
        uvicorn.run(
            "bertfamily.serve.replicas:app_from_environment", factory=True, workers=workers, **run
        )
    finally:
        if own_dir:
            shutil.rmtree(os.environ.pop(MULTIPROCESS_ENV), ignore_errors=True)
