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
    adaptive_max_threads: int = 0,
    device: str = "cpu",
    speed: float | None = None,
    runtime: str = "torch",
) -> str:
    """The ``BERTFAMILY_SERVE_REPLICA`` value describing one replica (JSON): what
    `app_from_environment` needs to build the app ``bertfamily serve`` would build (the model,
    its settings, dtype, int8 plan, threads, and a FastBERT classifier's default speed).
    ``adaptive_max_threads`` > 0: each replica's threads follow the load
    (`runtime.AdaptiveThreads`), at most that many."""
    body = {
        "model_dir": str(model_dir),
        "settings": asdict(settings),
        "dtype": dtype,
        "quantize": quantize,
        "threads": threads,
        "adaptive_max_threads": adaptive_max_threads,
        "device": device,
        "speed": speed,
        "runtime": runtime,
    }
    return json.dumps(body)


def app_from_environment():
    """The FastAPI app of one replica, as ``BERTFAMILY_SERVE_REPLICA`` describes it (uvicorn's
    ``--factory`` entry point: ``bertfamily.serve.replicas:app_from_environment``).

    Raises:
        KeyError: the variable is not set.
    """
    body = json.loads(os.environ[ENV])
    if body.get("threads"):
        import torch

        torch.set_num_threads(body["threads"])
        if body.get("adaptive_max_threads"):
            from ..runtime import AdaptiveThreads

            AdaptiveThreads(body["adaptive_max_threads"], threads=body["threads"]).start()
    path = Path(body["model_dir"])
    device = body.get("device", "cpu")
    if body.get("quantize"):
        served = load_served_model(
            path,
            quantize=body["quantize"],
            device=device,
            runtime=body.get("runtime", "torch"),
            dtype=body.get("dtype", "auto"),
        )
    else:
        served = load_served_model(
            path,
            dtype=body.get("dtype", "auto"),
            speed=body.get("speed"),
            device=device,
            runtime=body.get("runtime", "torch"),
        )
    app = create_app(served, ServeSettings(**body["settings"]), model_dir=path)
    replica = str(os.getpid())

    @app.middleware("http")
    async def name_the_replica(request, call_next):
        response = await call_next(request)
        response.headers["X-Replica"] = replica
        return response

    return app
