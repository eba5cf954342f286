"""Tables of (id, text) in and of (id, vector) out: plain text, CSV/TSV, JSONL and Parquet.

Reading (`iter_id_texts`, `read_id_texts`): the input's kind comes from its name (`table_kind`):

- ``.parquet`` (or a directory of ``*.parquet`` files, as Ray Data and Spark write them; files
  whose names start with ``_`` or ``.`` are skipped, as pyarrow does): columns ``id_column``
  and ``text_column``; without an id column a row's id is its 1-based row number (across the
  files, in name order);
- ``.jsonl`` / ``.ndjson``: one JSON object a line; a row without ``id_column`` has its 1-based
  line number as id;
- ``.csv`` / ``.tsv`` (``.tab``): a header row, then one row per document (RFC 4180 quoting,
  `tables`); without an ``id_column`` in the header a row's id is the line it starts on
  (read whole, not streamed);
- anything else is plain UTF-8 text, one document a line; a document's id is its 1-based line
  number.

Lines end at ``\n`` only (``\r\n`` too), as ``wc -l``, ``sed -n Np`` and an editor's line
numbers count them: a lone ``\r``, U+2028 or a form feed stays inside its line
(`tables.iter_lines`), so an id names the line the user sees.

Lines of a plain text file that are blank hold no document: they are skipped, never
embedded, and their ids (line numbers) are simply absent. A table row (JSONL, Parquet) is
checked by one rule, the same for every reader of tables here and for Ray Data
(`integrations.ray`): a text that is null (or NaN), not a string or number, or empty (only
whitespace) is a data error, and so is a null id. The input is refused with one message
(`RowProblems`) that counts every bad row and names the first three, and nothing is written
(skipping them silently would hide them; storing them would embed "None"). Reading is by
batches of at most ``batch_rows`` rows, so memory never depends on the input's size.

Writing (`EmbeddingTableWriter`): a Parquet file of ``id``, ``vector`` (a fixed-size list of
float32, one per row), optionally ``text``, and optionally a quantized copy of the vectors
(``vector_int8``, ``vector_uint8``, ``vector_binary``, ``vector_ubinary``) or, for a SPLADE
model, ``sparse_indices`` and ``sparse_values`` instead of ``vector``; appended batch by batch.
The model identity (a dict: digest, dimension, pooling, name), the kind (dense or sparse) and
the quantization (precision, column, int8 ranges) are stored in the schema metadata under
``bertfamily`` (`table_metadata`). `iter_embedding_table` reads such a file, a directory of
them (Ray Data's output: each shard carries the metadata; an older one's ``_bertfamily.json``
beside them is still read), or any Parquet with an
id column and a vector column (fixed-size list, list, or Ray's tensor extension type);
`iter_sparse_table` reads the sparse columns.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from ..files import read_json
from ..runtime import require
from .tables import _table_rows, iter_lines, read_text
from .text_input import check_input_file

__all__ = [
    "IDENTITY_FILE",
    "EmbeddingTableWriter",
    "RowProblems",
    "check_rows",
    "check_table",
    "iter_embedding_table",
    "iter_id_texts",
    "iter_sparse_table",
    "quantized_width",
    "read_id_texts",
    "table_identity",
    "table_metadata",
    "table_kind",
    "text_problem",
    "vectors_of",
]

META_KEY = b"bertfamily"
# an older Ray output's sidecar (read if present; shards now carry the identity themselves)
IDENTITY_FILE = "_bertfamily.json"
FORMAT_VERSION = 1


def _pa():
    return require("pyarrow", "parquet", "Parquet tables")


def _pq():
    _pa()
    import pyarrow.parquet as pq

    return pq


def table_kind(path: str | os.PathLike[str]) -> str:
    """``"parquet"`` (a ``.parquet`` file or a directory), ``"jsonl"`` (``.jsonl``,
    ``.ndjson``), ``"csv"`` (``.csv``), ``"tsv"`` (``.tsv``, ``.tab``) or ``"text"``
    (anything else: one text per line)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if path.is_dir() or suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    if suffix in (".tsv", ".tab"):
        return "tsv"
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


def open_parquet(file: Path):
    """``pyarrow.parquet.ParquetFile(file)``, its schema read: the one place a Parquet file is
    opened, so that a damaged one is one error.

    Raises:
        DataError: not a Parquet file, truncated or corrupt (pyarrow's reason named).
    """
    try:
        pf = _pq().ParquetFile(file)
        pf.schema_arrow  # noqa: B018 - decoded here: a corrupt footer fails now
    except (OSError, ValueError, _pa().ArrowException) as e:
        raise DataError(f"cannot read {file} as Parquet: {_reason(e)}") from e
    return pf


def parquet_batches(pf, file: Path, **options) -> Iterator[Any]:
    """``pf.iter_batches(**options)``, a corrupt page refused as one `DataError` naming
    ``file``."""
    try:
        yield from pf.iter_batches(**options)
    except (OSError, ValueError, _pa().ArrowException) as e:
        raise DataError(f"cannot read {file} as Parquet: {_reason(e)}") from e


def _reason(e: BaseException) -> str:
    """pyarrow's message on one line, at most 200 characters."""
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


#: Bad rows a refusal names (the others are counted).
NAMED_PROBLEMS = 3


def text_problem(value: Any) -> str | None:
    """Why a table cell holds no document, or None when it holds one (the one rule of table
    rows, see the module docstring): ``"null"`` (None, or a float NaN as pandas gives for a
    missing value), ``"a list, not a string"`` (any type but str, int and float; a bool is
    refused), ``"empty"`` (nothing but whitespace). A number is a text (``str(value)``)."""
    if isinstance(value, np.generic):  # numpy scalars of a Ray "numpy" batch
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return f"a {type(value).__name__}, not a string"
    if not str(value).strip():
        return "empty"
    return None


def check_rows(
    ids: list[Any], texts: list[Any], id_column: str = "id", text_column: str = "text"
) -> tuple[list[Any], list[str], list[str]]:
    """``(ids, texts, problems)``: the good rows of a batch (texts as ``str``) and a
    description of each bad one (`text_problem`; a null id), e.g. ``"row id 20: 'text' is
    empty"``. Local table reads and Ray Data (`integrations.ray`) check rows with this."""
    good_ids: list[Any] = []
    good: list[str] = []
    problems: list[str] = []
    for i, t in zip(ids, texts):
        what = text_problem(t)
        if what is not None:
            problems.append(f"row id {i!r}: {text_column!r} is {what}")
        elif i is None or (isinstance(i, float) and math.isnan(i)):
            problems.append(f"the row of text {str(t)[:40]!r}: {id_column!r} is null")
        else:
            good_ids.append(i.item() if isinstance(i, np.generic) else i)
            good.append(str(t.item() if isinstance(t, np.generic) else t))
    return good_ids, good, problems


class RowProblems:
    """The bad rows of one input: every one counted, the first `NAMED_PROBLEMS` named; `check`
    raises the one refusal (the same message for every table reader and for Ray Data)."""

    def __init__(self) -> None:
        self.count = 0
        self.named: list[str] = []

    def add(self, problems: list[str], count: int | None = None) -> None:
        """Count ``count`` (default ``len(problems)``) bad rows, described by ``problems`` (in
        input order; only the first few are kept)."""
        self.count += len(problems) if count is None else count
        self.named.extend(problems[: max(0, NAMED_PROBLEMS - len(self.named))])

    def message(self, source: Any, outcome: str = "nothing was written") -> str:
        """``"SOURCE: N rows cannot be embedded or indexed: …; nothing was written"``."""
        more = self.count - len(self.named)
        rows = "1 row" if self.count == 1 else f"{self.count} rows"
        return (
            f"{source}: {rows} cannot be embedded or indexed: {'; '.join(self.named)}"
            f"{f' (and {more} more)' if more > 0 else ''}; {outcome}"
        )

    def check(self, source: Any, outcome: str = "nothing was written") -> None:
        """Raise `DataError` (`message`) when a bad row was counted."""
        if self.count:
            raise DataError(self.message(source, outcome))


def _text_rows(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, stripped line)`` of a text file (`tables.iter_lines`: lines end at ``\n``)."""
    for n, line in iter_lines(path):
        yield n, line.strip()


def _csv_rows(
    path: Path, fmt: str, id_column: str, text_column: str, problems: RowProblems
) -> Iterator[tuple[Any, str]]:
    """The (id, text) of each good CSV/TSV row (`tables._table_rows`: a header, RFC 4180
    quoting, lines ending at ``\n``); the id is the ``id_column`` field when the header has
    it, else the row's line. A row whose text is blank is counted in ``problems``.

    Raises:
        DataError: the header has no ``text_column`` (the columns are listed), or malformed
            CSV (the line named).
    """
    header, rows = _table_rows(path, read_text(path), fmt)
    if header is None:
        return
    if text_column not in header:
        raise DataError(
            f"{path}:1: no column {text_column!r} in the header; columns: {header} (choose one "
            "with --text-column)"
        )
    with_ids = id_column in header
    for n, row in rows:
        what = text_problem(row.get(text_column))
        if what is not None:
            problems.add([f"line {n}: {text_column!r} is {what}"])
            continue
        yield (row[id_column] if with_ids else n), row[text_column]


def _jsonl_rows(
    path: Path, id_column: str, text_column: str, problems: RowProblems
) -> Iterator[tuple[Any, str]]:
    """The (id, text) of each good JSONL row; a row with bad JSON, no text column or a bad text
    (`text_problem`) is skipped and counted in ``problems`` (the caller refuses the file). A row
    is named by its line number."""
    for n, line in _text_rows(path):
        if not line:
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:  # bad JSON, too-long ints, too deep
            problems.add([f"line {n}: not JSON ({e})"])
            continue
        if not isinstance(row, dict) or text_column not in row:
            problems.add([f"line {n}: not a JSON object with {text_column!r}"])
            continue
        what = text_problem(row[text_column])
        if what is not None:
            problems.add([f"line {n}: {text_column!r} is {what}"])
            continue
        i = row.get(id_column, n)
        if i is None:
            problems.add([f"line {n}: {id_column!r} is null"])
            continue
        yield i, str(row[text_column])


def _parquet_batches(
    path: Path, id_column: str, text_column: str, batch_rows: int, problems: RowProblems
) -> Iterator[tuple[list, list[str]]]:
    """The good rows of each Parquet batch (`check_rows`); the bad ones go to ``problems``."""
    row = 0
    for file in parquet_files(path):
        pf = open_parquet(file)
        names = pf.schema_arrow.names
        if text_column not in names:
            raise DataError(f"{file}: no column {text_column!r}; columns: {names}")
        columns = [text_column] + ([id_column] if id_column in names else [])
        for batch in parquet_batches(pf, file, batch_size=batch_rows, columns=columns):
            texts = batch.column(text_column).to_pylist()
            if id_column in names:
                ids = batch.column(id_column).to_pylist()
            else:
                ids = list(range(row + 1, row + 1 + len(texts)))
            row += len(texts)
            ids, texts, bad = check_rows(ids, texts, id_column, text_column)
            problems.add(bad)
            yield ids, texts


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
        DataError: a missing or unreadable input, bytes that are not UTF-8, a Parquet input
            without the text column; bad rows (`check_rows`: a null, non-string or empty text,
            a null id; a JSONL line that is not an object with the text column), counted over
            the whole input and refused (`RowProblems`) after the last good batch (use
            `check_table` first to refuse before any work). Messages name the file and the
            line (JSONL) or the id (Parquet).
    """
    path = Path(path)
    kind = table_kind(path)
    if kind != "parquet":
        check_input_file(path)  # a file, or standard input (``-``)
    problems = RowProblems()
    if kind == "parquet":
        rows = (
            row
            for ids, texts in _parquet_batches(path, id_column, text_column, batch_rows, problems)
            for row in zip(ids, texts)
        )
    elif kind == "jsonl":
        rows = _jsonl_rows(path, id_column, text_column, problems)
    elif kind in ("csv", "tsv"):
        rows = _csv_rows(path, kind, id_column, text_column, problems)
    else:
        rows = ((i, t) for i, t in _text_rows(path) if t)
    ids: list[Any] = []
    texts: list[str] = []
    for i, t in rows:
        ids.append(i)
        texts.append(t)
        if len(texts) == batch_rows:
            yield ids, texts
            ids, texts = [], []
    problems.check(path)  # every bad row counted, the first three named; nothing written
    if texts:
        yield ids, texts


def check_table(
    path: str | os.PathLike[str], *, id_column: str = "id", text_column: str = "text"
) -> None:
    """Read a JSONL, CSV/TSV or Parquet input through once, keeping nothing, so that a bad
    row refuses it before any work (`iter_id_texts` would refuse it only at its end); a
    plain text file has no bad rows.

    Raises:
        DataError: see `iter_id_texts`.
    """
    if table_kind(path) == "text":
        return
    for _ in iter_id_texts(path, id_column=id_column, text_column=text_column):
        pass


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


#: Quantized precisions of an embedding table's extra column (`pipelines.quantize`'s names).
QUANTIZED = {"int8": "int8", "uint8": "uint8", "binary": "int8", "ubinary": "uint8"}
SPARSE_INDICES, SPARSE_VALUES = "sparse_indices", "sparse_values"


def quantized_width(dimension: int, precision: str) -> int:
    """Values per row of a ``precision`` column: the dimension for int8/uint8, one byte per
    8 dimensions (rounded up) for binary/ubinary."""
    return (dimension + 7) // 8 if precision in ("binary", "ubinary") else dimension


class EmbeddingTableWriter:
    """Append batches of rows to one Parquet file (see the module docstring).

    Columns: ``id`` (int64 or string, fixed by the first batch), ``text`` with ``with_text``,
    then either ``vector`` (a fixed-size list of float32, ``dimension`` values) and, with a
    ``precision`` other than float32, ``vector_<precision>`` (a fixed-size list of int8 for
    int8/binary, uint8 for uint8/ubinary: `quantized_width` values, as
    `pipelines.quantize.quantize_embeddings` returns them); or, with ``sparse``,
    ``sparse_indices`` (list of int32: vocabulary ids, ascending) and ``sparse_values`` (list
    of float32) of `pipelines.sparse.SparseEncoder` vectors of width ``dimension``.

    The schema metadata (key ``bertfamily``) holds ``format_version``, ``model`` (the
    identity), ``kind`` ("dense" or "sparse") and, for a quantized column, ``quantized``:
    ``{"precision", "column", "ranges"}`` (ranges: the int8/uint8 (2, dimension) minimum and
    maximum the values were bucketed with, else None).

    Use as a context manager around an open ``path`` (write to a temporary path and rename it
    for an atomic file).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dimension: int,
        identity: dict[str, Any] | None = None,
        with_text: bool = False,
        *,
        precision: str = "float32",
        ranges: np.ndarray | None = None,
        sparse: bool = False,
    ) -> None:
        if precision != "float32" and precision not in QUANTIZED:
            raise DataError(f"precision must be float32 or one of {sorted(QUANTIZED)}")
        if sparse and precision != "float32":
            raise DataError("sparse vectors have no quantized column")
        self.path = Path(path)
        self.dimension = dimension
        self.identity = identity
        self.with_text = with_text
        self.precision = precision
        self.ranges = None if ranges is None else np.asarray(ranges, dtype=np.float32)
        self.sparse = sparse
        self.rows = 0
        self._writer = None

    @property
    def quantized_column(self) -> str | None:
        """``vector_<precision>``, or None for float32 only."""
        return None if self.precision == "float32" else f"vector_{self.precision}"

    def _schema(self, ids: list[Any]):
        pa = _pa()
        fields = [pa.field("id", _id_type(ids), nullable=False)]
        if self.with_text:
            fields.append(pa.field("text", pa.string()))
        meta: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "model": self.identity,
            "kind": "sparse" if self.sparse else "dense",
        }
        if self.sparse:
            fields.append(pa.field(SPARSE_INDICES, pa.list_(pa.int32())))
            fields.append(pa.field(SPARSE_VALUES, pa.list_(pa.float32())))
        else:
            fields.append(pa.field("vector", pa.list_(pa.float32(), self.dimension)))
        if self.quantized_column:
            width = quantized_width(self.dimension, self.precision)
            kind = getattr(pa, QUANTIZED[self.precision])()
            fields.append(pa.field(self.quantized_column, pa.list_(kind, width)))
            meta["quantized"] = {
                "precision": self.precision,
                "column": self.quantized_column,
                "ranges": None if self.ranges is None else self.ranges.tolist(),
            }
        return pa.schema(fields, metadata={META_KEY: json.dumps(meta).encode()})

    def write(
        self,
        ids: list[Any],
        vectors: np.ndarray | None = None,
        texts: list[str] | None = None,
        *,
        quantized: np.ndarray | None = None,
        sparse: list[tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> None:
        """Append one batch of N rows: N ids; (N, dimension) float ``vectors`` and, with a
        precision, the (N, `quantized_width`) ``quantized`` rows; or, for a sparse table, N
        ``(indices, values)`` pairs in ``sparse``; N texts when ``with_text``.

        Raises:
            DataError: shapes or counts that do not match the ids, the dimension or the
                precision's dtype; sparse indices outside ``[0, dimension)``.
        """
        pa = _pa()
        n = len(ids)
        if self._writer is None:
            self._writer = _pq().ParquetWriter(self.path, self._schema(ids))
        schema = self._writer.schema
        columns = [pa.array(ids, type=schema.field("id").type)]
        if self.with_text:
            columns.append(pa.array(list(texts or []), type=pa.string()))
        if self.sparse:
            if sparse is None or len(sparse) != n:
                raise DataError(f"{n} ids but {0 if sparse is None else len(sparse)} sparse rows")
            columns.extend(self._sparse_columns(sparse))
        else:
            columns.append(self._fixed(vectors, np.float32, self.dimension, "vectors"))
        if self.quantized_column:
            want = np.dtype(QUANTIZED[self.precision])
            if quantized is None or np.asarray(quantized).dtype != want:
                raise DataError(f"{self.quantized_column} needs {want} rows (quantized=)")
            width = quantized_width(self.dimension, self.precision)
            columns.append(self._fixed(quantized, want, width, self.quantized_column))
        self._writer.write_table(pa.Table.from_arrays(columns, schema=schema))
        self.rows += n

    def _fixed(self, rows, dtype, width: int, what: str):
        """A fixed-size list array of (N, width) ``rows`` of ``dtype``."""
        pa = _pa()
        rows = np.ascontiguousarray(rows, dtype=dtype) if rows is not None else None
        if rows is None or rows.ndim != 2 or rows.shape[1] != width:
            shape = None if rows is None else rows.shape
            raise DataError(f"{what} must be (N, {width}), got {shape}")
        flat = pa.array(rows.reshape(-1), type=pa.from_numpy_dtype(rows.dtype))
        return pa.FixedSizeListArray.from_arrays(flat, width)

    def _sparse_columns(self, rows: list[tuple[np.ndarray, np.ndarray]]):
        pa = _pa()
        lengths = np.array([len(i) for i, _ in rows], dtype=np.int64)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
        indices = np.concatenate([np.asarray(i, np.int64) for i, _ in rows] or [[]])
        values = np.concatenate([np.asarray(v, np.float32) for _, v in rows] or [[]])
        if len(values) != len(indices) or any(len(i) != len(v) for i, v in rows):
            raise DataError("sparse rows need as many values as indices")
        if len(indices) and (indices.min() < 0 or indices.max() >= self.dimension):
            raise DataError(f"sparse indices must lie in [0, {self.dimension})")
        return [
            pa.ListArray.from_arrays(offsets, pa.array(indices.astype(np.int32), pa.int32())),
            pa.ListArray.from_arrays(offsets, pa.array(values.astype(np.float32), pa.float32())),
        ]

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


def table_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What bertfamily stored with an embedding table (see `EmbeddingTableWriter`): a
    directory's ``_bertfamily.json``, or the first file's Parquet schema metadata; ``{}`` when
    there is none (a table written by another tool).

    Raises:
        DataError: the stored metadata is unreadable or not a JSON object (naming the file).
    """
    path = Path(path)
    if path.is_dir() and (path / IDENTITY_FILE).is_file():
        source = path / IDENTITY_FILE
        body = read_json(source, what="a JSON object", kind=None, error=DataError)
    else:
        source = parquet_files(path)[0]
        meta = open_parquet(source).schema_arrow.metadata or {}
        if META_KEY not in meta:
            return {}
        try:
            body = json.loads(meta[META_KEY])
        except (ValueError, RecursionError) as e:
            raise DataError(f"{source}: unreadable {META_KEY.decode()} metadata: {e}") from e
    if not isinstance(body, dict):
        raise DataError(f"{source}: the stored metadata is not a JSON object")
    body.setdefault("_source", str(source))
    return body


def table_identity(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The model identity stored with an embedding table (`table_metadata`'s ``model``);
    None when there is none.

    Raises:
        DataError: the identity is unreadable or not ``{digest, dimension, pooling[, name]}``
            (naming the file).
    """
    body = table_metadata(path)
    if not body or "model" not in body:
        return None
    model, source = body.get("model"), body.get("_source", str(path))
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


def _table_files(path, wanted: list[str], what: str):
    """(file, ParquetFile, column names) of each file of an embedding table holding the
    ``wanted`` columns."""
    for file in parquet_files(Path(path)):
        pf = open_parquet(file)
        names = pf.schema_arrow.names
        missing = [c for c in wanted if c not in names]
        if missing:
            hint = ""
            if what == "dense" and SPARSE_INDICES in names:
                hint = (
                    " (it holds sparse vectors, a SPLADE model's: read them with "
                    "iter_sparse_table into retrieval.SparseIndex; the vector index is dense)"
                )
            elif what == "sparse" and "vector" in names:
                hint = " (it holds dense vectors: read them with iter_embedding_table)"
            raise DataError(f"{file}: no column(s) {missing}; columns: {names}{hint}")
        yield file, pf, names


def iter_embedding_table(
    path: str | os.PathLike[str],
    *,
    id_column: str = "id",
    vector_column: str = "vector",
    text_column: str = "text",
    batch_rows: int = 10_000,
) -> Iterator[tuple[list[Any], np.ndarray, list[str] | None]]:
    """``(ids, vectors, texts or None)`` batches of a Parquet embedding table (a file or a
    directory of shards), in file-name order; vectors are (N, D) float32 (a quantized column,
    ``vector_column="vector_int8"``, comes back as float32 of its integer values).

    Raises:
        DataError: no Parquet files, or a file without the id or vector column (a sparse
            table is named as such).
    """
    for file, pf, names in _table_files(path, [id_column, vector_column], "dense"):
        columns = [id_column, vector_column] + ([text_column] if text_column in names else [])
        for batch in parquet_batches(pf, file, batch_size=batch_rows, columns=columns):
            texts = batch.column(text_column).to_pylist() if text_column in names else None
            yield (
                batch.column(id_column).to_pylist(),
                vectors_of(batch.column(vector_column)),
                texts,
            )


def iter_sparse_table(
    path: str | os.PathLike[str],
    *,
    id_column: str = "id",
    text_column: str = "text",
    batch_rows: int = 10_000,
) -> Iterator[tuple[list[Any], list[tuple[np.ndarray, np.ndarray]], list[str] | None]]:
    """``(ids, [(indices, values)], texts or None)`` batches of a sparse embedding table
    (``sparse_indices``: int64 vocabulary ids, ``sparse_values``: float32 weights per row), as
    `EmbeddingTableWriter` writes a SPLADE model's (`pipelines.sparse.SparseVector` takes
    each pair).

    Raises:
        DataError: no Parquet files, or a file without the id or sparse columns.
    """
    wanted = [id_column, SPARSE_INDICES, SPARSE_VALUES]
    for file, pf, names in _table_files(path, wanted, "sparse"):
        columns = wanted + ([text_column] if text_column in names else [])
        for batch in parquet_batches(pf, file, batch_size=batch_rows, columns=columns):
            texts = batch.column(text_column).to_pylist() if text_column in names else None
            index_lists = batch.column(SPARSE_INDICES)
            value_lists = batch.column(SPARSE_VALUES)
            offsets = index_lists.offsets.to_numpy()
            offsets = offsets - offsets[0]
            same = value_lists.offsets.to_numpy()
            if not np.array_equal(same - same[0], offsets):
                raise DataError(f"{path}: rows with more sparse values than indices, or fewer")
            indices = index_lists.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
            values = value_lists.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
            rows = [(indices[a:b], values[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
            yield batch.column(id_column).to_pylist(), rows, texts
