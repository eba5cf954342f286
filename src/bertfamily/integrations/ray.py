"""Bulk embedding on Ray Data: `EmbedBatch`, a callable class for ``Dataset.map_batches``.

Ray Data creates ``concurrency`` actors of `EmbedBatch`; each loads the model once, in its
constructor, and then embeds every batch of rows it is handed. Reading (Parquet, JSONL, local
or ``s3://``), scheduling, retries of a failed actor and streaming writes are Ray's; nothing of
that is ours::

    import ray
    from bertfamily.integrations.ray import EmbedBatch

    ds = ray.data.read_parquet("s3://bucket/texts/")  # columns: id, text
    ds = ds.map_batches(
        EmbedBatch,
        fn_constructor_kwargs={"model": "all-MiniLM-L6-v2"},
        batch_size=1024,
        batch_format="pyarrow",
        concurrency=4,
    )
    ds.write_parquet("s3://bucket/vectors/")  # columns: id, vector

`embed_dataset` is that pipeline (``bertfamily embed --engine ray``). Rows are checked by the
rule of every table reader in bertfamily (`data.table_io.check_rows`: a null, non-string or
empty text, or a null id, is a bad row): `embed_dataset` first reads the id and text columns
through once (`check_dataset`) and refuses the input, counting every bad row and naming the
first three in input order, with the message of a local read, before any actor starts; an
`EmbedBatch` handed a bad row raises `DataError`, which stops the job (Ray retries a dead actor,
not an exception). Output rows keep their ids and, with ``with_text``, their text; ``vector``
is a fixed-size list of float32, so `pipelines.index.VectorIndex.from_embeddings`
(``bertfamily index build --embeddings DIR``) reads the directory as it is.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..data.table_io import RowProblems, check_rows
from ..errors import InputError
from ..runtime import require

__all__ = ["EmbedBatch", "check_dataset", "embed_dataset"]


class EmbedBatch:
    """Embed a batch of rows: a ``pyarrow.Table``, a ``pandas.DataFrame`` or a dict of numpy
    columns (Ray's ``batch_format`` "pyarrow", "pandas", "numpy") holding ``id_column`` and
    ``text_column``; returns the same kind of batch with ``id``, ``vector`` (and ``text`` with
    ``with_text``), one row per input row.

    Args:
        model: model directory, resource name or cached ``org/name`` (resolved on each actor).
        batch_size: texts per forward pass (Ray's ``batch_size`` is rows per call).
        dtype: run precision, as `SentenceEmbedder` takes it ("auto" = fp32, "fp32", "bf16",
            "fastest").
        threads: torch intra-op threads of this actor while it embeds (default: as Ray sets
            them, the actor's CPUs; the engine's thread policy, `inference.threads`).
    """

    def __init__(
        self,
        model: str,
        *,
        id_column: str = "id",
        text_column: str = "text",
        batch_size: int = 32,
        dtype: str = "auto",
        with_text: bool = False,
        threads: int | None = None,
    ) -> None:
        from ..pipelines.embedding.embed import SentenceEmbedder

        # the engine's thread policy (`inference.threads.ThreadPolicy`): N exactly, or
        # automatic (Ray sets OMP_NUM_THREADS to the actor's CPUs, which then decides)
        self.embedder = SentenceEmbedder(model, dtype=dtype, threads=threads or 0)
        self.id_column, self.text_column = id_column, text_column
        self.batch_size, self.with_text = batch_size, with_text

    def embed(self, ids: list[Any], texts: list[Any]) -> tuple[list[Any], list[str], np.ndarray]:
        """``(ids, texts as str, (N, dimension) float32 vectors)`` of a batch of rows.

        Raises:
            DataError: a bad row (`data.table_io.check_rows`), counted and named as a local
                read does; Ray stops the job (run `check_dataset` first to refuse the whole
                input before any work, as `embed_dataset` does).
        """
        ids, texts, bad = check_rows(ids, texts, self.id_column, self.text_column)
        if bad:
            problems = RowProblems()
            problems.add(bad)
            problems.check(f"a batch of {len(ids) + len(bad)} rows", "the job stops")
        return ids, texts, self.embedder.encode(texts, batch_size=self.batch_size)

    def __call__(self, batch):
        """One Ray Data batch in, one out (see the class docstring)."""
        kind = type(batch).__module__.split(".")[0]
        if kind == "pyarrow":
            pa = require("pyarrow", "ray", "Ray Data batches")
            self._check(batch.column_names)
            ids, texts, vectors = self.embed(
                batch.column(self.id_column).to_pylist(), batch.column(self.text_column).to_pylist()
            )
            id_type = batch.schema.field(self.id_column).type
            columns = {"id": pa.array(ids, type=id_type)}
            if self.with_text:
                columns["text"] = pa.array(texts, type=pa.string())
            flat = pa.array(vectors.reshape(-1), type=pa.float32())
            columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, self.embedder.dimension)
            return pa.table(columns)
        if kind == "pandas":
            import pandas as pd

            self._check(list(batch.columns))
            ids, texts, vectors = self.embed(
                batch[self.id_column].tolist(), batch[self.text_column].tolist()
            )
            out = {
                "id": ids,
                **({"text": texts} if self.with_text else {}),
                "vector": list(vectors),
            }
            return pd.DataFrame(out)
        self._check(list(batch))
        ids, texts, vectors = self.embed(list(batch[self.id_column]), list(batch[self.text_column]))
        out = {"id": np.asarray(ids)}
        if self.with_text:
            out["text"] = np.asarray(texts, dtype=object)
        out["vector"] = vectors
        return out

    def _check(self, names: list[str]) -> None:
        missing = [c for c in (self.id_column, self.text_column) if c not in names]
        if missing:
            raise InputError(f"the rows have no column(s) {missing}; columns: {names}")


def _read(ray, source: str, id_column: str, text_column: str, blocks: int | None):
    """A Ray Dataset of a Parquet or JSONL source (a file, a directory, or a URI)."""
    if source.lower().endswith((".csv", ".tsv", ".tab", ".txt")):
        raise InputError(
            f"{source}: Ray input is Parquet or JSONL with an id and a text column; embed a "
            "text or CSV file with the local engine (bertfamily embed --input FILE --output "
            "FILE.parquet), or convert it to Parquet first"
        )
    kind = "jsonl" if source.lower().endswith((".jsonl", ".ndjson", ".json")) else "parquet"
    more = {"override_num_blocks": blocks} if blocks else {}
    if kind == "jsonl":
        ds = ray.data.read_json(source, **more)
    else:
        ds = ray.data.read_parquet(source, **more)
    names = ds.schema().names
    missing = [c for c in (id_column, text_column) if c not in names]
    if missing:
        raise InputError(
            f"{source}: no column(s) {missing} (columns: {names}); Ray reads the table in "
            "parallel pieces, so rows need an id column (--id-column) and a text column"
        )
    return ds.select_columns([id_column, text_column])


def _batch_problems(batch, id_column: str, text_column: str):
    """One row per Ray batch: its count of bad rows and the first few described."""
    pa = require("pyarrow", "ray", "Ray Data batches")
    _, _, bad = check_rows(
        batch.column(id_column).to_pylist(),
        batch.column(text_column).to_pylist(),
        id_column,
        text_column,
    )
    problems = RowProblems()
    problems.add(bad)
    return pa.table({"count": [problems.count], "named": [problems.named]})


def check_dataset(ds, source: str, *, id_column: str = "id", text_column: str = "text") -> None:
    """Read the id and text columns of a Ray Dataset through once (Ray tasks, in parallel;
    one small row comes back per batch) and refuse it when a row is bad, with the message of
    a local read (`data.table_io.RowProblems`): every bad row counted, the first three named
    in input order (the check runs with Ray Data's ``preserve_order``).

    Args:
        ds: a Ray Dataset with ``id_column`` and ``text_column``.
        source: what the message names (the input's path or URI).

    Raises:
        DataError: bad rows (`data.table_io.check_rows`).
    """
    ray = require("ray", "ray", "bertfamily embed --engine ray")
    # a Dataset runs under the context it was made with (older Ray: the current one)
    context = getattr(ds, "context", None) or ray.data.DataContext.get_current()
    before = context.execution_options.preserve_order
    context.execution_options.preserve_order = True  # the order of the named rows
    try:
        found = ds.select_columns([id_column, text_column]).map_batches(
            _batch_problems,
            fn_kwargs={"id_column": id_column, "text_column": text_column},
            batch_format="pyarrow",
            batch_size=None,  # one call per block
        )
        rows = found.take_all()
    finally:
        context.execution_options.preserve_order = before
    problems = RowProblems()
    for row in rows:
        problems.add(list(row["named"]), int(row["count"]))
    problems.check(source)


def embed_dataset(
    source: str,
    output: str,
    *,
    model: str,
    concurrency: int = 2,
    batch_size: int = 32,
    rows_per_call: int = 1024,
    dtype: str = "auto",
    with_text: bool = False,
    id_column: str = "id",
    text_column: str = "text",
    num_cpus: float = 1,
    blocks: int | None = None,
    runtime_env: dict[str, Any] | None = None,
    batch_class: type = EmbedBatch,
) -> dict[str, Any]:
    """Read ``source`` with Ray Data, embed it with ``concurrency`` `EmbedBatch` actors and
    write Parquet shards (id, vector[, text]) to the directory ``output``, with the model
    identity in ``output/_bertfamily.json``. Uses the running Ray instance, else
    ``ray.init()`` (which joins the cluster of ``RAY_ADDRESS`` when it is set).

    The id and text columns are checked first (`check_dataset`): a bad row refuses the input
    before any actor starts (the driver has loaded the model once, for its identity). A failed
    actor is restarted and its batch retried by Ray (Ray Data's defaults for actor pools:
    ``max_restarts=-1``, ``max_task_retries=-1``); nothing of that is ours.

    Args:
        num_cpus: CPUs each actor reserves; leave some of the cluster's free for Ray's read and
            write tasks (actors holding every CPU starve them and the run stalls).
        blocks: read the source in this many blocks (``override_num_blocks``; default Ray's
            choice, which for one small file is one block, i.e. one busy actor).
        runtime_env: the actors' Ray runtime environment (environment variables, …).
        batch_class: `EmbedBatch` or a subclass.

    Returns:
        ``{"rows", "files", "dimension", "model"}`` of the written shards.

    Raises:
        MissingDependency: Ray is not installed (``pip install "bertfamily[ray]"``).
        InputError: an output directory that already holds files, or a source without the id
            or text column.
        DataError: bad rows (`check_dataset`); nothing is written.
    """
    ray = require("ray", "ray", "bertfamily embed --engine ray")
    require("ray.data", "ray", "bertfamily embed --engine ray")
    from ..data.table_io import IDENTITY_FILE, parquet_files
    from ..pipelines.embedding.embed import SentenceEmbedder
    from ..pipelines.retrieval.dense import model_identity

    out = Path(output) if "://" not in output else None
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--output {output} already exists and is not an empty directory")
    identity = model_identity(SentenceEmbedder(model, dtype="fp32"))  # fail fast, on the driver
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    remote = {"runtime_env": runtime_env} if runtime_env else {}
    ds = _read(ray, source, id_column, text_column, blocks)
    check_dataset(ds, source, id_column=id_column, text_column=text_column)
    ds = ds.map_batches(
        batch_class,
        fn_constructor_kwargs=dict(
            model=model,
            id_column=id_column,
            text_column=text_column,
            batch_size=batch_size,
            dtype=dtype,
            with_text=with_text,
        ),
        batch_size=rows_per_call,
        batch_format="pyarrow",
        concurrency=concurrency,
        num_cpus=num_cpus,
        **remote,
    )
    ds.write_parquet(output)
    result: dict[str, Any] = {"dimension": identity.dimension, "model": asdict(identity)}
    if out is not None:
        body = {"format_version": 1, "model": asdict(identity)}
        (out / IDENTITY_FILE).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        import pyarrow.parquet as pq

        files = parquet_files(out)
        result["files"] = len(files)
        result["rows"] = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    else:  # a URI: the identity file is the caller's to place; count from what Ray wrote
        result["files"] = None
        result["rows"] = ray.data.read_parquet(output).count()
    return result
