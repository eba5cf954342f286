"""Serving a model over HTTP (`bertfamily serve`). Needs the ``serve`` extra (fastapi, uvicorn,
prometheus-client).

- `app`: `create_app` (assembles the app) and `load_served_model`.
- `settings`: `ServeSettings`, the limits and options.
- `admission`: the request checks (limits, shapes), plain Python, each a `ServeError`.
- `adapters`: one adapter per kind of model (embedding, sparse, reranker, classifier,
  early exit, tagger): loading, tokenizing once, the model calls, /info.
- `state`: what the routes share; `batcher`: the dynamic batcher.
- `routes/`: the routes by kind; `errors`: the JSON error answers; `http`: connection and body
  limits; `metrics`: Prometheus; `wire`: the request bodies; `replicas`: ``--workers N``.
"""
