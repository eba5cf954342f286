"""Every error bertfamily raises on purpose, under one base, `BertFamilyError`.

Each class also derives from the built-in exception users already catch for that kind of
problem (`ValueError` for bad input, files and configs; `OSError`-free by design: a file that
cannot be read raises the built-in `OSError` itself; `RuntimeError` for a failed download;
`ModuleNotFoundError` for a missing optional package), so ``except ValueError`` keeps working.
The command line turns a `BertFamilyError` (and an `OSError`) into a one-line ``error: …``
message with exit code 2; anything else is a bug and shows its traceback.

This module imports nothing (floor 0): every floor may raise these.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ArgumentTypeError",
    "BertFamilyError",
    "InputError",
    "UnknownNameError",
    "BulkEmbedError",
    "CacheCorruptError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "FetchError",
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


class DataError(BertFamilyError, ValueError):
    """A data file is missing, malformed or lacks a named column."""


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
