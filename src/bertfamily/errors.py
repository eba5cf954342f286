"""Every error bertfamily raises on purpose, under one base, `BertFamilyError`.

Each class also derives from the built-in exception users already catch for that kind of
problem (`ValueError` for bad input, files and configs; `OSError`-free by design: a file that
cannot be read raises the built-in `OSError` itself; `RuntimeError` for a failed download;
`ModuleNotFoundError` for a missing optional package), so ``except ValueError`` keeps working.
The library boundary (`as_user_error`) also turns the third-party exceptions a user's input
or machine causes (a file the system refuses, a full disk, bytes that are not UTF-8, input
nested too deeply, faiss's and Ray's errors) into one-line `BertFamilyError`s, the original
kept as the cause. The command line prints that as ``error: …`` with exit code 2 (the cause's
traceback too under ``-v``); anything else is a bug and shows its traceback.

This module imports nothing of ours (floor 0): every floor may raise these.
"""

from __future__ import annotations

import errno
from pathlib import Path

__all__ = [
    "ArgumentTypeError",
    "BertFamilyError",
    "InputError",
    "JSONFileError",
    "UnknownNameError",
    "BulkEmbedError",
    "CacheCorruptError",
    "CheckpointError",
    "ConfigError",
    "DataEngineError",
    "DataError",
    "FetchError",
    "FileAccessError",
    "MissingDependency",
    "ModelDirectoryError",
    "ModelNotFoundError",
    "NonFiniteOutputError",
    "QuantizationError",
    "RunDirectoryError",
    "SentenceModulesError",
    "ServeError",
    "TokenizerFileError",
    "TokenizerNotFoundError",
    "UnsafePathError",
    "VectorIndexError",
    "as_user_error",
]


class BertFamilyError(Exception):
    """Base of every error bertfamily raises on purpose; the message says what was wrong with
    which input (file, field, argument) and, where there is one, the fix."""


class InputError(BertFamilyError, ValueError):
    """An argument or input value bertfamily cannot use: out of range, the wrong shape or
    length, inconsistent with another argument, or an empty input; the message names it."""


class ArgumentTypeError(BertFamilyError, TypeError):
    """An argument of the wrong type, or a keyword argument the function does not take."""


class UnknownNameError(BertFamilyError, KeyError):
    """A name (preset, model, resource) that is not known; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# --- configuration and model directories -------------------------------------------------------


class ConfigError(BertFamilyError, ValueError):
    """A config field has the wrong type, is out of range or is inconsistent with another, or
    the model it describes exceeds the parameter budget; the message names the field(s) and the
    value(s)."""


class ModelDirectoryError(BertFamilyError, ValueError):
    """A model directory lacks config.json or weights, names an unsupported model_type, or
    holds a file that is corrupt, truncated, refused or inconsistent; the message names the
    file and the problem."""


class SentenceModulesError(ModelDirectoryError):
    """A sentence-transformers directory lists a module we cannot run, in an order we cannot
    run, or a module file with a wrong value or shape; the message names the file."""


class CheckpointError(BertFamilyError, ValueError):
    """A checkpoint does not match the model: lists every missing, unexpected and mismatched key.

    Attributes:
        missing: model keys the checkpoint lacks.
        unexpected: checkpoint keys the model does not have.
        mismatched: keys present in both with different shapes (``"key: (a, b) vs (c, d)"``).
    """

    def __init__(
        self,
        message: str,
        missing: list[str] = (),
        unexpected: list[str] = (),
        mismatched: list[str] = (),
    ) -> None:
        super().__init__(message)
        self.missing, self.unexpected, self.mismatched = (
            list(missing),
            list(unexpected),
            list(mismatched),
        )


class UnsafePathError(BertFamilyError, ValueError):
    """A write or a deletion bertfamily refuses because it would leave its target directory: a
    path through a symbolic link (a linked subdirectory, or a target that is itself a link
    where a directory is replaced whole), a name with ``..`` or an absolute path, or a file it
    cannot prove it wrote. The message names the path and the link; nothing was written."""


# --- tokenizers --------------------------------------------------------------------------------


class TokenizerNotFoundError(BertFamilyError, ValueError):
    """A directory holds none of the files a tokenizer can be built from."""


class TokenizerFileError(BertFamilyError, ValueError):
    """A tokenizer file (``tokenizer.json``, a SentencePiece ``.model``, ``vocab.txt``,
    ``vocab.json``/``merges.txt``, ``tokenizer_config.json``, ``special_tokens_map.json``,
    ``config.json``) is unreadable or malformed, ``vocab.txt`` lists a token twice, or a
    SentencePiece model belongs to a family bertfamily cannot place; the message names the
    file."""


class ModelNotFoundError(ModelDirectoryError, TokenizerNotFoundError):
    """A model name is neither a local directory, a fetched resource nor in the local Hugging
    Face cache; the message lists every place that was looked at. Both a `ModelDirectoryError`
    and a `TokenizerNotFoundError`, which the loaders raised for a missing directory before
    they shared one resolver."""


# --- resources and data ------------------------------------------------------------------------


class FetchError(BertFamilyError, RuntimeError):
    """A resource could not be downloaded, verified or unpacked."""


class CacheCorruptError(FetchError, ValueError):
    """A cache entry does not match its manifest: a file was changed, truncated, removed or
    added, or the manifest itself is missing, corrupt or unverifiable. The message names the
    file and the command that re-fetches the entry.

    Attributes:
        name: the resource.
        entry: the cache entry directory.
        file: the offending path, relative to ``entry`` (the manifest's name when the manifest
            itself is the problem).
    """

    def __init__(self, name: str, entry: Path, file: str, problem: str) -> None:
        self.name, self.entry, self.file = name, entry, file
        super().__init__(
            f"cache entry {name!r} ({entry}) cannot be trusted: {file}: {problem}. "
            f"Nothing in it was used; {refetch_hint(name)}."
        )


def refetch_hint(name: str) -> str:
    """The remedy for a bad cache entry ``name``, for error messages."""
    return (
        f"delete it and download it again with `bertfamily fetch {name} --force` "
        f"(in Python: bertfamily.resources.fetch({name!r}, force=True))"
    )


class FileAccessError(BertFamilyError, OSError):
    """The operating system refused a file or device: missing, a directory where a file
    belongs, permission denied, the disk full, a read-only file system. An `OSError` (``errno``
    and ``filename`` are the refused call's); the message names the path and, where there is
    one, the fix."""

    def __str__(self) -> str:  # OSError would print "[Errno N] strerror: filename"
        return str(self.args[0]) if self.args else ""


class DataEngineError(BertFamilyError, RuntimeError):
    """A data engine (Ray, Spark) failed for a reason of its own: a worker died, the object
    store is full, a timeout; the message is the engine's first line, its error the cause."""


class DataError(BertFamilyError, ValueError):
    """A data file is missing, malformed or lacks a named column."""


class JSONFileError(BertFamilyError, ValueError):
    """A JSON metadata file (`files.read_json`) is missing, a directory, unreadable, too large,
    not UTF-8, not JSON, nested too deep, or holds the wrong kind of value; the message names
    the file. Readers of model directories, tokenizers, indexes and run directories raise their
    own class (`ModelDirectoryError`, `TokenizerFileError`, …) for the same problems."""


class MissingDependency(BertFamilyError, ModuleNotFoundError, RuntimeError):
    """An optional package a feature needs is not installed; the message names the fix.

    A `ModuleNotFoundError` (so ``except ImportError`` catches it) and a `RuntimeError`.
    """


# --- training, inference, serving ---------------------------------------------------------------


class RunDirectoryError(BertFamilyError, ValueError):
    """A file of a training run directory cannot be used: missing, unreadable, empty or
    truncated, refused because loading it would run code, the wrong kind of file (a directory
    where a file belongs), or written for another model. The message names the file and the
    problem."""


class NonFiniteOutputError(BertFamilyError, ValueError):
    """A model produced NaN or ±inf outputs (diverged weights, an overflowing run dtype); the
    message names the input rows (``rows``: their positions, counting from 0). Nothing is
    written."""

    def __init__(self, message: str, rows: list[int] | None = None):
        super().__init__(message)
        self.rows = list(rows or [])


class QuantizationError(BertFamilyError, ValueError):
    """A quantised model that cannot run here or cannot meet its accuracy bar."""


class BulkEmbedError(BertFamilyError, ValueError):
    """An input, output directory or process setting that bulk embedding cannot use, or a
    restart that does not match the run it would resume."""


class VectorIndexError(BertFamilyError, ValueError):
    """An index directory that cannot be read, or a model that does not match it."""


class ServeError(BertFamilyError):
    """A request the server refuses: HTTP ``status`` and TEI's ``error_type``."""

    def __init__(self, status: int, message: str, error_type: str = "Validation") -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


# --- the library boundary: third-party exceptions as one-line errors ---------------------------
_OS_PROBLEMS = {
    errno.ENOSPC: "no space left on the device (the disk is full: free some space or write "
    "elsewhere)",
    errno.EDQUOT: "disk quota exceeded (free some space or write elsewhere)",
    errno.EROFS: "the file system is read-only (write elsewhere)",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "it is a directory, where a file belongs",
    errno.ENOTDIR: "a part of the path is a file, where a directory belongs",
    errno.ENOENT: "no such file or directory",
    errno.EMFILE: "too many open files (raise the limit: ulimit -n)",
}


# how torch reports a failed allocation (CPU allocator; CUDA's OutOfMemoryError is a RuntimeError)
_ALLOCATION_FAILURES = ("can't allocate memory", "out of memory", "Cannot allocate memory")


def _first_line(text: str, limit: int = 300) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether ``exc`` comes from ``package``: its class was defined there, or a frame of its
    traceback runs that package's Python code (faiss raises the built-in RuntimeError)."""
    if any(c.__module__.split(".")[0] == package for c in type(exc).__mro__):
        return True
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0] == package:
            return True
        tb = tb.tb_next
    return False


def _os_error(exc: OSError) -> FileAccessError:
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    problem = _OS_PROBLEMS.get(exc.errno) or exc.strerror or _first_line(str(exc))
    out = FileAccessError(f"{where}: {problem}" if where else f"{problem} ({type(exc).__name__})")
    out.errno, out.strerror, out.filename = exc.errno, exc.strerror, exc.filename
    return out


def as_user_error(exc: BaseException) -> BertFamilyError | None:
    """The one-line `BertFamilyError` a user should see for ``exc``, or None when ``exc`` is a
    bug (its traceback should be shown). The one mapping of the library boundary: the command
    line's ``handle_errors`` uses it, and so can the server's exception handlers.

    - a Ray error (``ray.exceptions``) that wraps another (a task's exception): that one,
      mapped again (a `BertFamilyError` raised in a Ray worker comes back as itself, not as
      Ray's multi-line traceback; a bug stays a bug); one that wraps nothing (a worker died,
      the object store full, a timeout): a `DataEngineError` with its first line;
    - a `BertFamilyError`: itself;
    - an `OSError` (missing file, directory, permission, disk full ``ENOSPC``, read-only):
      a `FileAccessError` naming the path and the problem;
    - `UnicodeDecodeError`: a `DataError` (bytes that are not UTF-8: the byte and offset);
    - `RecursionError`: an `InputError` (input nested too deeply to process);
    - a RuntimeError raised by faiss: a `VectorIndexError` with faiss's first line;
    - `MemoryError`, or torch's failed allocation (a RuntimeError, CUDA's out of memory): an
      `InputError` saying so, with the sizes to lower.

    A new error's ``__cause__`` is ``exc`` (shown with ``-v``); ``exc`` itself is unchanged.
    """
    if _raised_in(exc, "ray"):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException) and cause is not exc:
            return as_user_error(cause)
        if not isinstance(exc, BertFamilyError):
            return _caused(DataEngineError(f"Ray: {_first_line(str(exc))}"), exc)
    if isinstance(exc, BertFamilyError):
        return exc
    out: BertFamilyError | None = None
    if isinstance(exc, OSError):
        out = _os_error(exc)
    elif isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.start + 1]
        out = DataError(
            f"input is not UTF-8 text: byte {bad!r} at offset {exc.start} cannot be decoded "
            "as UTF-8; save it as UTF-8"
        )
    elif isinstance(exc, RecursionError):
        out = InputError(
            "input nested too deeply to process (Python's recursion limit was reached); "
            "check that it is what you meant to give"
        )
    elif isinstance(exc, RuntimeError) and (_raised_in(exc, "faiss") or "faiss::" in str(exc)):
        out = VectorIndexError(f"faiss: {_first_line(str(exc))}")
    elif isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and any(m in str(exc) for m in _ALLOCATION_FAILURES)
    ):
        out = InputError(
            f"not enough memory ({_first_line(str(exc), 160) or type(exc).__name__}): use "
            "smaller batches (--batch-size), shorter inputs (--max-length) or a smaller model"
        )
    return None if out is None else _caused(out, exc)


def _caused(out: BertFamilyError, cause: BaseException) -> BertFamilyError:
    out.__cause__ = cause
    return out
