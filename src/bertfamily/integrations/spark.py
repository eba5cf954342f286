"""Bulk embedding on Spark: an iterator-of-Series pandas UDF (no pyspark dependency here).

`series_embedder` returns a plain function ``Iterator[pd.Series] -> Iterator[pd.Series]``
(annotated so that ``pyspark.sql.functions.pandas_udf`` recognises the iterator form). Spark
calls it once per partition, so the model is loaded once per task (and kept for the life of the
Python worker when ``spark.python.worker.reuse`` is on, Spark's default), then every Arrow batch
of the partition is embedded::

    from pyspark.sql.functions import pandas_udf
    from bertfamily.integrations.spark import series_embedder

    embed = pandas_udf(series_embedder("all-MiniLM-L6-v2"), "array<float>")
    df.withColumn("vector", embed("text")).select("id", "vector").write.parquet("vectors/")

Each output value is a list of float32 (one vector); a blank text gives an empty list (it holds
no document; filter blank rows out first to keep them out of the output).
"""

from collections.abc import Iterator
from typing import Any

__all__ = ["series_embedder"]

_MODELS: dict[tuple, Any] = {}  # one SentenceEmbedder per (model, dtype) and Python worker


def _embedder(model: str, dtype: str):
    key = (model, dtype)
    if key not in _MODELS:
        from ..pipelines.embedding.embed import SentenceEmbedder

        _MODELS[key] = SentenceEmbedder(model, dtype=dtype)
    return _MODELS[key]


def series_embedder(model: str, *, batch_size: int = 32, dtype: str = "auto"):
    """The pandas UDF body that embeds a text column (see the module docstring).

    Args:
        model: model directory, resource name or cached ``org/name`` (resolved on the worker).
        batch_size: texts per forward pass.
        dtype: run precision ("auto", "fp32", "bf16").

    Raises:
        MissingDependency: pandas is not installed (``pip install "bertfamily[spark]"``).
    """
    from ..runtime import require

    pd = require("pandas", "spark", "the Spark pandas UDF")

    def embed_series(batches: Iterator[pd.Series]) -> Iterator[pd.Series]:
        embedder = _embedder(model, dtype)
        for texts in batches:
            values = ["" if pd.isna(t) else str(t) for t in texts]  # None/NaN: no text
            keep = [i for i, t in enumerate(values) if t.strip()]
            vectors = embedder.encode([values[i] for i in keep], batch_size=batch_size)
            out: list = [[] for _ in values]
            for i, v in zip(keep, vectors):
                out[i] = v
            yield pd.Series(out, index=texts.index)

    # real objects, not strings: pandas_udf reads these with typing.get_type_hints
    embed_series.__annotations__ = {"batches": Iterator[pd.Series], "return": Iterator[pd.Series]}
    return embed_series
