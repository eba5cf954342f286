"""Serving a model over HTTP (`bertfamily serve`): the FastAPI app (`app`) and its dynamic
batcher (`batcher`). Needs the ``serve`` extra (fastapi, uvicorn, prometheus-client)."""
