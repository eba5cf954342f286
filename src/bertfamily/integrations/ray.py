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

`embed_dataset` (``bertfamily embed --engine ray``) runs that pipeline so that it never hangs:
its actors are sized from ``ray.cluster_resources()`` to leave a CPU to Ray Data's read tasks
(`plan_actors`; a setting that would starve them is refused before any job starts); each actor
writes its own shards (`WriteShards`) and hands the driver one small ``(file, rows)`` row per
batch, so a job with no finished batch for ``stall_timeout`` seconds stops with a
`DataEngineError` naming the stalled operator; the model identity is in every shard's Parquet
schema metadata (``bertfamily``, as in a single-file output), and ``_bertfamily.parquet``, an
empty table of the same schema, is written last, after every shard (a directory without it is
not a finished job): the directory holds only ``.parquet`` files, which polars, duckdb, pandas
and pyarrow read whole. The columns are checked
in the source's metadata and the rows counted from what was written. Rows are checked by the
rule of every table reader in bertfamily (`data.table_io.check_rows`: a null, non-string or
empty text, or a null id, is a bad row): `embed_dataset` first reads the id and text columns
through once (`check_dataset`) and refuses the input, counting every bad row and naming the
first three in input order, with the message of a local read, before any actor starts; an
`EmbedBatch` handed a bad row raises `DataError`, which stops the job (Ray retries a dead actor,
not an exception). Output rows keep their ids and, with ``with_text``, their text; ``vector`` is
a fixed-size list of float32, so `pipelines.index.VectorIndex.from_embeddings` (``bertfamily
index build --embeddings DIR``) reads the directory as it is."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..data.table_io import RowProblems, check_rows
from ..errors import DataEngineError, InputError
from ..runtime import require

__all__ = [
    "DEFAULT_STALL_TIMEOUT",
    "EmbedBatch",
    "WriteShards",
    "check_dataset",
    "embed_dataset",
    "plan_actors",
    "read_reserve",
]


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

        # the engine's thread policy (`ThreadPolicy`): N exactly, or
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


DEFAULT_STALL_TIMEOUT = 300.0  # seconds without a finished batch before a job is stopped
SHARD_PREFIX = "part-"  # the shards' names: part-<32 hex digits>.parquet
DONE_FILE = "_bertfamily.parquet"  # written last: no rows, the shards' schema and metadata


def read_reserve(cluster_cpus: float) -> float:
    """CPUs an embedding job leaves free for Ray Data's read tasks: one CPU, or half the
    cluster when it has fewer than two (the read tasks then ask for that fraction)."""
    return 1.0 if cluster_cpus >= 2 else cluster_cpus / 2


def plan_actors(
    cluster_cpus: float, concurrency: int | None = None, num_cpus: float | None = None
) -> tuple[int, float]:
    """The embedding actors of a job on a cluster of ``cluster_cpus`` CPUs: ``(concurrency,
    CPUs per actor)``, whose product leaves `read_reserve` CPUs free (actors holding every
    CPU starve Ray Data's read tasks, and the job waits forever).

    Left out, both are sized from the cluster: one actor per whole free CPU (2 CPUs: one
    actor of 1 CPU), or one actor of the free fraction on a cluster under 2 CPUs (1 CPU: one
    actor of 0.5 CPU). Given, ``concurrency`` alone gets ``min(1, free / concurrency)`` CPUs
    per actor, and ``num_cpus`` alone as many actors as fit.

    Raises:
        InputError: a setting that would starve the read tasks (or a cluster with no CPU),
            in one line: the cluster's CPUs, what was asked, a setting that works.
    """
    reserve = read_reserve(cluster_cpus)
    room = cluster_cpus - reserve
    if room <= 0:
        raise InputError(f"the Ray cluster reports {cluster_cpus:g} CPUs: nothing to embed on")
    fit_one = min(1.0, room)
    if concurrency is None and num_cpus is None:
        concurrency, num_cpus = max(1, int(room // fit_one)), fit_one
    elif num_cpus is None:
        num_cpus = min(1.0, room / concurrency)
    elif concurrency is None:
        concurrency = max(1, int(room // num_cpus))
    if concurrency * num_cpus > room + 1e-9:
        works = max(1, int(room // min(num_cpus, fit_one)))
        raise InputError(
            f"{concurrency} Ray actors × {num_cpus:g} CPUs (--concurrency × --actor-cpus) "
            f"leave {max(0.0, cluster_cpus - concurrency * num_cpus):g} of the cluster's "
            f"{cluster_cpus:g} CPUs for Ray Data's read tasks, which need {reserve:g}: the job "
            f"would wait forever; use --concurrency {works} --actor-cpus "
            f"{min(num_cpus, fit_one):g}, or leave both out to size them from the cluster"
        )
    return int(concurrency), float(num_cpus)


def _output_fs(output: str):
    """``(pyarrow filesystem, path)`` of a local directory or a URI (``s3://…``)."""
    from pyarrow import fs

    return fs.FileSystem.from_uri(output if "://" in output else str(Path(output).resolve()))


class WriteShards:
    """A Ray Data actor that embeds a batch with ``batch_class`` (`EmbedBatch` or a subclass)
    and writes it itself, as one Parquet shard ``part-<hex>.parquet`` of ``output``; it
    returns one small row per batch, ``(file, rows)``, so the driver sees every finished batch
    (the stall watchdog) and counts the rows from what was written. ``metadata`` (the model
    identity) goes into each shard's schema metadata under ``bertfamily``."""

    def __init__(
        self,
        output: str,
        batch_class: type,
        embed_kwargs: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.embed = batch_class(**embed_kwargs)
        self.fs, self.path = _output_fs(output)
        self.metadata = json.dumps(metadata).encode("utf-8") if metadata else None

    def __call__(self, batch):
        """A pyarrow batch of (id, text) rows in; ``(file, rows)`` of its shard out."""
        import uuid

        pa = require("pyarrow", "ray", "Ray Data batches")
        import pyarrow.parquet as pq

        table = self.embed(batch)
        if self.metadata is not None:
            table = table.replace_schema_metadata(
                {**(table.schema.metadata or {}), b"bertfamily": self.metadata}
            )
        name = f"{SHARD_PREFIX}{uuid.uuid4().hex}.parquet"
        pq.write_table(table, f"{self.path}/{name}", filesystem=self.fs)
        return pa.table({"file": [name], "rows": [table.num_rows]})


def _source_columns(ray, source: str, kind: str) -> list[str]:
    """The column names of a Parquet or JSONL source from its metadata (Parquet footers, the
    first block of a JSONL file), without reading its rows."""
    try:
        import pyarrow.dataset as pads

        return list(
            pads.dataset(source, format="parquet" if kind == "parquet" else "json").schema.names
        )
    except (ImportError, OSError, ValueError, TypeError):  # a filesystem pyarrow lacks: ask Ray
        reader = ray.data.read_json if kind == "jsonl" else ray.data.read_parquet
        return list(reader(source).schema().names)


def _read(ray, source: str, id_column: str, text_column: str, blocks: int | None, cpus: float):
    """A Ray Dataset of a Parquet or JSONL source (a file, a directory, or a URI), the id and
    text columns checked in its metadata; its read tasks ask for ``cpus`` when under 1."""
    if source.lower().endswith((".csv", ".tsv", ".tab", ".txt")):
        raise InputError(
            f"{source}: Ray input is Parquet or JSONL with an id and a text column; embed a "
            "text or CSV file with the local engine (bertfamily embed --input FILE --output "
            "FILE.parquet), or convert it to Parquet first"
        )
    kind = "jsonl" if source.lower().endswith((".jsonl", ".ndjson", ".json")) else "parquet"
    names = _source_columns(ray, source, kind)
    missing = [c for c in (id_column, text_column) if c not in names]
    if missing:
        raise InputError(
            f"{source}: no column(s) {missing} (columns: {names}); Ray reads the table in "
            "parallel pieces, so rows need an id column (--id-column) and a text column"
        )
    more: dict[str, Any] = {"override_num_blocks": blocks} if blocks else {}
    if cpus < 1:
        more["ray_remote_args"] = {"num_cpus": cpus}
    reader = ray.data.read_json if kind == "jsonl" else ray.data.read_parquet
    return reader(source, **more).select_columns([id_column, text_column])


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


def _executor_of(pipeline, before: set[int]):
    """The Ray Data executor running ``pipeline`` (a thread Ray started after ``before``), or
    None where this Ray version hides it."""
    import threading

    found = getattr(pipeline, "_current_executor", None)
    if found is not None:
        return found
    for thread in threading.enumerate():
        if type(thread).__name__ == "StreamingExecutor" and id(thread) not in before:
            return thread
    return None


def _operator_states(executor) -> tuple[str, str]:
    """``(the stalled operator, every operator's state)`` as Ray's executor reports them: the
    first operator in pipeline order that has not finished (best effort: Ray's private
    executor state, ``("", "")`` where this Ray version lays it out otherwise)."""
    stalled, states = "", []
    try:
        for op, state in (getattr(executor, "_topology", None) or {}).items():
            done = getattr(op, "has_completed", None) or op.completed
            if done():
                states.append(f"{op.name}: done")
                continue
            stalled = stalled or op.name
            info = op.get_actor_info() if hasattr(op, "get_actor_info") else None
            running = getattr(info, "running", 0) + getattr(info, "pending", 0)
            states.append(
                f"{op.name}: {op.num_active_tasks()} tasks submitted"
                + (f", {info.running} actors running, {info.pending} pending" if running else "")
                + f", {state.total_enqueued_input_blocks()} blocks waiting"
            )
    except Exception:  # noqa: BLE001 (private state of Ray's executor: best effort only)
        return stalled, "; ".join(states)
    return stalled, "; ".join(states)


def _stall_error(ray, executor, stall_timeout: float, rows: int, plan: str) -> DataEngineError:
    """The error of a job with no finished batch for ``stall_timeout`` seconds."""
    stalled, states = _operator_states(executor) if executor is not None else ("", "")
    stalled = f"operator {stalled}" if stalled else "the read or the embedding stage"
    total = ray.cluster_resources().get("CPU", 0.0)
    free = ray.available_resources().get("CPU", 0.0)
    return DataEngineError(
        f"Ray Data made no progress for {stall_timeout:g} s ({rows:,} rows written): "
        f"{stalled} is stalled ({states or 'operators not reported'}); Ray reports {free:g} of "
        f"{total:g} CPUs free with {plan}; nothing is kept (raise --stall-timeout for a slow "
        "model, or give the cluster more CPUs)"
    )


def _watched(ray, pipeline, stall_timeout: float, plan: str):
    """The ``(file, rows)`` reports of ``pipeline``, read on a thread; a gap of
    ``stall_timeout`` seconds between two of them stops Ray's executor and raises
    `DataEngineError` (the stall error); an error of the job is raised as it is."""
    import queue
    import threading

    reports: queue.Queue = queue.Queue()
    before = {id(t) for t in threading.enumerate()}

    def consume() -> None:
        try:
            for batch in pipeline.iter_batches(batch_size=None, batch_format="pyarrow"):
                reports.put(batch)
        except BaseException as e:  # noqa: BLE001 (handed to the caller's thread)
            reports.put(e)
            return
        reports.put(None)

    threading.Thread(target=consume, name="bertfamily-ray-reports", daemon=True).start()
    rows = 0
    while True:
        try:
            item = reports.get(timeout=stall_timeout)
        except queue.Empty:
            executor = _executor_of(pipeline, before)
            error = _stall_error(ray, executor, stall_timeout, rows, plan)
            if executor is not None:
                executor.shutdown(force=True)  # its actors and tasks end; CPUs come back
            raise error from None
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        rows += sum(item.column("rows").to_pylist())
        yield item


def _remove_shards(output: str, keep: set[str] = frozenset()) -> None:
    """Delete the ``part-*.parquet`` shards of ``output`` not in ``keep`` (a failed job's,
    or a dead actor's before Ray retried its batch)."""
    from pyarrow import fs as pafs

    fs, path = _output_fs(output)
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        name = info.base_name
        if name.startswith(SHARD_PREFIX) and name.endswith(".parquet") and name not in keep:
            fs.delete_file(info.path)


def embed_dataset(
    source: str,
    output: str,
    *,
    model: str,
    concurrency: int | None = None,
    batch_size: int = 32,
    rows_per_call: int = 1024,
    dtype: str = "auto",
    with_text: bool = False,
    id_column: str = "id",
    text_column: str = "text",
    num_cpus: float | None = None,
    blocks: int | None = None,
    runtime_env: dict[str, Any] | None = None,
    batch_class: type = EmbedBatch,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
) -> dict[str, Any]:
    """Read ``source`` with Ray Data, embed it with ``concurrency`` `EmbedBatch` actors, each
    writing its batches as Parquet shards ``part-<hex>.parquet`` (id, vector[, text]) to the
    directory ``output``, the model identity in each shard's schema metadata, and
    ``_bertfamily.parquet`` (no rows, the same schema) last, once every shard is written (only
    Parquet files: ``polars.read_parquet(output)`` and duckdb's ``read_parquet('output/*')``
    read it). Uses
    the running Ray instance, else ``ray.init()`` (which joins the cluster of ``RAY_ADDRESS``
    when it is set).

    The actors are sized from ``ray.cluster_resources()`` (`plan_actors`: they leave a CPU, or
    half of a smaller cluster, to Ray Data's read tasks). The id and text columns are checked
    in the source's metadata, then every row (`check_dataset`): a bad row refuses the input
    before any actor starts (the driver has loaded the model once, for its identity). A failed
    actor is restarted and its batch retried by Ray (Ray Data's defaults for actor pools); a
    shard it left is deleted at the end. The row count is the sum of the shards written.

    Args:
        concurrency: embedding actors (default: sized from the cluster).
        num_cpus: CPUs each actor reserves (default: sized from the cluster).
        blocks: read the source in this many blocks (``override_num_blocks``; default Ray's
            choice, which for one small file is one block, i.e. one busy actor).
        runtime_env: the actors' Ray runtime environment (environment variables, …).
        batch_class: `EmbedBatch` or a subclass.
        stall_timeout: seconds without a finished batch of ``rows_per_call`` rows after which
            the job is stopped (`DataEngineError`).

    Returns:
        ``{"rows", "files", "dimension", "model", "concurrency", "num_cpus"}`` of the job.

    Raises:
        MissingDependency: Ray is not installed (``pip install "bertfamily[ray]"``).
        InputError: an output directory that already holds files, a source without the id or
            text column, or actors that would starve the read tasks (`plan_actors`).
        DataError: bad rows (`check_dataset`); nothing is written.
        DataEngineError: no progress for ``stall_timeout`` seconds (the message names the
            stalled operator and the CPUs Ray reports), or a failure of Ray's; the shards
            written so far are deleted and no ``_bertfamily.parquet`` is written.
    """
    ray = require("ray", "ray", "bertfamily embed --engine ray")
    require("ray.data", "ray", "bertfamily embed --engine ray")
    from ..pipelines.embedding.embed import SentenceEmbedder
    from ..pipelines.retrieval.dense import model_identity

    if not stall_timeout > 0:
        raise InputError(
            f"the stall timeout must be a positive number of seconds, got {stall_timeout!r}"
        )
    out = Path(output) if "://" not in output else None
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--output {output} already exists and is not an empty directory")
    identity = model_identity(SentenceEmbedder(model, dtype="fp32"))  # fail fast, on the driver
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    cluster_cpus = float(ray.cluster_resources().get("CPU", 0.0))
    concurrency, num_cpus = plan_actors(cluster_cpus, concurrency, num_cpus)
    ds = _read(ray, source, id_column, text_column, blocks, read_reserve(cluster_cpus))
    check_dataset(ds, source, id_column=id_column, text_column=text_column)
    embed_kwargs = dict(
        model=model, id_column=id_column, text_column=text_column, batch_size=batch_size,
        dtype=dtype, with_text=with_text,
    )  # fmt: skip
    fs, path = _output_fs(output)
    fs.create_dir(path, recursive=True)
    pipeline = ds.map_batches(
        WriteShards,
        fn_constructor_kwargs={
            "output": output,
            "batch_class": batch_class,
            "embed_kwargs": embed_kwargs,
            "metadata": {"format_version": 1, "model": asdict(identity)},
        },
        batch_size=rows_per_call,
        batch_format="pyarrow",
        concurrency=concurrency,
        num_cpus=num_cpus,
        **({"runtime_env": runtime_env} if runtime_env else {}),
    )
    plan = f"{concurrency} embedding actors × {num_cpus:g} CPUs"
    files: dict[str, int] = {}
    try:
        for report in _watched(ray, pipeline, stall_timeout, plan):
            files.update(zip(report.column("file").to_pylist(), report.column("rows").to_pylist()))
    except BaseException:
        _remove_shards(output)  # nothing half-written is left looking like a result
        raise
    _remove_shards(output, keep=set(files))  # a dead actor's shard, written before its retry
    if files:  # last: the job is complete. An empty table of the shards' schema and metadata,
        # so readers of the directory (polars, duckdb: only .parquet files) add no rows
        import pyarrow.parquet as pq

        schema = pq.read_schema(f"{path}/{min(files)}", filesystem=fs)
        pq.write_table(schema.empty_table(), f"{path}/{DONE_FILE}", filesystem=fs)
    return {
        "rows": sum(files.values()),
        "files": len(files),
        "dimension": identity.dimension,
        "model": asdict(identity),
        "concurrency": concurrency,
        "num_cpus": num_cpus,
    }
