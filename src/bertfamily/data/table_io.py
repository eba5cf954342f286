"""Tables of (id, text) in and of (id, vector) out: plain text, JSONL and Parquet, streamed.

Reading (`iter_id_texts`, `read_id_texts`): the input's kind comes from its name (`table_kind`):

- ``.parquet`` (or a directory of ``*.parquet`` files, as Ray Data and Spark write them; files
  whose names start with ``_`` or ``.`` are skipped, as pyarrow does): columns ``id_column``
  and ``text_column``; without an id column a row's id is its 1-based row number (across the
  files, in name order);
- ``.jsonl`` / ``.ndjson``: one JSON object a line; a row without ``id_column`` has its 1-based
  line number as id;
- anything else is plain UTF-8 text, one document a line; a document's id is its 1-based line
  number.

Lines of a plain text file that are blank hold no document: they are skipped, never
embedded, and their ids (line numbers) are simply absent. A JSONL or Parquet row whose text is
null, not a string or empty is a data error: the file is refused, the bad rows counted and the
first named (skipping them silently would hide them). Reading is by batches of at most
``batch_rows`` rows, so memory never depends on the input's size.

Writing (`EmbeddingTableWriter`): a Parquet file of ``id``, ``vector`` (a fixed-size list of
float32, one per row) and optionally ``text``, appended batch by batch; the model identity
(a dict: digest, dimension, pooling, name) is stored in the schema metadata under
``bertfamily``. `iter_embedding_table` reads such a file, a directory of them (Ray Data's
output, where the identity is in ``_bertfamily.json``), or any Parquet with an id column and a
vector column (fixed-size list, list, or Ray's tensor extension type).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..deps import require
from ..errors import DataError

__all__ = [
    "IDENTITY_FILE",
    "EmbeddingTableWriter",
    "iter_embedding_table",
    "iter_id_texts",
    "read_id_texts",
    "table_identity",
    "table_kind",
    "vectors_of",
]

META_KEY = b"bertfamily"
IDENTITY_FILE = "_bertfamily.json"  # beside a directory of Parquet shards (skipped by readers)
FORMAT_VERSION = 1


def _pa():
    return require("pyarrow", "parquet", "Parquet tables")


def _pq():
    _pa()
    import pyarrow.parquet as pq

    return pq


def table_kind(path: str | os.PathLike[str]) -> str:
    """``"parquet"`` (a ``.parquet`` file or a directory), ``"jsonl"`` (``.jsonl``,
    ``.ndjson``) or ``"text"`` (anything else)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_dir() or suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    return "text"


def parquet_files(path: Path) -> list[Path]:
    """The Parquet files of ``path``: itself, or a directory's ``*.parquet`` in name order
    (names starting with ``_`` or ``.`` skipped).

    Raises:
        DataError: a missing path, or a directory without Parquet files.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DataError(f"cannot read {path}: it does not exist")
    files = sorted(
        p for p in path.rglob("*.parquet") if not p.name.startswith(("_", ".")) and p.is_file()
    )
    if not files:
        raise DataError(f"{path} is a directory with no .parquet files")
    return files


def _text(value: Any, where: str, column: str) -> str:
    """A table row's text: a string (or a number); a null, list, bool or empty text is refused
    (it is no document, and storing it as "None" or skipping it silently would renumber)."""
    if value is None:
        raise DataError(f"{where}: the text (column {column!r}) is null")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise DataError(f"{where}: the text (column {column!r}) must be a string, got {value!r}")
    text = str(value)
    if not text.strip():
        raise DataError(f"{where}: the text (column {column!r}) is empty")
    return text


def _text_rows(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with open(path, encoding="utf-8", newline=None) as fh:
            n = 0
            for n, line in enumerate(fh, 1):  # noqa: B007 (n names the failing line)
                yield n, line.strip()
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 after line {n}: {e}") from e
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from e


def _jsonl_rows(
    path: Path, id_column: str, text_column: str, problems: list[str]
) -> Iterator[tuple[Any, str]]:
    """The (id, text) of each JSONL row; a row with bad JSON, no text column or a null, list,
    bool or empty text is skipped and described in ``problems`` (the caller refuses the file)."""
    for n, line in _text_rows(path):
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"line {n}: not JSON ({e})")
            continue
        if not isinstance(row, dict) or text_column not in row:
            problems.append(f"line {n}: not a JSON object with {text_column!r}")
            continue
        text = row[text_column]
        if isinstance(text, bool) or not isinstance(text, (str, int, float)):
            what = "null" if text is None else f"a {type(text).__name__}"
            problems.append(f"line {n}: {text_column!r} is {what}, not a string")
            continue
        if not str(text).strip():
            problems.append(f"line {n}: {text_column!r} is empty")
            continue
        yield row.get(id_column, n), str(text)


def _parquet_batches(
    path: Path, id_column: str, text_column: str, batch_rows: int
) -> Iterator[tuple[list, list[str]]]:
    pq = _pq()
    row = 0
    for file in parquet_files(path):
        try:
            pf = pq.ParquetFile(file)
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError, …
            raise DataError(f"cannot read {file} as Parquet: {e}") from e
        names = pf.schema_arrow.names
        if text_column not in names:
            raise DataError(f"{file}: no column {text_column!r}; columns: {names}")
        columns = [text_column] + ([id_column] if id_column in names else [])
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            texts = batch.column(text_column).to_pylist()
            if id_column in names:
                ids = batch.column(id_column).to_pylist()
            else:
                ids = list(range(row + 1, row + 1 + len(texts)))
            row += len(texts)
            yield ids, [_text(t, f"{file} (row id {i!r})", text_column) for i, t in zip(ids, texts)]


def iter_id_texts(
    path: str | os.PathLike[str],
    *,
    id_column: str = "id",
    text_column: str = "text",
    batch_rows: int = 10_000,
) -> Iterator[tuple[list[Any], list[str]]]:
    """``(ids, texts)`` batches of at most ``batch_rows`` rows of a text, JSONL or Parquet
    input (see the module docstring); blank lines of a text file are skipped.

    Raises:
        DataError: a missing or unreadable input, bytes that are not UTF-8, a JSONL line that
            is not an object with the text column, a Parquet input without the text column, or
            a text that is not a string or number. Messages name the file and the line or id.
    """
    path = Path(path)
    kind = table_kind(path)
    if kind != "parquet" and not path.is_file():
        why = "it is a directory" if path.is_dir() else "it does not exist"
        raise DataError(f"cannot read input file {path}: {why}")
    if kind == "parquet":
        for ids, texts in _parquet_batches(path, id_column, text_column, batch_rows):
            kept = [(i, t) for i, t in zip(ids, texts) if t.strip()]
            if kept:
                yield [i for i, _ in kept], [t for _, t in kept]
        return
    problems: list[str] = []
    if kind == "jsonl":
        rows = _jsonl_rows(path, id_column, text_column, problems)
    else:
        rows = _text_rows(path)
    ids: list[Any] = []
    texts: list[str] = []
    for i, t in rows:
        if not t.strip():
            continue
        ids.append(i)
        texts.append(t)
        if len(texts) == batch_rows:
            yield ids, texts
            ids, texts = [], []
    if problems:  # every bad row counted, the first three named; the writers write nothing
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise DataError(
            f"{path}: {len(problems)} rows cannot be embedded or indexed: "
            f"{'; '.join(problems[:3])}{more}; nothing was written"
        )
    if texts:
        yield ids, texts


def read_id_texts(
    path: str | os.PathLike[str], *, id_column: str = "id", text_column: str = "text"
) -> tuple[list[Any], list[str]]:
    """All ``(ids, texts)`` of `iter_id_texts`, in input order.

    Raises:
        DataError: see `iter_id_texts`; also an input with no text at all.
    """
    ids: list[Any] = []
    texts: list[str] = []
    for i, t in iter_id_texts(path, id_column=id_column, text_column=text_column):
        ids.extend(i)
        texts.extend(t)
    if not texts:
        raise DataError(f"{path} holds no text (every row is blank)")
    return ids, texts


# --- (id, vector) Parquet -------------------------------------------------------------------
def _id_type(ids: list[Any]):
    pa = _pa()
    if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return pa.int64()
    if all(isinstance(i, str) for i in ids):
        return pa.string()
    raise DataError(f"ids must be all integers or all strings, got {ids[:5]!r}")


class EmbeddingTableWriter:
    """Append (id, vector[, text]) batches to one Parquet file (see the module docstring).

    Use as a context manager around an open ``path`` (write to a temporary path and rename it
    for an atomic file); the id type (int64 or string) is fixed by the first batch.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dimension: int,
        identity: dict[str, Any] | None = None,
        with_text: bool = False,
    ) -> None:
        self.path = Path(path)
        self.dimension = dimension
        self.identity = identity
        self.with_text = with_text
        self.rows = 0
        self._writer = None

    def _schema(self, ids: list[Any]):
        pa = _pa()
        fields = [pa.field("id", _id_type(ids), nullable=False)]
        if self.with_text:
            fields.append(pa.field("text", pa.string()))
        fields.append(pa.field("vector", pa.list_(pa.float32(), self.dimension)))
        meta = {"format_version": FORMAT_VERSION, "model": self.identity}
        return pa.schema(fields, metadata={META_KEY: json.dumps(meta).encode()})

    def write(self, ids: list[Any], vectors: np.ndarray, texts: list[str] | None = None) -> None:
        """Append one batch: N ids, (N, dimension) vectors, N texts when ``with_text``."""
        pa = _pa()
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(ids), self.dimension):
            raise DataError(f"{len(ids)} ids but vectors of shape {vectors.shape}")
        if self._writer is None:
            self._writer = _pq().ParquetWriter(self.path, self._schema(ids))
        schema = self._writer.schema
        columns = [pa.array(ids, type=schema.field("id").type)]
        if self.with_text:
            columns.append(pa.array(list(texts or []), type=pa.string()))
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        columns.append(pa.FixedSizeListArray.from_arrays(flat, self.dimension))
        self._writer.write_table(pa.Table.from_arrays(columns, schema=schema))
        self.rows += len(ids)

    def close(self) -> None:
        """Finish the file (an empty table when nothing was written)."""
        if self._writer is None:
            self._writer = _pq().ParquetWriter(self.path, self._schema([]))
        self._writer.close()

    def __enter__(self) -> EmbeddingTableWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def vectors_of(column) -> np.ndarray:
    """A (N, dimension) float32 array of an Arrow column of vectors: fixed-size list, list,
    large list, or an extension type over one of them (Ray's tensor type).

    Raises:
        DataError: rows of different lengths, or a column that is not a list of numbers.
    """
    pa = _pa()
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.ExtensionArray):
        column = column.storage
    n = len(column)
    try:
        flat = column.flatten().to_numpy(zero_copy_only=False)
    except (AttributeError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise DataError(f"the vector column is not a list of numbers ({column.type})") from e
    if n == 0:
        return np.zeros((0, 0), np.float32)
    if flat.size % n:
        raise DataError(f"vectors of different lengths ({flat.size} values in {n} rows)")
    return flat.astype(np.float32, copy=False).reshape(n, flat.size // n)


def table_identity(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The model identity stored with an embedding table: a directory's ``_bertfamily.json``,
    or the first file's Parquet schema metadata; None when there is none.

    Raises:
        DataError: the identity is unreadable or not ``{digest, dimension, pooling[, name]}``
            (naming the file).
    """
    path = Path(path)
    if path.is_dir() and (path / IDENTITY_FILE).is_file():
        source = path / IDENTITY_FILE
        try:
            body = json.loads(source.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as e:
            raise DataError(f"cannot read {source}: {e}") from e
    else:
        source = parquet_files(path)[0]
        meta = _pq().ParquetFile(source).schema_arrow.metadata or {}
        if META_KEY not in meta:
            return None
        try:
            body = json.loads(meta[META_KEY])
        except (ValueError, RecursionError) as e:
            raise DataError(f"{source}: unreadable {META_KEY.decode()} metadata: {e}") from e
    model = body.get("model") if isinstance(body, dict) else None
    if not (
        isinstance(model, dict)
        and not set(model) - {"digest", "dimension", "pooling", "name"}
        and isinstance(model.get("digest"), str)
        and isinstance(model.get("dimension"), int)
        and not isinstance(model.get("dimension"), bool)
        and model["dimension"] >= 1
        and isinstance(model.get("pooling"), str)
        and isinstance(model.get("name", ""), str)
    ):
        raise DataError(
            f"{source}: the recorded model identity {str(model)[:80]!r} is not "
            "{digest, dimension, pooling}; the table was edited or is corrupt"
        )
    return model


def iter_embedding_table(
    path: str | os.PathLike[str],
    *,
    id_column: str = "id",
    vector_column: str = "vector",
    text_column: str = "text",
    batch_rows: int = 10_000,
) -> Iterator[tuple[list[Any], np.ndarray, list[str] | None]]:
    """``(ids, vectors, texts or None)`` batches of a Parquet embedding table (a file or a
    directory of shards), in file-name order.

    Raises:
        DataError: no Parquet files, or a file without the id or vector column.
    """
    pq = _pq()
    for file in parquet_files(Path(path)):
        pf = pq.ParquetFile(file)
        names = pf.schema_arrow.names
        missing = [c for c in (id_column, vector_column) if c not in names]
        if missing:
            raise DataError(f"{file}: no column(s) {missing}; columns: {names}")
        columns = [id_column, vector_column] + ([text_column] if text_column in names else [])
        for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
            texts = batch.column(text_column).to_pylist() if text_column in names else None
            yield (
                batch.column(id_column).to_pylist(),
                vectors_of(batch.column(vector_column)),
                texts,
            )
