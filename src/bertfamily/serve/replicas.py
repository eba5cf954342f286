"""N replicas of the server behind one endpoint (`bertfamily serve --workers N`).

uvicorn's multi-worker mode binds the address once and starts N processes that accept on it;
the kernel spreads connections among them. Each worker builds its own app with
`app_from_environment` (uvicorn imports the factory by name, so its settings travel in the
environment variable ``BERTFAMILY_SERVE_REPLICA``, never on the command line): it loads the
model once and batches its own requests (`serve.batcher`). Every response carries an
``X-Replica`` header (the worker's process id) to show which replica answered. A worker that
dies is replaced by uvicorn's supervisor.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from ..runtime import apply_threads
from .app import ServeSettings, create_app, load_served_model

__all__ = ["ENV", "app_from_environment", "replica_environment"]

ENV = "BERTFAMILY_SERVE_REPLICA"


def replica_environment(
    model_dir: str | Path,
    settings: ServeSettings,
    *,
    dtype: str = "auto",
    quantize: str | None = None,
    threads: int = 0,
    processes: int = 1,
    device: str = "cpu",
    speed: float | None = None,
    runtime: str = "torch",
    pooling: str | None = None,
    adapter: str | Path | None = None,
) -> str:
    """The ``BERTFAMILY_SERVE_REPLICA`` value describing one replica (JSON): what
    `app_from_environment` needs to build the app ``bertfamily serve`` would build (the model,
    its settings, dtype, int8 plan, a FastBERT classifier's default speed) and its threads:
    ``threads`` as ``--threads`` gave it (0 = automatic) and the ``processes`` (replicas) the
    free cores are shared among (`runtime.apply_threads`)."""
    body = {
        "model_dir": str(model_dir),
        "adapter": None if adapter is None else str(adapter),
        "settings": asdict(settings),
        "dtype": dtype,
        "quantize": quantize,
        "threads": threads,
        "processes": processes,
        "device": device,
        "speed": speed,
        "runtime": runtime,
        "pooling": pooling,
    }
    return json.dumps(body)


def app_from_environment():
    """The FastAPI app of one replica, as ``BERTFAMILY_SERVE_REPLICA`` describes it (uvicorn's
    ``--factory`` entry point: ``bertfamily.serve.replicas:app_from_environment``). Its threads
    follow the one thread policy (`runtime.apply_threads`): ``--threads`` when given (or
    ``OMP_NUM_THREADS``), else its share of the free cores, kept there while it serves.

    Raises:
        KeyError: the variable is not set.
    """
    body = json.loads(os.environ[ENV])
    apply_threads(body.get("threads", 0), body.get("processes", 1))
    path = Path(body["model_dir"])
    served = load_served_model(
        path,
        dtype=body.get("dtype", "auto"),
        quantize=body.get("quantize"),
        speed=body.get("speed"),
        device=body.get("device", "cpu"),
        runtime=body.get("runtime", "torch"),
        pooling=body.get("pooling"),
        adapter=body.get("adapter"),
    )
    app = create_app(served, ServeSettings(**body["settings"]), model_dir=path)
    replica = str(os.getpid())

    @app.middleware("http")
    async def name_the_replica(request, call_next):
        response = await call_next(request)
        response.headers["X-Replica"] = replica
        return response

    return app
