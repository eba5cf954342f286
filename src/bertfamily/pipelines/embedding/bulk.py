"""Bulk embedding of a text file of any size into a directory of shards (`bertfamily embed
--input FILE --output DIR`), with constant memory, resume, and a split across processes.

The input is cut into shards of ``shard_size`` consecutive lines (shard ``s`` holds lines
``[s·shard_size, (s+1)·shard_size)``, 0-based). Each shard is read lazily, embedded with
`SentenceEmbedder.encode`, and written atomically (`files.atomic_write`) as
``shard-00000.npy``: a float32 (lines, dimension) array, rows in line order. Memory therefore
depends on ``shard_size``, never on the file's size. Beside the shards, ``manifest.json``
records the plan:

- the model identity (`index.model_identity`: directory digest, dimension, pooling);
- the input file (name, bytes, SHA-256 of its content, line count);
- ``shard_size`` and every shard's file name and line range.

A shard file is written whole or not at all, so its presence means "finished". A restart with
the same model, input and shard size skips the finished shards (resume); with another model,
input or shard size it is refused (`BulkEmbedError`), since the shards would not belong to one
run.

Under ``torchrun`` (or any launcher that sets ``RANK`` and ``WORLD_SIZE``) process ``r`` of
``N`` embeds shards ``r, r+N, r+2N, …``; no process group is needed, since the processes only
split the work. Each shard's rows are computed from the same lines in the same batches whatever
the process, so the result equals a single process's.

Lines are split as Python's text mode splits them (``\\n``, ``\\r\\n``, ``\\r``) and stripped; an
empty line stays and gives the embedding of the empty string, so row i is line i+1.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path

import numpy as np

from ...data.text_input import is_stdin, spooled_input
from ...errors import BulkEmbedError, DataError, NonFiniteOutputError
from ...files import (
    atomic_write,
    json_field,
    read_json,
    remove_stale_temporaries,
    write_text_atomic,
)
from ..retrieval.dense import ModelIdentity, model_identity

__all__ = [
    "BulkEmbedError",
    "BulkPlan",
    "BulkResult",
    "embed_file",
    "embed_table",
    "load_shards",
    "process_slot",
]

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_SHARD_SIZE = 10_000


def shard_name(s: int) -> str:
    """File name of shard ``s`` (``shard-00000.npy``)."""
    return f"shard-{s:05d}.npy"


@dataclass(frozen=True)
class InputIdentity:
    """What identifies an input file: its name (for messages), size, content SHA-256 and
    line count."""

    name: str
    bytes: int
    sha256: str
    lines: int


@dataclass(frozen=True)
class BulkPlan:
    """The manifest of one bulk run: model, input, and shards of ``shard_size`` lines."""

    model: ModelIdentity
    input: InputIdentity
    shard_size: int

    @property
    def num_shards(self) -> int:
        """Number of shards (the last one may be short)."""
        return -(-self.input.lines // self.shard_size)

    def shard_range(self, s: int) -> tuple[int, int]:
        """0-based line range ``[start, stop)`` of shard ``s``."""
        start = s * self.shard_size
        return start, min(start + self.shard_size, self.input.lines)

    def to_json(self) -> str:
        """The ``manifest.json`` text: format version, model, input, shard size, shards."""
        shards = [
            {"file": shard_name(s), "start": a, "stop": b}
            for s in range(self.num_shards)
            for a, b in [self.shard_range(s)]
        ]
        body = {
            "format_version": FORMAT_VERSION,
            "model": asdict(self.model),
            "input": asdict(self.input),
            "shard_size": self.shard_size,
            "dimension": self.model.dimension,
            "dtype": "float32",
            "shards": shards,
        }
        return json.dumps(body, indent=1) + "\n"

    @classmethod
    def read(cls, directory: Path) -> BulkPlan:
        """The plan in ``directory/manifest.json``, validated: every field of the right type
        and range (a positive shard size and line count, a SHA-256, a dimension), and the
        shard list, dimension and dtype exactly what that plan writes; a manifest edited by
        hand is refused rather than trusted.

        Raises:
            BulkEmbedError: no manifest, another format version, or a manifest that cannot be
                read or does not describe a plan (one line naming the field).
        """
        path = Path(directory) / MANIFEST
        if not path.is_file():
            raise BulkEmbedError(f"{directory} has no {MANIFEST}: not a bulk-embedding output")

        def bad(problem: str) -> BulkEmbedError:
            return BulkEmbedError(
                f"{path}: {problem}; the manifest was edited or is corrupt: embed into a new "
                "output directory"
            )

        body = read_json(path, kind=None, error=lambda m: BulkEmbedError(f"cannot read {m}"))
        if not isinstance(body, dict):
            raise bad(f"a JSON {type(body).__name__}, not an object")
        if body.get("format_version") != FORMAT_VERSION:
            raise BulkEmbedError(
                f"{path}: format {body.get('format_version')!r} unsupported "
                f"(this version reads {FORMAT_VERSION})"
            )
        model, source = body.get("model"), body.get("input")
        schema = (  # the one type and range check of metadata fields (files.json_field)
            ("model", dict, None),
            ("input", dict, None),
            ("shard_size", int, 1),
            ("model.dimension", int, 1),
            ("input.lines", int, 1),
            ("input.bytes", int, 0),
            ("model.digest", str, None),
            ("model.pooling", str, None),
            ("input.name", str, None),
            ("input.sha256", str, None),
        )
        for name, kind, low in schema:
            json_field(body, name, kind, source="", low=low, error=bad)
        if len(source["sha256"]) != 64:
            raise bad(f"input.sha256 {source['sha256']!r} is not a SHA-256")
        # the claims are checked against each other before any list is built from them: a
        # line takes at least one byte (the last may lack its newline), and the manifest
        # lists every shard, so a claim of 10^12 lines costs nothing to refuse
        if source["lines"] > source["bytes"] + 1:
            raise bad(f"input.lines {source['lines']:,} exceeds input.bytes {source['bytes']:,}")
        shards = body.get("shards")
        claimed = -(-source["lines"] // body["shard_size"])
        if not isinstance(shards, list) or len(shards) != claimed:
            raise bad(f"shards is not what a plan of {source['lines']:,} lines in shards of "
                      f"{body['shard_size']:,} writes")  # fmt: skip
        try:
            plan = cls(ModelIdentity(**model), InputIdentity(**source), int(body["shard_size"]))
        except TypeError as e:
            raise bad(str(e)) from None
        expected = json.loads(plan.to_json())
        for key in expected:
            if body.get(key) != expected[key]:
                raise bad(f"{key} is not what a plan of {plan.input.lines:,} lines in shards of "
                          f"{plan.shard_size:,} writes")  # fmt: skip
        return plan


@dataclass(frozen=True)
class BulkResult:
    """What one process did: shards it embedded now, shards it found finished, its line count,
    texts truncated to the model's limit, and how many of all shards exist at the end."""

    plan: BulkPlan
    written: list[int]
    skipped: list[int]
    lines: int
    truncated: int
    finished_shards: int

    @property
    def complete(self) -> bool:
        """True when every shard of the plan exists (all processes are done)."""
        return self.finished_shards == self.plan.num_shards


def process_slot() -> tuple[int, int]:
    """``(rank, world_size)`` from the ``RANK`` / ``WORLD_SIZE`` environment variables that
    torchrun sets; ``(0, 1)`` when they are absent.

    Raises:
        BulkEmbedError: values that are not integers, or not 0 <= rank < world_size.
    """
    from ...runtime import MAX_PROCESSES, env_int

    try:
        rank = env_int("RANK", 0, maximum=MAX_PROCESSES)
        world = env_int("WORLD_SIZE", 1, minimum=1, maximum=MAX_PROCESSES)
    except ValueError as e:
        raise BulkEmbedError(str(e)) from e
    if world < 1 or not 0 <= rank < world:
        raise BulkEmbedError(f"need 0 <= RANK < WORLD_SIZE, got RANK={rank} WORLD_SIZE={world}")
    return rank, world


def _open_lines(path: Path) -> Iterator[str]:
    """The stripped lines of ``path``, read lazily (one line in memory at a time); lines end
    at ``\n`` only (`data.tables.iter_lines`), as every other reader of text counts them.

    Raises:
        BulkEmbedError: bytes that are not UTF-8 (naming the line), or an unreadable file.
    """
    from ...data.tables import iter_lines

    try:
        for _, line in iter_lines(path):
            yield line.strip()
    except DataError as e:
        raise BulkEmbedError(str(e)) from None


def input_identity(path: Path) -> InputIdentity:
    """Size, SHA-256 and line count of ``path``, in one streaming pass (constant memory).

    Raises:
        BulkEmbedError: a missing or unreadable file, a directory, one that is not UTF-8, or
            one with no text on any line.
    """
    path = Path(path)
    if not path.is_file():
        why = "it is a directory" if path.is_dir() else "it does not exist"
        raise BulkEmbedError(f"cannot read input file {path}: {why}")
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        raise BulkEmbedError(f"cannot read {path}: {e}") from e
    lines, any_text = 0, False
    for line in _open_lines(path):
        lines += 1
        any_text = any_text or bool(line)
    if not any_text:
        raise BulkEmbedError(f"input file {path} is empty (no text on any line)")
    return InputIdentity(path.name, path.stat().st_size, digest.hexdigest(), lines)


def _check_resume(found: BulkPlan, want: BulkPlan, directory: Path) -> None:
    """Refuse to resume a run whose model, input or shard size differ, naming both."""
    if not found.model.matches(want.model):
        m, w = found.model, want.model
        raise BulkEmbedError(
            f"{directory} holds embeddings of model {m.name!r} (digest {m.digest[:12]}, "
            f"dimension {m.dimension}, pooling {m.pooling}); this run's model is {w.name!r} "
            f"(digest {w.digest[:12]}, dimension {w.dimension}, pooling {w.pooling}): use that "
            "model to resume, or another output directory"
        )
    sizes = (found.input.lines, found.input.bytes) != (want.input.lines, want.input.bytes)
    if found.input.sha256 == want.input.sha256 and sizes:
        raise BulkEmbedError(
            f"{directory}/{MANIFEST} describes input {found.input.name!r} as "
            f"{found.input.lines:,} lines of {found.input.bytes:,} bytes, but that content has "
            f"{want.input.lines:,} lines of {want.input.bytes:,} bytes: the manifest was edited; "
            "embed into a new output directory"
        )
    if found.input.sha256 != want.input.sha256:
        raise BulkEmbedError(
            f"{directory} holds embeddings of input {found.input.name!r} ({found.input.lines:,} "
            f"lines, sha256 {found.input.sha256[:12]}); this run's input is {want.input.name!r} "
            f"({want.input.lines:,} lines, sha256 {want.input.sha256[:12]}): the file changed or "
            "is another one; use another output directory"
        )
    if found.shard_size != want.shard_size:
        raise BulkEmbedError(
            f"{directory} was started with shard size {found.shard_size:,}; this run asks for "
            f"{want.shard_size:,}: resume with --shard-size {found.shard_size}"
        )


def _prepare(directory: Path, plan: BulkPlan) -> None:
    """Create ``directory`` with the plan's manifest, or check the manifest already there.

    Every process writes the same manifest bytes (atomically), so concurrent starts agree.

    Raises:
        BulkEmbedError: ``directory`` is a file, holds other files but no manifest, or holds
            another run (`_check_resume`).
    """
    if directory.exists() and not directory.is_dir():
        raise BulkEmbedError(f"--output {directory} exists and is not a directory")
    if (directory / MANIFEST).is_file():
        _check_resume(BulkPlan.read(directory), plan, directory)
        return
    if directory.is_dir():
        other = [p.name for p in directory.iterdir() if not p.name.startswith(".")]
        if other:
            raise BulkEmbedError(
                f"--output {directory} is a directory with other files ({', '.join(other[:3])}) "
                "and no manifest; give a new or empty directory"
            )
    write_text_atomic(directory / MANIFEST, plan.to_json())


def _shard_done(directory: Path, plan: BulkPlan, s: int) -> bool:
    """True when shard ``s`` exists with the plan's shape (only its header is read).

    Raises:
        BulkEmbedError: a shard file of another shape or dtype (not written by this plan).
    """
    path = directory / shard_name(s)
    if not path.is_file():
        return False
    start, stop = plan.shard_range(s)
    try:
        arr = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as e:
        raise BulkEmbedError(f"cannot read {path}: {e}; delete it to embed it again") from e
    want = (stop - start, plan.model.dimension)
    if arr.shape != want or arr.dtype != np.float32:
        raise BulkEmbedError(
            f"{path} is {arr.dtype}{arr.shape}, the manifest says float32{want}; "
            "delete it to embed it again"
        )
    return True


def _remove_stale_temporaries(directory: Path, shards: list[int]) -> None:
    """Delete temporaries a killed run left for ``shards`` (only this process's shards, so a
    concurrent process's write in progress is never touched). Only entries this package
    wrote are deleted (`files.is_own_temporary`: the exact temporary name of one of these
    shards, owned by the user); a link is removed itself, never followed."""
    for s in shards:
        remove_stale_temporaries(directory, shard_name(s))


def _shard_lines(path: Path, plan: BulkPlan, mine: list[int]) -> Iterator[tuple[int, list[str]]]:
    """``(s, lines of shard s)`` for each shard in ``mine`` (ascending), reading the file once
    and keeping one shard's lines in memory."""
    lines = _open_lines(path)
    pos = 0
    for s in mine:
        start, stop = plan.shard_range(s)
        for _ in islice(lines, start - pos):  # skip other processes' and finished shards
            pass
        chunk = list(islice(lines, stop - start))
        pos = stop
        if len(chunk) != stop - start:
            raise BulkEmbedError(f"{path} changed while it was read (shard {s} is short)")
        yield s, chunk


def embed_file(
    embedder,
    input_path: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    shard_size: int = DEFAULT_SHARD_SIZE,
    batch_size: int = 32,
    rank: int = 0,
    world_size: int = 1,
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[BulkPlan, int], None] | None = None,
) -> BulkResult:
    """Embed every line of ``input_path`` into shards in ``output_dir`` (see the module
    docstring), resuming after the shards already finished.

    Args:
        embedder: a `SentenceEmbedder`.
        input_path: a UTF-8 text file, or ``-`` / ``/dev/stdin`` (kept once in a temporary
            file, `data.text_input.spooled_input`; the same content piped again resumes).
        shard_size: lines per shard (memory grows with it, not with the file).
        batch_size: texts per forward pass (`SentenceEmbedder.encode`).
        rank: this process embeds the shards s with s % world_size == rank.
        world_size: the number of processes sharing the shards.
        progress: called with the number of lines done after each batch.
        on_plan: called once before embedding with the plan and the number of lines this
            process still has to embed (to size a progress bar).

    Returns:
        A `BulkResult`; each shard is a float32 (shard lines, dimension) ``.npy`` file.

    Raises:
        BulkEmbedError: bad sizes or rank, an unusable input or output directory, or a restart
            with another model, input or shard size.
    """
    if shard_size < 1 or batch_size < 1:
        raise BulkEmbedError(f"shard_size and batch_size must be >= 1: {shard_size}, {batch_size}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise BulkEmbedError(f"need 0 <= rank < world_size, got rank {rank}, world {world_size}")
    if is_stdin(input_path):  # read once into a file: the plan hashes the input first
        with spooled_input(input_path) as spool:
            return embed_file(
                embedder,
                spool,
                output_dir,
                shard_size=shard_size,
                batch_size=batch_size,
                rank=rank,
                world_size=world_size,
                progress=progress,
                on_plan=on_plan,
            )
    input_path, directory = Path(input_path), Path(output_dir)
    plan = BulkPlan(model_identity(embedder), input_identity(input_path), shard_size)
    _prepare(directory, plan)
    mine = list(range(rank, plan.num_shards, world_size))
    _remove_stale_temporaries(directory, mine)
    skipped = [s for s in mine if _shard_done(directory, plan, s)]
    todo = sorted(set(mine) - set(skipped))
    todo_lines = sum(b - a for a, b in map(plan.shard_range, todo))
    if on_plan is not None:
        on_plan(plan, todo_lines)
    if skipped:
        log.info("resuming: %d of this process's %d shards are finished", len(skipped), len(mine))
    truncated = 0
    for s, texts in _shard_lines(input_path, plan, todo):
        try:
            vectors = embedder.encode(texts, batch_size=batch_size, progress=progress)
        except NonFiniteOutputError as e:  # name the input's lines, not the shard's rows
            first = plan.shard_range(s)[0]
            lines = [first + r + 1 for r in e.rows]
            shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
            raise NonFiniteOutputError(
                f"{input_path}: the model produced NaN or infinite embeddings for "
                f"{len(lines)} lines (lines {shown}); shard {s} is not written",
                [x - 1 for x in lines],
            ) from None
        truncated += embedder.last_truncated

        def save(tmp: Path, vectors=vectors) -> None:
            with open(tmp, "wb") as fh:
                np.save(fh, vectors)

        atomic_write(directory / shard_name(s), save)
    # counted from the shard files themselves (their headers: rows, dimension, dtype), so
    # "complete" means every row of the input is there
    finished = sum(_shard_done(directory, plan, s) for s in range(plan.num_shards))
    return BulkResult(plan, todo, skipped, todo_lines, truncated, finished)


def load_shards(output_dir: str | os.PathLike[str], *, mmap: bool = False) -> np.ndarray:
    """All rows of a finished bulk output, in line order: (lines, dimension) float32.

    Args:
        mmap: memory-map each shard (the concatenation still holds all rows in memory; iterate
            the shard files yourself for corpora larger than memory).

    Raises:
        BulkEmbedError: no manifest, or a shard missing or of the wrong shape.
    """
    directory = Path(output_dir)
    plan = BulkPlan.read(directory)
    missing = [s for s in range(plan.num_shards) if not _shard_done(directory, plan, s)]
    if missing:
        raise BulkEmbedError(
            f"{directory}: {len(missing)} of {plan.num_shards} shards are not finished "
            f"(first: {shard_name(missing[0])}); run the same embed command again to finish"
        )
    mode = "r" if mmap else None
    parts = [np.load(directory / shard_name(s), mmap_mode=mode) for s in range(plan.num_shards)]
    return np.concatenate(parts) if parts else np.zeros((0, plan.model.dimension), np.float32)


def embed_table(
    embedder,
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    id_column: str = "id",
    text_column: str = "text",
    with_text: bool = False,
    batch_size: int = 32,
    chunk_rows: int = DEFAULT_SHARD_SIZE,
    precision: str = "float32",
    progress: Callable[[int], None] | None = None,
    check: bool = True,
) -> tuple[int, int]:
    """Embed a text, JSONL or Parquet input (`data.table_io.iter_id_texts`: ids from
    ``id_column``, or 1-based line/row numbers; blank lines of a text file skipped) into one
    Parquet file (`data.table_io.EmbeddingTableWriter`) of ``id``, ``vector`` (and ``text``
    with ``with_text``), with the model identity in its metadata. Streams ``chunk_rows`` rows
    at a time (memory does not grow with the input) and writes atomically: the file appears
    whole when every row is done. A table is read through once first
    (`table_io.check_table`), so that bad rows refuse it before anything is embedded.

    Args:
        embedder: a `SentenceEmbedder`, or a `sparse.SparseEncoder` (SPLADE), whose rows are
            written as ``sparse_indices`` / ``sparse_values`` instead of ``vector``.
        precision: float32, or int8/uint8/binary/ubinary: a ``vector_<precision>`` column
            beside ``vector``, equal to `quantize.quantize_embeddings` of all the rows at once
            (int8/uint8 bucket with the minimum and maximum of every row of the output, so the
            floats are written to a sibling temporary file first and quantized in a second
            read; the ranges are stored in the metadata, to quantize queries alike).
        check: read a table through first (`table_io.check_table`); False when the caller
            has.

    Returns:
        ``(rows written, texts truncated to the model's limit)``.

    Raises:
        DataError: see `iter_id_texts`; an input with no text.
        InputError: an unknown precision, or a precision for a sparse encoder.
    """
    from ...data.table_io import EmbeddingTableWriter, check_table, iter_embedding_table
    from ...errors import DataError, InputError
    from .quantize import PRECISIONS, quantize_embeddings
    from .sparse import SparseEncoder

    sparse = isinstance(embedder, SparseEncoder)
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if sparse and precision != "float32":
        raise InputError("a sparse (SPLADE) encoder's vectors have no precision to choose")
    if check:
        check_table(input_path, id_column=id_column, text_column=text_column)
    identity = asdict(model_identity(embedder))
    dimension = embedder.dimension
    counts = [0, 0]
    ranged = precision in ("int8", "uint8")  # bucket edges from every row: a second pass

    def rows():
        from ...data.table_io import iter_id_texts

        for ids, texts in iter_id_texts(
            input_path, id_column=id_column, text_column=text_column, batch_rows=chunk_rows
        ):
            if sparse:
                vectors = embedder.encode(texts, batch_size=batch_size)
                if progress is not None:
                    progress(len(texts))
            else:
                vectors = embedder.encode(texts, batch_size=batch_size, progress=progress)
            counts[1] += embedder.last_truncated
            yield ids, vectors, texts if with_text else None

    def one_pass(tmp: Path, batches, writer_precision: str, ranges=None) -> int:
        with EmbeddingTableWriter(
            tmp, dimension, identity, with_text, precision=writer_precision,
            ranges=ranges, sparse=sparse,
        ) as out:  # fmt: skip
            for ids, vectors, texts in batches:
                if sparse:
                    out.write(ids, texts=texts, sparse=[(v.indices, v.values) for v in vectors])
                    continue
                quantized = None
                if writer_precision != "float32":
                    quantized = quantize_embeddings(vectors, writer_precision, ranges=ranges)
                out.write(ids, vectors, texts, quantized=quantized)
            return out.rows

    def write(tmp: Path) -> None:
        if not ranged:
            counts[0] = one_pass(tmp, rows(), precision)
        else:
            floats = tmp.with_name(tmp.name + "-float32")  # a sibling temporary too
            try:
                lo = np.full(dimension, np.inf, np.float32)
                hi = np.full(dimension, -np.inf, np.float32)

                def tracked():
                    for ids, vectors, texts in rows():
                        np.minimum(lo, vectors.min(0), out=lo)
                        np.maximum(hi, vectors.max(0), out=hi)
                        yield ids, vectors, texts

                if one_pass(floats, tracked(), "float32") < 2:
                    raise InputError(f"--precision {precision} needs at least two rows")
                again = iter_embedding_table(floats, batch_rows=chunk_rows)
                counts[0] = one_pass(tmp, again, precision, np.stack([lo, hi]))
            finally:
                floats.unlink(missing_ok=True)
        if not counts[0]:
            raise DataError(f"{input_path} holds no text (every row is blank)")

    atomic_write(Path(output_path), write)
    return counts[0], counts[1]
