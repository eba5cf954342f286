"""What every persisted index shares: its rows (ids and texts), the identity of the model that
made its vectors, and one directory layout, written and read in one place (`Index`).

An index directory holds

- ``meta.json``: the format version, the kind (``flat``, ``hnsw``, ``binary``, ``sparse`` or
  ``bm25``), the row count, the kind's settings, and the model identity (`ModelIdentity`:
  digest of the model directory's files, dimension, pooling), or null for an index of bare
  vectors or a BM25 index (no model); a dense
  index also records the size and SHA-256 of its files (``files``), checked before use;
- ``texts.jsonl``: ``{"id", "text"}`` per row, in index order;
- the kind's vector files (`dense.VectorIndex`, `binary.BinaryIndex`,
  `sparse_index.SparseIndex`).

Every write (build, add) builds a whole new directory beside the old one and swaps it in
(`files.atomic_directory`): a write killed at any moment leaves the previous index readable. A
load trusts nothing (`read_index_meta`, `read_index_rows`, then the kind's own agreement checks)
and raises `errors.VectorIndexError` naming the file. An add refuses repeated ids, blank texts
and non-finite vectors; a query with a model other than the one that built the index is refused.

A kind (a subclass of `Index`) holds only its vector storage and its scoring: the hooks
``create``, ``_prepare``, ``_finite``, ``_append``, ``_settings``, ``_write``, ``_read`` and
``_search_encoded``; where its model is not a `SentenceEmbedder`'s kind, also ``_encode``,
``_encode_queries`` and ``_model_identity``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...data.tables import read_utf8, text_lines
from ...errors import InputError, VectorIndexError
from ...files import (
    atomic_directory,
    directory_digest,
    parse_json,
    read_json,
    write_text_atomic,
)

__all__ = [
    "ALL_KINDS",
    "FORMAT_VERSION",
    "Hit",
    "Index",
    "IndexHit",
    "ModelIdentity",
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

FORMAT_VERSION = 1
DENSE_KINDS = ("flat", "hnsw")
#: Every kind an index directory can hold: `dense.VectorIndex`'s, `BinaryIndex`'s, `SparseIndex`'s,
#: `bm25_index.BM25Index`'s, `colbert_index.ColBERTIndex`'s.
ALL_KINDS = (*DENSE_KINDS, "binary", "sparse", "bm25", "colbert")
INDEX_FILE, TEXTS_FILE, META_FILE = "index.faiss", "texts.jsonl", "meta.json"
VECTORS_FILE, SPARSE_FILE = "vectors.npy", "sparse.npz"
COLBERT_FILE = "colbert.npz"  # `colbert_index.ColBERTIndex`'s token vectors
#: The files whose size and SHA-256 ``meta.json`` may record (``files``).
RECORDABLE_FILES = (INDEX_FILE, TEXTS_FILE, VECTORS_FILE, SPARSE_FILE, COLBERT_FILE)


# --- the model that made the vectors --------------------------------------------------------
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


# --- results --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hit:
    """One result by row: the document's row in the index and its score (higher is better)."""

    index: int
    score: float


@dataclass(frozen=True)
class IndexHit:
    """One result: the row's position in the index, its id, score and text."""

    index: int
    id: Any
    score: float
    text: str


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """(N, D) float32 rows divided by their L2 norms (a zero row stays zero)."""
    v = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.clip(norms, 1e-12, None)


def top_hits(scores: np.ndarray, k: int) -> list[Hit]:
    """The ``k`` best of (N,) ``scores`` as `Hit` (row = position in ``scores``), score
    descending, then row ascending."""
    k = min(k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    best = best[np.lexsort((best, -scores[best]))]
    return [Hit(int(i), float(scores[i])) for i in best]


# --- rows: ids and texts ----------------------------------------------------------------------
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


def check_finite(finite: np.ndarray, ids: Sequence[Any], first_row: int = 0) -> None:
    """Refuse vectors holding NaN or infinity: they never rank as a hit, not even for their own
    text, so an index of them would lose those rows silently.

    Args:
        finite: (N,) bool, True where a vector's values are all finite.
        ids: the N vectors' ids (named in the message).
        first_row: the index row of the first vector (named in the message).

    Raises:
        InputError: the first non-finite vector, by its row in the index and its id, and how
            many there are.
    """
    bad = np.flatnonzero(~np.asarray(finite, dtype=bool))
    if len(bad):
        n = int(bad[0])
        raise InputError(
            f"vector {first_row + n} (0-based row of the index, id {ids[n]!r}) holds NaN or "
            f"infinity ({len(bad)} of the {len(ids)} vectors added do): an index holds finite "
            "vectors only (such a row would never be found); nothing was added"
        )


def write_index_rows(directory: Path, ids: Sequence[Any], texts: Sequence[str]) -> None:
    """``texts.jsonl`` (one ``{"id", "text"}`` a line, index order) inside a new version's
    directory (see `files.atomic_directory`)."""
    with open(Path(directory) / TEXTS_FILE, "w", encoding="utf-8") as fh:
        for i, t in zip(ids, texts):
            fh.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")


def read_index_rows(path: str | Path, count: int) -> tuple[list[Any], list[str]]:
    """(ids, texts) of an index directory's ``texts.jsonl``, every row checked.

    Raises:
        VectorIndexError: unreadable, a row that is not ``{"id", "text"}``, a repeated id, or
            not ``count`` rows.
    """
    rows = _read_rows(Path(path) / TEXTS_FILE, count)
    return [r["id"] for r in rows], [r["text"] for r in rows]


# --- meta.json --------------------------------------------------------------------------------
def meta_error(path: str | Path, problem: str) -> VectorIndexError:
    """The error of a ``meta.json`` field that is wrong: one line naming the file."""
    return VectorIndexError(
        f"{Path(path) / META_FILE}: {problem}; rebuild the index (bertfamily index build)"
    )


def read_index_meta(path: str | Path) -> dict[str, Any]:
    """An index directory's ``meta.json``, its shared fields validated (every kind).

    Checks the format version, the kind, the row count, the ``files`` digests (their shape;
    the files themselves are checked by `Index.load`) and the ``model`` identity when there
    is one. The kind's own settings are checked by its ``load``.

    Raises:
        VectorIndexError: one line naming ``meta.json``: no such file (not an index directory),
            unreadable JSON, not an object, another format version, an unknown kind, or a field
            of the wrong type or out of range.
    """
    path = Path(path)
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise VectorIndexError(f"{path} is not an index directory (no {META_FILE})")
    meta = read_json(  # bounded (files.read_json); the kind is checked below
        meta_file, kind=None, error=lambda m: meta_error(path, f"not readable JSON ({m})")
    )
    if not isinstance(meta, dict):
        raise meta_error(path, f"a JSON {type(meta).__name__}, not an object")
    if meta.get("format_version") != FORMAT_VERSION:
        raise VectorIndexError(
            f"{meta_file}: index format {meta.get('format_version')!r} unsupported (this version "
            f"reads {FORMAT_VERSION})"
        )
    if meta.get("kind") not in ALL_KINDS:
        raise meta_error(path, f"kind {meta.get('kind')!r} is not one of {ALL_KINDS}")
    if not is_int(meta.get("count"), 0):
        raise meta_error(path, f"count {meta.get('count')!r} is not a row count")
    model = meta.get("model")
    if model is not None and (
        not isinstance(model, dict)
        or set(model) - {"digest", "dimension", "pooling", "name"}
        or not isinstance(model.get("digest"), str)
        or not is_int(model.get("dimension"), 1)
        or not isinstance(model.get("pooling"), str)
        or not isinstance(model.get("name", ""), str)
    ):
        raise meta_error(
            path, f"model {str(model)[:80]!r} is not a model identity (digest, dimension, pooling)"
        )
    files = meta.get("files", {})
    if not isinstance(files, dict) or set(files) - set(RECORDABLE_FILES):
        raise meta_error(
            path, f"files must describe some of {RECORDABLE_FILES}, got {str(files)[:80]!r}"
        )
    for name, record in files.items():
        if not (
            isinstance(record, dict)
            and is_int(record.get("bytes"), 0)
            and isinstance(record.get("sha256"), str)
        ):
            raise meta_error(path, f"files[{name!r}] is not {{bytes, sha256}}")
    return meta


def read_identity(path: Path, meta: dict[str, Any]) -> ModelIdentity | None:
    """The `ModelIdentity` in ``meta`` as `read_index_meta` checked it (None when it records
    none)."""
    if meta.get("model") is None:
        return None
    return ModelIdentity(**meta["model"])


def is_int(value: Any, low: int) -> bool:
    """``value`` is an int (not a bool) >= ``low``: a JSON field read back."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def files_disagree(path: Path, what: str) -> VectorIndexError:
    """The error of an index directory whose files do not agree (``what`` says how)."""
    return VectorIndexError(f"{path}: files disagree ({what})")


# --- the base class ---------------------------------------------------------------------------
class Index:
    """Rows (``ids``, ``texts``), the model identity, and the directory layout of one index
    kind; the subclass holds the vectors (see the module docstring).

    Attributes:
        kind: "flat", "hnsw", "binary" or "sparse" (``meta.json``'s kind).
        identity: the `ModelIdentity` of the model that made the vectors; None for bare
            vectors (then only vector search works).
        ids: one id per row (any JSON value; distinct); texts: one text per row.
    """

    #: the kinds this class reads and writes, and its name in messages
    kinds: ClassVar[tuple[str, ...]] = ()
    label: ClassVar[str] = ""
    #: the files whose size and SHA-256 ``save`` records in ``meta.json`` (checked by ``load``):
    #: ``texts.jsonl`` for every kind (an edited or reordered row would otherwise show a hit
    #: with another document's id and text), and each kind's own files
    recorded_files: ClassVar[tuple[str, ...]] = (TEXTS_FILE,)
    #: ``load`` refuses a ``meta.json`` that records no model
    needs_identity: ClassVar[bool] = False

    kind: str
    identity: ModelIdentity | None
    texts: list[str]
    ids: list[Any]

    def _init_rows(
        self, kind: str, identity: ModelIdentity | None, texts: list[str], ids: list[Any]
    ) -> None:
        self.kind, self.identity, self.texts, self.ids = kind, identity, texts, ids
        self._id_keys: set[str] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    # --- the kind's storage and scoring (subclass hooks) ---------------------------------
    @classmethod
    def create(cls, identity: ModelIdentity, **settings: Any) -> Index:
        """An empty index for the vectors of ``identity``'s model."""
        raise NotImplementedError

    def _prepare(self, vectors: Any) -> Any:
        """``vectors`` checked (shape, range) and in the storage's form; raise InputError."""
        raise NotImplementedError

    def _finite(self, prepared: Any) -> np.ndarray:
        """(N,) bool: the prepared vectors whose values are all finite."""
        raise NotImplementedError

    def _append(self, prepared: Any) -> None:
        """Add the prepared vectors to the storage (rows ``len(self)`` on)."""
        raise NotImplementedError

    def _settings(self) -> dict[str, Any]:
        """The kind's ``meta.json`` fields, after format_version, kind and count."""
        raise NotImplementedError

    def _write(self, directory: Path) -> None:
        """Write the vector files into a new version's ``directory``."""
        raise NotImplementedError

    def _read(self, path: Path, meta: dict[str, Any]) -> None:
        """Read the vector files of ``path`` and check them against ``meta`` and the rows;
        raise VectorIndexError."""
        raise NotImplementedError

    def _search_encoded(self, queries: Any, top_k: int, **options: Any) -> list[list[IndexHit]]:
        """The hits of encoded ``queries`` (the output of the model's ``encode``)."""
        raise NotImplementedError

    def _encode(
        self, encoder, texts: list[str], batch_size: int, progress: Callable[[int], None] | None
    ) -> Any:
        """The vectors of ``texts`` (a `SentenceEmbedder`'s encode; a kind may override)."""
        return encoder.encode(texts, batch_size=batch_size, progress=progress)

    def _encode_queries(self, encoder, queries: list[str], batch_size: int) -> Any:
        """The encoded ``queries`` `_search_encoded` takes (a `SentenceEmbedder`'s encode; a
        kind may override)."""
        return encoder.encode(queries, batch_size=batch_size)

    @classmethod
    def _model_identity(cls, encoder) -> ModelIdentity:
        """The `ModelIdentity` of ``encoder`` as this kind records it (`model_identity`; a
        kind whose vectors come from another model class overrides it). Used by `build` and
        `check_model`.

        Raises:
            InputError: ``encoder`` is not a model this kind can use.
        """
        return model_identity(encoder)

    # --- adding rows ---------------------------------------------------------------------
    def add_vectors(
        self, vectors: Any, texts: Sequence[str] | None = None, ids: Sequence[Any] | None = None
    ) -> None:
        """Append rows (in memory; `save` writes them).

        Args:
            vectors: N vectors in the kind's form ((N, dimension) float for dense and binary;
                `SparseVector` rows for sparse).
            texts: N texts (default: empty strings).
            ids: N ids, new to the index and distinct (default: the row numbers they get).

        Raises:
            InputError: vectors of the wrong shape or range, counts that differ, a vector
                holding NaN or infinity (its row and id named), or an id already in the index
                or repeated. Nothing is added then.
        """
        prepared = self._prepare(vectors)
        n = len(vectors)
        texts = [""] * n if texts is None else list(texts)
        ids = list(range(len(self), len(self) + n)) if ids is None else list(ids)
        if not (n == len(texts) == len(ids)):
            raise InputError(f"{n} vectors, {len(texts)} texts, {len(ids)} ids")
        check_finite(self._finite(prepared), ids, first_row=len(self))
        keys = check_new_ids(self.ids, self._id_keys, ids)
        self._append(prepared)
        self.texts.extend(texts)
        self.ids.extend(ids)
        self._id_keys = keys

    def add(
        self,
        encoder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Encode ``texts`` with the index's model and append them (ids default to continuing
        the row numbers); ``progress(n)`` is called as texts are encoded.

        Raises:
            VectorIndexError: ``encoder`` is not the model that built the index.
            InputError: a blank text (empty or whitespace only: it would rank as a hit), or an
                id already in the index (both checked before anything is encoded); see
                `add_vectors`.
        """
        self.check_model(encoder)
        texts = list(texts)
        check_texts(texts)
        ids = list(range(len(self), len(self) + len(texts))) if ids is None else list(ids)
        check_new_ids(self.ids, self._id_keys, ids)
        self.add_vectors(self._encode(encoder, texts, batch_size, progress), texts, ids)

    @classmethod
    def build(
        cls,
        encoder,
        texts: Sequence[str],
        ids: Sequence[Any] | None = None,
        *,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
        **settings: Any,
    ) -> Index:
        """Encode ``texts`` with ``encoder`` (a `SentenceEmbedder`; a `SparseEncoder` for a
        sparse index, a `ColBERTEncoder` for a ColBERT one) into a new index.

        Args:
            ids: one per text (default 0..N-1).
            settings: the kind's ``create`` settings.

        Raises:
            InputError: ``encoder`` is not a model of this kind (`_model_identity`); see
                ``create`` and `add`.
        """
        index = cls.create(cls._model_identity(encoder), **settings)
        index.add(encoder, texts, ids, batch_size=batch_size, progress=progress)
        return index

    # --- queries -------------------------------------------------------------------------
    def check_model(self, encoder) -> None:
        """Refuse an encoder that did not make the index's vectors (`check_identity`).

        Raises:
            VectorIndexError: the index records no model, or another model directory,
                dimension or pooling (the message names both), or ``encoder`` is not a model
                of this kind (`_model_identity`).
        """
        try:
            theirs = self._model_identity(encoder)
        except InputError as e:  # not a model of this kind: its message names both
            raise VectorIndexError(str(e)) from None
        check_identity(self.identity, theirs)

    def search_texts(
        self, encoder, queries: Sequence[str], top_k: int = 5, batch_size: int = 32, **options
    ) -> list[list[IndexHit]]:
        """Encode ``queries`` with the index's model and return the ``top_k`` hits of each,
        best first, with their ids and texts; the corpus is not re-encoded. ``options``: the
        kind's (binary: ``rescore``; ColBERT: ``token_k``, ``exhaustive``).

        Raises:
            VectorIndexError: ``encoder`` is not the model that built the index.
            InputError: top_k < 1; the kind's ``search`` refusals.
        """
        self.check_model(encoder)
        vectors = self._encode_queries(encoder, list(queries), batch_size)
        return self._search_encoded(vectors, top_k, **options)

    def hits(self, rows: Sequence[Sequence[Hit]]) -> list[list[IndexHit]]:
        """Row hits (`Hit`, one list per query) with the id and text of each row."""
        return [
            [IndexHit(h.index, self.ids[h.index], h.score, self.texts[h.index]) for h in r]
            for r in rows
        ]

    # --- persistence ---------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the index directory atomically (a new version swapped in whole): the kind's
        vector files, ``texts.jsonl`` and ``meta.json`` (with the size and SHA-256 of the
        kind's `recorded_files`).

        Raises:
            UnsafePathError: ``path`` is a symbolic link (the swap would replace the link).
            OSError: the disk is full or not writable (the previous version stays).
            VectorIndexError: the kind's writer (FAISS) failed, e.g. the disk is full; one line
                with its message (the previous version stays).
        """
        path = Path(path)
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": self.kind,
            "count": len(self),
            **self._settings(),
            "model": None if self.identity is None else asdict(self.identity),
        }
        with atomic_directory(path, keep_existing=False) as tmp:
            try:
                self._write(tmp)
            except RuntimeError as e:  # FAISS reports a failed write (a full disk) this way
                raise VectorIndexError(
                    f"cannot write the index to {path}: {str(e).strip().splitlines()[-1][:300]} "
                    "(the previous version, if any, stays; free some space or write elsewhere)"
                ) from e
            write_index_rows(tmp, self.ids, self.texts)
            if self.recorded_files:
                meta["files"] = {name: _file_record(tmp / name) for name in self.recorded_files}
            write_text_atomic(tmp / META_FILE, json.dumps(meta, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Index:
        """Open an index directory of this class's kinds, trusting nothing in it: meta.json is
        validated field by field, the files it records digests of are checked against their
        sizes and SHA-256 before anything reads them, ``texts.jsonl`` row by row, and the
        kind's vector files must agree with both.

        Raises:
            VectorIndexError: one line naming the file: not an index directory, another kind
                or format version, a meta.json field of the wrong type or out of range, a file
                edited or truncated since it was written, a texts.jsonl row that is not
                ``{"id", "text"}`` or repeats an id, or files that do not agree (row counts,
                dimensions, values).
        """
        path = Path(path)
        meta = read_index_meta(path)
        if meta["kind"] not in cls.kinds:
            raise VectorIndexError(
                f"{path} is a {meta['kind']} index, not a {cls.label} one: open it with "
                "pipelines.retrieval.open_index (bertfamily search --index reads every kind)"
            )
        for name, record in meta.get("files", {}).items():
            _check_file(path / name, record, path / META_FILE)
        identity = read_identity(path, meta)
        if identity is None and cls.needs_identity:
            raise VectorIndexError(f"{path}: {META_FILE} records no model")
        ids, texts = read_index_rows(path, meta["count"])
        self = cls.__new__(cls)
        self._init_rows(meta["kind"], identity, texts, ids)
        self._read(path, meta)
        return self


# --- the files meta.json describes --------------------------------------------------------------
def _file_record(file: Path) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of one file of the index."""
    return {"bytes": file.stat().st_size, "sha256": _sha256(file)}


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with open(file, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
        row = parse_json(line, source=f"{file}, line {n}", kind=None, error=VectorIndexError)
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or "id" not in row:
            raise VectorIndexError(f'{file}, line {n}: not an {{"id", "text"}} row: {line[:80]}')
        key = json.dumps(row["id"])
        if key in seen:
            raise VectorIndexError(f"{file}, line {n}: id {row['id']!r} repeats an earlier row")
        seen.add(key)
        rows.append(row)
    return rows
