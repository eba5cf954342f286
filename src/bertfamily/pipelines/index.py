"""A persisted vector index of a corpus: embed once, query many times (`bertfamily index`).

One directory holds the FAISS index (Johnson, Douze & Jégou 2019, "Billion-scale similarity
search with GPUs"), the texts and ids beside it, and the identity of the model that made the
vectors:

- ``index.faiss``: exact inner-product search (``IndexFlatIP``) by default, or HNSW
  (``IndexHNSWFlat``; Malkov & Yashunin 2018, "Efficient and robust approximate nearest
  neighbor search using Hierarchical Navigable Small World graphs") for large corpora. Rows
  are L2-normalised, so the inner product is the cosine similarity that `semantic_search`
  ranks by;
- ``texts.jsonl``: ``{"id", "text"}`` per row, in index order;
- ``meta.json``: the format version, the index kind and its HNSW settings, the row count, and
  the model identity (`ModelIdentity`: digest of its directory's files, dimension, pooling).

The binary and sparse indexes of `pipelines.retrieval` keep the same directory layout
(``meta.json`` with their kind, ``texts.jsonl``, their own vector files) through the helpers
here (`read_index_meta`, `read_index_rows`, `write_index_rows`, `check_new_ids`,
`check_identity`); `retrieval.open_index` opens a directory of any kind.

Every write (build, add) builds a whole new directory beside the old one and swaps it in
(`files.atomic_directory`): a build or add killed at any moment leaves the previous index
readable. A query with a model other than the one that built the index is refused.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.tables import read_utf8, text_lines
from ..errors import InputError, VectorIndexError
from ..files import atomic_directory, directory_digest, write_text_atomic
from ..runtime import require

__all__ = [
    "VectorIndexError",
    "IndexHit",
    "ModelIdentity",
    "VectorIndex",
    "check_identity",
    "check_new_ids",
    "check_texts",
    "model_identity",
    "normalize_rows",
    "read_identity",
    "read_index_meta",
    "read_index_rows",
    "write_index_rows",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
KINDS = ("flat", "hnsw")
#: Every kind an index directory can hold: `VectorIndex`'s, then `retrieval.BinaryIndex`'s
#: and `retrieval.SparseIndex`'s.
ALL_KINDS = (*KINDS, "binary", "sparse")
INDEX_FILE, TEXTS_FILE, META_FILE = "index.faiss", "texts.jsonl", "meta.json"


def _faiss():
    return require("faiss", "index", "the vector index (bertfamily index)")


@dataclass(frozen=True)
class ModelIdentity:
    """What makes two models' vectors comparable: the SHA-256 of the model directory's files
    (`files.directory_digest`), the vector dimension, the pooling mode(s), and the model's
    name for messages."""

    digest: str
    dimension: int
    pooling: str
    name: str = ""

    def matches(self, other: ModelIdentity) -> bool:
        """Same directory digest, dimension and pooling (the name does not count)."""
        return (self.digest, self.dimension, self.pooling) == (
            other.digest,
            other.dimension,
            other.pooling,
        )


def model_identity(embedder) -> ModelIdentity:
    """The `ModelIdentity` of a `SentenceEmbedder`, or of a `sparse.SparseEncoder` (dimension:
    the vocabulary; pooling: ``splade-<max|sum>-<activation>``). The directory is hashed once,
    then cached on the embedder."""
    cached = getattr(embedder, "_identity", None)
    if cached is None:
        pooling = getattr(embedder, "pooling", None)
        if pooling is not None:
            modes = "+".join(pooling.modes)
        else:  # SPLADE: its pooling and activation decide the weights
            modes = f"splade-{embedder.spec.pooling}-{embedder.spec.activation}"
        cached = ModelIdentity(
            digest=directory_digest(embedder.path),
            dimension=embedder.dimension,
            pooling=modes,
            name=Path(embedder.path).name,
        )
        embedder._identity = cached
    return cached


@dataclass(frozen=True)
class IndexHit:
    """One result: the row's position in the index, its id, cosine similarity and text."""

    index: int
    id: Any
    score: float
    text: str


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """(N, D) float32 rows divided by their L2 norms (a zero row stays zero)."""
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.clip(norms, 1e-12, None)


# --- the directory layout every index kind shares ------------------------------------------
def check_new_ids(existing: Sequence[Any], keys: set[str] | None, ids: Sequence[Any]) -> set[str]:
    """The JSON keys of ``existing`` ids plus ``ids`` after checking that ``ids`` are new.

    Args:
        existing: the index's ids so far.
        keys: the keys already computed for ``existing`` (kept between calls: appends come in
            batches), or None to compute them.
        ids: the ids to append.

    Raises:
        InputError: an id already in the index or repeated in ``ids``.
    """
    seen = (
        keys if keys is not None and len(keys) == len(existing) else set(map(json.dumps, existing))
    )
    new = set()
    for i in ids:
        key = json.dumps(i)
        if key in seen or key in new:
            raise InputError(f"id {i!r} is already in the index")
        new.add(key)
    return seen | new


def check_identity(mine: ModelIdentity | None, theirs: ModelIdentity) -> None:
    """Refuse a query model whose vectors are not comparable with the index's.

    Raises:
        VectorIndexError: the index records no model, or another model directory, dimension
            or pooling; the message names both.
    """
    if mine is None:
        raise VectorIndexError(
            "this index records no model (it was made from bare vectors): search it with "
            "vectors, or rebuild it from texts with a model"
        )
    if not mine.matches(theirs):
        raise VectorIndexError(
            f"this index was built with model {mine.name!r} (digest {mine.digest[:12]}, "
            f"dimension {mine.dimension}, pooling {mine.pooling}); the query model is "
            f"{theirs.name!r} (digest {theirs.digest[:12]}, dimension {theirs.dimension}, "
            f"pooling {theirs.pooling}): query with the model that built it, or rebuild"
        )


def check_texts(texts: Sequence[str]) -> None:
    """Refuse blank texts (empty or whitespace only: they would rank as hits).

    Raises:
        InputError: the first blank text, by 0-based position.
    """
    blank = [i for i, t in enumerate(texts) if not str(t).strip()]
    if blank:
        raise InputError(
            f"text {blank[0]} (0-based) is blank; an index holds no blank texts (they "
            "would rank as search hits)"
        )


def write_index_rows(directory: Path, ids: Sequence[Any], texts: Sequence[str]) -> None:
    """``texts.jsonl`` (one ``{"id", "text"}`` a line, index order) inside a new version's
    directory (see `files.atomic_directory`)."""
    with open(Path(directory) / TEXTS_FILE, "w", encoding="utf-8") as fh:
        for i, t in zip(ids, texts):
            fh.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")


def read_index_meta(path: str | Path) -> dict[str, Any]:
    """An index directory's ``meta.json``, validated field by field (every kind).

    Checks the format version, the kind, the row count, the ``files`` digests (their shape;
    the files themselves are checked by the loader), the ``model`` identity when there is one
    and, for a dense index, the HNSW settings (filled with the defaults when absent).

    Raises:
        VectorIndexError: one line naming ``meta.json``: no such file (not an index directory),
            unreadable JSON, not an object, another format version, an unknown kind, or a field
            of the wrong type or out of range.
    """
    path = Path(path)
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise VectorIndexError(f"{path} is not an index directory (no {META_FILE})")

    def bad(problem: str) -> VectorIndexError:
        return VectorIndexError(
            f"{meta_file}: {problem}; rebuild the index (bertfamily index build)"
        )

    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise bad(f"not readable JSON ({e})") from None
    if not isinstance(meta, dict):
        raise bad(f"a JSON {type(meta).__name__}, not an object")
    if meta.get("format_version") != FORMAT_VERSION:
        raise VectorIndexError(
            f"{meta_file}: index format {meta.get('format_version')!r} unsupported (this version "
            f"reads {FORMAT_VERSION})"
        )
    if meta.get("kind") not in ALL_KINDS:
        raise bad(f"kind {meta.get('kind')!r} is not one of {ALL_KINDS}")
    if not _is_int(meta.get("count"), 0):
        raise bad(f"count {meta.get('count')!r} is not a row count")
    if meta["kind"] in KINDS:
        hnsw = meta.setdefault("hnsw", {"m": 32, "ef_construction": 200, "ef_search": 128})
        if not isinstance(hnsw, dict) or not all(
            _is_int(hnsw.get(k), 1) for k in ("m", "ef_construction", "ef_search")
        ):
            raise bad(f"hnsw {hnsw!r} must hold m, ef_construction and ef_search, each >= 1")
    model = meta.get("model")
    if model is not None and (
        not isinstance(model, dict)
        or set(model) - {"digest", "dimension", "pooling", "name"}
        or not isinstance(model.get("digest"), str)
        or not _is_int(model.get("dimension"), 1)
        or not isinstance(model.get("pooling"), str)
        or not isinstance(model.get("name", ""), str)
    ):
        raise bad(f"model {str(model)[:80]!r} is not a model identity (digest, dimension, pooling)")
    files = meta.get("files", {})
    if not isinstance(files, dict) or set(files) - {INDEX_FILE, TEXTS_FILE}:
        raise bad(f"files must describe {INDEX_FILE} and {TEXTS_FILE}, got {str(files)[:80]!r}")
    for name, record in files.items():
        if not (
            isinstance(record, dict)
            and _is_int(record.get("bytes"), 0)
            and isinstance(record.get("sha256"), str)
        ):
            raise bad(f"files[{name!r}] is not {{bytes, sha256}}")
    return meta


def read_index_rows(path: str | Path, count: int) -> tuple[list[Any], list[str]]:
    """(ids, texts) of an index directory's ``texts.jsonl``, every row checked.

    Raises:
        VectorIndexError: unreadable, a row that is not ``{"id", "text"}``, a repeated id, or
            not ``count`` rows.
    """
    rows = _read_rows(Path(path) / TEXTS_FILE, count)
    return [r["id"] for r in rows], [r["text"] for r in rows]


def read_identity(path: Path, meta: dict[str, Any]) -> ModelIdentity | None:
    """The `ModelIdentity` in ``meta`` as `read_index_meta` checked it (None when it records
    none)."""
    if meta.get("model") is None:
        return None
    return ModelIdentity(**meta["model"])


class VectorIndex:
    """A FAISS index with its texts, ids and model identity (see the module docstring).

    Build one with `VectorIndex.build` (or `create` from vectors), open one with `load`.
    """

    def __init__(
        self,
        faiss_index,
        texts: list[str],
        ids: list[Any],
        identity: ModelIdentity,
        kind: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
    ) -> None:
        self.faiss_index = faiss_index
        self.texts = texts
        self.ids = ids
        self.identity = identity
        self.kind = kind
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search

    def __len__(self) -> int:
        return len(self.texts)

    # --- construction ----------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        identity: ModelIdentity,
        *,
        kind: str = "flat",
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
    ) -> VectorIndex:
        """An empty index for vectors of ``identity.dimension``.

        Args:
            kind: "flat" (exact) or "hnsw" (approximate).
            hnsw_m: HNSW neighbours per node (M).
            ef_construction: HNSW candidate-list size when building.
            ef_search: HNSW candidate-list size when querying.

        Raises:
            ValueError: an unknown kind, or a setting < 1.
        """
        if kind not in KINDS:
            raise InputError(f"index kind must be one of {KINDS}, got {kind!r}")
        for name, v in (
            ("hnsw_m", hnsw_m),
            ("ef_construction", ef_construction),
            ("ef_search", ef_search),
        ):
            if v < 1:
                raise InputError(f"{name} must be >= 1, got {v}")
        faiss = _faiss()
        d = identity.dimension
        if kind == "flat":
            index = faiss.IndexFlatIP(d)
        else:
            index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = ef_construction
        return cls(index, [], [], identity, kind, hnsw_m, ef_construction, ef_search)

    def add_vectors(self, vectors: np.ndarray, texts: Sequence[str], ids: Sequence[Any]) -> None:
        """Append rows (in memory; `save` writes them).

        Args:
            vectors: (N, dimension) float; L2-normalised here.
            texts: N texts.
            ids: N ids; they must be new (not in the index, not repeated).

        Raises:
            ValueError: shapes or counts that do not match, or a repeated id.
        """
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape[1] != self.identity.dimension:
            raise InputError(
                f"vectors must be (N, {self.identity.dimension}), got {tuple(vectors.shape)}"
            )
        if not (len(vectors) == len(texts) == len(ids)):
            raise InputError(f"{len(vectors)} vectors, {len(texts)} texts, {len(ids)} ids")
        keys = check_new_ids(self.ids, getattr(self, "_id_keys", None), ids)
        self.faiss_index.add(normalize_rows(vectors))
        self.texts.extend(texts)
        self.ids.extend(ids)
        self._id_keys = keys

    @classmethod
    def build(
        cls,
        embedder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
        **settings: Any,
    ) -> VectorIndex:
        """Embed ``texts`` with ``embedder`` (a `SentenceEmbedder`) into a new index.

        Args:
            ids: one per text (default 0..N-1).
            settings: `create`'s (kind, hnsw_m, ef_construction, ef_search).

        Raises:
            ValueError: see `create` and `add_vectors`.
        """
        index = cls.create(model_identity(embedder), **settings)
        index.add(embedder, texts, ids, batch_size=batch_size, progress=progress)
        return index

    def add(
        self,
        embedder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Embed ``texts`` and append them (ids default to continuing the row numbers).

        Raises:
            VectorIndexError: ``embedder`` is not the model that built the index.
            ValueError: a blank text (empty or whitespace only: it would rank as a hit).
        """
        self.check_model(embedder)
        check_texts(texts)
        if ids is None:
            ids = list(range(len(self), len(self) + len(texts)))
        vectors = embedder.encode(list(texts), batch_size=batch_size, progress=progress)
        self.add_vectors(vectors, list(texts), list(ids))

    @classmethod
    def from_embeddings(
        cls,
        path: str | Path,
        *,
        embedder=None,
        id_column: str = "id",
        vector_column: str = "vector",
        text_column: str = "text",
        **settings: Any,
    ) -> VectorIndex:
        """An index of the vectors already in a Parquet embedding table (``embed --output
        x.parquet``, or the directory of shards ``embed --engine ray`` writes): nothing is
        embedded again and every row keeps its id; texts come from the table's text column
        (empty when it has none).

        Args:
            embedder: the model that made the vectors; needed only when the table does not
                record one (then its identity is the index's), else checked against it.
            settings: `create`'s (kind, hnsw_m, ef_construction, ef_search).

        Raises:
            VectorIndexError: no model identity in the table and no ``embedder``, an
                ``embedder`` that is not the table's model, vectors of another dimension, or a
                sparse table (a SPLADE model's). A quantized column beside ``vector`` is left
                alone: the index holds the float vectors.
        """
        from ..data.table_io import iter_embedding_table, table_identity, table_metadata

        meta = table_metadata(path)
        if meta.get("kind") == "sparse":
            raise VectorIndexError(
                f"{path} holds sparse vectors (a SPLADE model's sparse_indices and "
                "sparse_values); this index holds dense vectors: read them with "
                "data.table_io.iter_sparse_table into pipelines.retrieval.SparseIndex"
            )
        recorded = table_identity(path)  # validated
        if recorded is None and embedder is None:
            raise VectorIndexError(
                f"{path} does not record the model that made its vectors: give the model "
                "(--model) to build the index"
            )
        identity = ModelIdentity(**recorded) if recorded is not None else model_identity(embedder)
        index = cls.create(identity, **settings)
        if embedder is not None:
            index.check_model(embedder)
        for ids, vectors, texts in iter_embedding_table(
            path, id_column=id_column, vector_column=vector_column, text_column=text_column
        ):
            if vectors.shape[1:] != (identity.dimension,):
                raise VectorIndexError(
                    f"{path}: vectors of dimension {vectors.shape[1:]} but the model's is "
                    f"{identity.dimension}"
                )
            index.add_vectors(vectors, texts if texts is not None else [""] * len(ids), ids)
        return index

    # --- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the index directory atomically (a new version swapped in whole); meta.json
        records the size and SHA-256 of index.faiss and texts.jsonl, checked by `load`.

        Raises:
            UnsafePathError: ``path`` is a symbolic link (the swap would replace the link).
        """
        faiss = _faiss()
        path = Path(path)
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "count": len(self),
            "metric": "cosine (inner product of L2-normalised rows)",
            "hnsw": {
                "m": self.hnsw_m,
                "ef_construction": self.ef_construction,
                "ef_search": self.ef_search,
            },
            "model": asdict(self.identity),
        }
        with atomic_directory(path, keep_existing=False) as tmp:
            faiss.write_index(self.faiss_index, str(tmp / INDEX_FILE))
            write_index_rows(tmp, self.ids, self.texts)
            meta["files"] = {name: _file_record(tmp / name) for name in (INDEX_FILE, TEXTS_FILE)}
            write_text_atomic(tmp / META_FILE, json.dumps(meta, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> VectorIndex:
        """Open an index directory, trusting nothing in it: meta.json is validated field by
        field, index.faiss and texts.jsonl are checked against the sizes and SHA-256 it
        records (before FAISS reads anything; indexes written before digests were recorded
        are checked by their row counts only), and the three files must agree.

        Raises:
            VectorIndexError: one line naming the file: not an index directory, another format
                version, a meta.json field of the wrong type or out of range, a file edited or
                truncated since it was written, a texts.jsonl row that is not ``{"id", "text"}``
                or repeats an id, or files that do not agree (row counts, dimension).
        """
        faiss = _faiss()
        path = Path(path)
        meta = read_index_meta(path)
        if meta["kind"] not in KINDS:
            raise VectorIndexError(
                f"{path} is a {meta['kind']} index, not a dense one: open it with "
                "pipelines.retrieval.open_index (bertfamily search --index reads every kind)"
            )
        for name, record in meta.get("files", {}).items():
            _check_file(path / name, record, path / META_FILE)
        identity = read_identity(path, meta)
        if identity is None:
            raise VectorIndexError(f"{path}: {META_FILE} records no model")
        ids, texts = read_index_rows(path, meta["count"])
        try:
            index = faiss.read_index(str(path / INDEX_FILE))
        except (OSError, ValueError, RuntimeError) as e:
            raise VectorIndexError(f"cannot read the index in {path}: {e}") from e
        if index.ntotal != meta["count"] or index.d != identity.dimension:
            raise VectorIndexError(
                f"{path}: files disagree ({index.ntotal} vectors of dimension {index.d}, "
                f"{len(texts)} texts, meta.json says {meta['count']} × {identity.dimension})"
            )
        hnsw = meta["hnsw"]
        return cls(
            index,
            texts,
            ids,
            identity,
            meta["kind"],
            hnsw["m"],
            hnsw["ef_construction"],
            hnsw["ef_search"],
        )

    # --- queries ---------------------------------------------------------------------------
    def check_model(self, embedder) -> None:
        """Refuse an embedder whose vectors are not comparable with the index's.

        Raises:
            VectorIndexError: another model directory, dimension or pooling; the message names both.
        """
        check_identity(self.identity, model_identity(embedder))

    def search_vectors(self, queries: np.ndarray, top_k: int = 5) -> list[list[IndexHit]]:
        """The ``top_k`` rows closest (cosine) to each query vector, best first.

        Args:
            queries: (Q, dimension) float.

        Raises:
            ValueError: top_k < 1, or queries of another dimension.
        """
        if top_k < 1:
            raise InputError(f"top_k must be >= 1, got {top_k}")
        queries = np.asarray(queries)
        if queries.ndim != 2 or queries.shape[1] != self.identity.dimension:
            raise InputError(
                f"queries must be (Q, {self.identity.dimension}), got {tuple(queries.shape)}"
            )
        if self.kind == "hnsw":
            self.faiss_index.hnsw.efSearch = max(self.ef_search, top_k)
        k = min(top_k, len(self))
        if k == 0:
            return [[] for _ in queries]
        scores, rows = self.faiss_index.search(normalize_rows(queries), k)  # (Q, k) each
        return [
            [
                IndexHit(int(r), self.ids[r], float(s), self.texts[r])
                for s, r in zip(srow, rrow)
                if r >= 0
            ]
            for srow, rrow in zip(scores, rows)
        ]

    def search(
        self, embedder, queries: Sequence[str], top_k: int = 5, batch_size: int = 32
    ) -> list[list[IndexHit]]:
        """Embed ``queries`` and return `search_vectors`' hits; the corpus is not re-embedded.

        Raises:
            VectorIndexError: ``embedder`` is not the model that built the index.
        """
        self.check_model(embedder)
        return self.search_vectors(embedder.encode(list(queries), batch_size=batch_size), top_k)

    def search_texts(
        self, embedder, queries: Sequence[str], top_k: int = 5, batch_size: int = 32
    ) -> list[list[IndexHit]]:
        """`search` under the name every index kind shares (`retrieval.open_index`)."""
        return self.search(embedder, queries, top_k=top_k, batch_size=batch_size)


# --- meta.json and the files it describes -----------------------------------------------------


def _file_record(file: Path) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of one file of the index."""
    return {"bytes": file.stat().st_size, "sha256": _sha256(file)}


def _sha256(file: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(file, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_int(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_file(file: Path, record: dict[str, Any], meta_file: Path) -> None:
    """The file has the size and SHA-256 meta.json recorded."""
    try:
        size = file.stat().st_size
    except OSError as e:
        raise VectorIndexError(f"cannot read {file}: {e.strerror}") from None
    problem = None
    if size != record["bytes"]:
        problem = f"{size:,} bytes, {META_FILE} recorded {record['bytes']:,} (truncated or changed)"
    elif _sha256(file) != record["sha256"]:
        problem = f"its SHA-256 is not the one {META_FILE} recorded (edited)"
    if problem is not None:
        raise VectorIndexError(
            f"{file}: {problem}; nothing of the index was used: rebuild it (bertfamily index build)"
        )


def _read_rows(file: Path, count: int) -> list[dict[str, Any]]:
    """The ``{"id", "text"}`` rows of texts.jsonl, each checked, ids unique."""
    try:
        lines = text_lines(read_utf8(file))  # a text may hold U+2028
    except (OSError, UnicodeDecodeError) as e:
        raise VectorIndexError(f"cannot read {file}: {e}") from None
    if len(lines) != count:
        raise VectorIndexError(
            f"{file}: {len(lines):,} rows, {META_FILE} says {count:,}: the files disagree"
        )
    rows, seen = [], set()
    for n, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise VectorIndexError(f"{file}, line {n}: not JSON ({e})") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or "id" not in row:
            raise VectorIndexError(f'{file}, line {n}: not an {{"id", "text"}} row: {line[:80]}')
        key = json.dumps(row["id"])
        if key in seen:
            raise VectorIndexError(f"{file}, line {n}: id {row['id']!r} repeats an earlier row")
        seen.add(key)
        rows.append(row)
    return rows
