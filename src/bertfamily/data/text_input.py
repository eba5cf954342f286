"""The one reader of text inputs: a file of one text a line, or standard input.

Every command that reads texts a line at a time (``embed --input``, ``search --corpus``,
``rerank --input``, ``mine-negatives --corpus``, ``index build --corpus``, the pretraining
corpus) reads through here, so they agree on:

- **where:** a path, or ``-`` / ``/dev/stdin`` for standard input (read once, whole);
- **what is refused**, with one `DataError` line naming the input: a path that does not exist,
  a directory, a file the system will not let us read, bytes that are not UTF-8 (the line and
  column of the first bad byte), and an input with no text on any line;
- **lines:** they end at ``\\n`` only (``\\r\\n`` too), as ``wc -l``, ``sed -n Np`` and an
  editor count them: a lone ``\\r``, U+2028 or a form feed stays inside its line, so a line
  number names the line the user sees (`text_lines`); a leading BOM is dropped;
- **blank lines** (empty or whitespace only) hold no text. `read_text_lines` strips every line
  and either keeps a blank one as ``""`` (``blank="keep"``: item i is line i + 1, for outputs
  that follow the input line by line) or drops it (``blank="skip"``: documents and corpora).

Tables (CSV/TSV/JSONL/Parquet) are read by `table_io`, whose plain-text kind streams through
`iter_input_lines` here.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError

__all__ = [
    "STDIN_NAMES",
    "check_input_file",
    "input_name",
    "is_stdin",
    "iter_input_lines",
    "read_input_text",
    "read_text_lines",
    "spooled_input",
    "text_lines",
]

#: The names that mean standard input.
STDIN_NAMES = ("-", "/dev/stdin")

BLANK_POLICIES = ("keep", "skip")


def is_stdin(path: str | os.PathLike[str] | None) -> bool:
    """Whether ``path`` names standard input (``-`` or ``/dev/stdin``)."""
    return path is not None and os.fspath(path) in STDIN_NAMES


def input_name(path: str | os.PathLike[str]) -> str:
    """``path`` as messages name it (``<stdin>`` for standard input)."""
    return "<stdin>" if is_stdin(path) else os.fspath(path)


def text_lines(text: str) -> list[str]:
    """Lines as an editor counts them: split at ``\\n`` only (``str.splitlines`` would also
    split at U+2028, form feeds and others, which JSON strings may hold), ``\\r`` stripped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def check_input_file(path: str | os.PathLike[str], what: str = "input file") -> None:
    """Refuse a path that is not a file to read (standard input always passes).

    Raises:
        DataError: ``cannot read {what} {path}: it does not exist`` (or ``it is a
            directory``, ``it is not a regular file``).
    """
    if is_stdin(path):
        return
    path = Path(path)
    if path.is_file():
        return
    if path.is_dir():
        why = "it is a directory"
    elif path.exists():
        why = "it is not a regular file"
    else:
        why = "it does not exist"
    raise DataError(f"cannot read {what} {path}: {why}")


def _read_bytes(path: str | os.PathLike[str], what: str) -> bytes:
    if is_stdin(path):
        return sys.stdin.buffer.read()
    check_input_file(path, what)
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise DataError(f"cannot read {what} {path}: {e.strerror or e}") from e


def _not_utf8(name: str, line: int, column: int, byte: bytes) -> DataError:
    return DataError(
        f"{name}:{line}: not UTF-8 (byte {byte!r} at column {column}); save the file as UTF-8"
    )


def read_input_text(path: str | os.PathLike[str], *, what: str = "input file") -> str:
    """The whole text of a UTF-8 file or of standard input (``-``, ``/dev/stdin``): a leading
    BOM dropped, line ends as they are (see `text_lines`).

    Raises:
        DataError: see `check_input_file`; the system refused the read (permissions); bytes
            that are not UTF-8 (the line and column named).
    """
    raw = _read_bytes(path, what)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        start = e.start + (3 if raw.startswith(codecs.BOM_UTF8) else 0)
        line = raw.count(b"\n", 0, start) + 1
        column = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        raise _not_utf8(input_name(path), line, column, raw[start : start + 1]) from None


def read_text_lines(
    path: str | os.PathLike[str], *, blank: str = "skip", what: str = "input file"
) -> list[str]:
    """The stripped lines of a UTF-8 text file or of standard input, one text a line.

    Args:
        path: a file, or ``-`` / ``/dev/stdin``.
        blank: ``"keep"``: a blank line stays, as ``""`` (item i is line i + 1); ``"skip"``:
            blank lines are dropped.
        what: what the input is, for messages ("input file", "corpus").

    Raises:
        DataError: see `read_input_text`; no text on any line (``{what} {path} is empty``).
        InputError: ``blank`` is not keep or skip.
    """
    if blank not in BLANK_POLICIES:
        from ..errors import InputError

        raise InputError(f"blank must be keep or skip, got {blank!r}")
    lines = [line.strip() for line in text_lines(read_input_text(path, what=what))]
    if not any(lines):
        raise DataError(f"{what} {input_name(path)} is empty (no text on any line)")
    return lines if blank == "keep" else [line for line in lines if line]


def iter_input_lines(
    path: str | os.PathLike[str], *, what: str = "input file"
) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file or of standard input, read lazily: lines
    as `text_lines` counts them, numbered from 1, a leading BOM dropped, not stripped.

    Raises:
        DataError: see `check_input_file`; the system refused the read; a line that is not
            UTF-8 (the line and column named).
    """
    name = input_name(path)
    if is_stdin(path):
        yield from _decoded(sys.stdin.buffer, name)
        return
    check_input_file(path, what)
    try:
        with open(path, "rb") as fh:
            yield from _decoded(fh, name)
    except OSError as e:
        raise DataError(f"cannot read {what} {path}: {e.strerror or e}") from e


def _decoded(fh, name: str) -> Iterator[tuple[int, str]]:
    for n, raw in enumerate(fh, 1):  # binary lines end at b"\n" only
        if n == 1:
            raw = raw.removeprefix(codecs.BOM_UTF8)
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _not_utf8(name, n, e.start + 1, raw[e.start : e.start + 1]) from None
        yield n, line.removesuffix("\n").removesuffix("\r")


@contextlib.contextmanager
def spooled_input(path: str | os.PathLike[str]) -> Iterator[Path]:
    """``path`` as a file that can be read more than once: standard input (``-``,
    ``/dev/stdin``) is copied once into a temporary file (removed on exit), for readers that
    pass over their input twice (`pipelines.embedding.bulk.embed_file` hashes it first);
    any other path is given back as it is.

    Raises:
        DataError: the temporary file could not be written.
    """
    if not is_stdin(path):
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="bertfamily-stdin-") as tmp:
        spool = Path(tmp) / "stdin.txt"
        try:
            with open(spool, "wb") as fh:
                shutil.copyfileobj(sys.stdin.buffer, fh)
        except OSError as e:
            raise DataError(f"cannot keep standard input in {tmp}: {e.strerror or e}") from e
        yield spool
