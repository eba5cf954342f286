"""The training run directory on disk, trusted for nothing: tensor files loaded without running
code, stale temporaries of interrupted writes removed, a torn ``metrics.jsonl`` repaired.

Every file the trainer reads back (``checkpoint.pt``, ``best/model_state.pt``) goes through
`load_tensor_file`: ``torch.load(weights_only=True)``, which accepts tensors, numbers, strings,
lists, tuples and dicts and refuses any other Python object (a pickle that would call
``os.system`` is refused before anything runs). Every failure is a `RunDirectoryError` naming
the file.

`run_lock` holds ``.bertfamily.lock`` (an ``flock``) while a run writes the directory, so a
second run into the same directory is refused instead of interleaving its steps.

`write_run_record` writes ``run.json``: what repeats the run (command line, resolved
configuration, seed, thread counts, library versions, sha256 of every data file).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import pickle
import platform
import random
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checkpoints.io import torch_archive_problem
from ..errors import RunDirectoryError
from ..files import (
    OLD_TAG,
    TMP_TAG,
    atomic_write,
    is_own_temporary,
    parse_json,
    recover_directory,
)

__all__ = [
    "RunDirectoryError",
    "LOCK_FILE",
    "run_lock",
    "locks_run_directory",
    "seed_all",
    "load_tensor_file",
    "clean_run_directory",
    "read_metrics",
    "trim_metrics",
    "RUN_FILE",
    "run_record",
    "write_run_record",
]

RUN_FILE = "run.json"
_VERSIONED = ("bertfamily", "torch", "tokenizers", "transformers", "numpy", "safetensors")

logger = logging.getLogger(__name__)


LOCK_FILE = ".bertfamily.lock"
_HELD: dict[str, int] = {}  # run directories this process holds the lock of: nesting depth


def seed_all(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators: call it before building anything
    random (a fresh task head, a student), so the new weights depend on the seed alone."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _is_main_process() -> bool:
    return os.environ.get("RANK", "0") in ("", "0")


@contextlib.contextmanager
def run_lock(output_dir: str | Path) -> Iterator[None]:
    """Hold the run directory's lock (``output_dir/.bertfamily.lock``, an exclusive ``flock``)
    while the body runs; re-entrant within one process, taken on the main process only (rank 0
    of ``torchrun``). The kernel drops the lock when the process dies, even by SIGKILL, so a
    killed run never leaves a stale lock behind. Where ``fcntl`` is missing (Windows) nothing
    is locked.

    Raises:
        RunDirectoryError: another process holds the lock (the message gives its pid), or the
            lock file cannot be created (e.g. it is a symlink or a directory).
    """
    directory = Path(output_dir)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        fcntl = None
    if fcntl is None or not _is_main_process():
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    key = str(directory.resolve())
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    path = directory / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as e:
        raise RunDirectoryError(f"cannot create the run lock {path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        other = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise RunDirectoryError(
            f"{directory} is being written by another run (pid {other}); wait for it to end "
            "or give another output directory"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[key] = 1
        yield
    finally:
        _HELD.pop(key, None)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def locks_run_directory(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a recipe ``fn(cfg, train: TrainConfig, ...)`` to run under
    ``run_lock(train.output_dir)``."""

    @functools.wraps(fn)
    def locked(cfg: Any, train: Any, *args: Any, **kwargs: Any) -> Any:
        with run_lock(train.output_dir):
            return fn(cfg, train, *args, **kwargs)

    return locked


def _refused_global(message: str) -> str | None:
    """The Python global a weights-only load refused (e.g. ``posix.system``), if named."""
    m = re.search(r"GLOBAL ([\w.]+)", message)
    return m.group(1) if m else None


def load_tensor_file(path: str | Path, what: str = "file") -> Any:
    """Load a ``torch.save`` file without running code (``weights_only=True``, on the CPU).

    Args:
        path: the file.
        what: what the file should be, for messages ("checkpoint", "model state").

    Raises:
        RunDirectoryError: the file is missing, a directory, empty, truncated or corrupt,
            holds Python objects other than tensors and plain containers (refused unread), or
            holds zip records that would unpack to more than the file
            (`checkpoints.io.torch_archive_problem`: compressed, oversized).
    """
    path = Path(path)
    if path.is_dir():
        raise RunDirectoryError(f"{path} is a directory, not a {what} file")
    if not path.exists():
        raise RunDirectoryError(f"{path} does not exist (no {what} to load)")
    try:
        size = path.stat().st_size
    except OSError as e:
        raise RunDirectoryError(f"cannot read {what} {path}: {e}") from None
    if size == 0:
        raise RunDirectoryError(f"{what} {path} is empty (0 bytes); delete it or start afresh")
    problem = torch_archive_problem(path)  # before anything is unpacked: no zip bombs
    if problem is not None:
        raise RunDirectoryError(f"refused to load {what} {path}: {problem}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        name = _refused_global(str(e))
        if name is not None:
            hint = ""
            if name and name.startswith("numpy"):
                hint = " (a checkpoint of an older bertfamily, which stored numpy objects)"
            raise RunDirectoryError(
                f"refused to load {what} {path}: it holds Python objects that could run code "
                f"when loaded ({name}){hint}; only tensors, numbers, "
                "strings, lists and dicts are accepted"
            ) from None
        detail = next(
            (line.strip() for line in str(e).splitlines() if line.startswith("Unsupported")),
            str(e).splitlines()[0] if str(e) else "unreadable",
        )
        raise RunDirectoryError(
            f"{what} {path} is corrupt or truncated, or not a torch.save file of tensors and "
            f"plain values ({size} bytes): {detail}"
        ) from None
    except KeyboardInterrupt:
        raise
    except Exception as e:  # EOFError, zip reader RuntimeError, OSError, ...
        detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunDirectoryError(
            f"{what} {path} is corrupt or truncated ({size} bytes): {detail}"
        ) from None


def clean_run_directory(output_dir: str | Path, subdirs: tuple[str, ...] = ()) -> list[str]:
    """Remove what interrupted atomic writes left in ``output_dir``: stale ``.<name>.tmp-*``
    files and directories, and ``.<name>.old-*`` directories of an interrupted directory swap
    (put back first when ``<name>`` itself is missing; see `bertfamily.files.recover_directory`).
    The same is done inside each of ``subdirs`` that exists as a real directory (a subdirectory
    that is a symbolic link is not entered). Only entries named exactly as `bertfamily.files`
    names its temporaries, and owned by the user, are removed (`files.is_own_temporary`).
    Returns the names cleaned up."""
    output_dir = Path(output_dir)
    cleaned: list[str] = []
    for directory in (output_dir, *(output_dir / s for s in subdirs)):
        if not directory.is_dir() or (directory != output_dir and directory.is_symlink()):
            continue
        names = set()
        for entry in directory.iterdir():
            if not entry.name.startswith(".") or not is_own_temporary(entry):
                continue
            for tag in (TMP_TAG, OLD_TAG):
                if tag in entry.name[1:]:
                    names.add(entry.name[1:].rsplit(tag, 1)[0])
                    cleaned.append(str(entry.relative_to(output_dir)))
        for name in sorted(names):
            if name:
                recover_directory(directory / name)
    if cleaned:
        logger.warning(
            "%s: removed stale temporaries of interrupted writes: %s",
            output_dir,
            cleaned,
        )
    return cleaned


def _parse(line: bytes) -> dict | None:
    try:  # the bounded parser (files.parse_json): a torn, undecodable or too deep line is None
        return parse_json(line, source="a metrics line", error=ValueError)
    except ValueError:
        return None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl``, skipping lines that are not JSON objects (a line torn
    by a kill while it was appended) with a warning naming the file. A missing file: []."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise RunDirectoryError(f"cannot read metrics log {path}: {e}") from None
    records, bad = [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            bad += len(line)
        else:
            records.append(record)
    if bad:
        logger.warning("%s: skipped %d bytes of torn or unparsable lines", path, bad)
    return records


def trim_metrics(path: str | Path, last_step: int) -> None:
    """Make ``metrics.jsonl`` fit a run that continues after step ``last_step``: drop a torn
    tail (and any other line that is not a JSON object), warning with the bytes dropped, and
    drop the records of steps after ``last_step`` (they are trained, and logged, again). The
    file is rewritten atomically, and only when something changes.

    Raises:
        RunDirectoryError: the path exists but cannot be read (e.g. a directory).
    """
    path = Path(path)
    if path.is_dir():
        raise RunDirectoryError(f"{path} is a directory, not the metrics log")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    except OSError as e:
        raise RunDirectoryError(f"cannot read metrics log {path}: {e}") from None
    keep: list[bytes] = []
    torn = later = 0
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        record = _parse(line)
        if record is None:
            torn += len(line) + (i < len(lines) - 1)  # with its newline, when it had one
            continue
        step = record.get("step")
        if isinstance(step, (int, float)) and step > last_step:
            later += 1
            continue
        keep.append(line)
    new = b"".join(line + b"\n" for line in keep)
    if new == data:
        return
    if torn:
        logger.warning(
            "%s: dropped %d bytes of a torn or unparsable line (a write cut short by a kill)",
            path,
            torn,
        )
    if later:
        logger.warning(
            "%s: dropped %d records of steps after %d (those steps are trained again)",
            path,
            later,
            last_step,
        )
    atomic_write(path, lambda tmp: tmp.write_bytes(new))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _data_files(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """``{"path", "bytes", "sha256"}`` of each file, and of every file under each directory
    (sorted); a path that does not exist is recorded with ``"missing": true``."""
    out: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
        for f in files:
            if not f.is_file():
                out.append({"path": str(f), "missing": True})
                continue
            out.append({"path": str(f.resolve()), "bytes": f.stat().st_size, "sha256": _sha256(f)})
    return out


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def run_record(
    config: dict[str, Any], data_files: Iterable[str | Path], seed: int
) -> dict[str, Any]:
    """What repeats a run, as plain JSON values.

    Args:
        config: the resolved configuration, by part (e.g. ``{"pretrain": PretrainConfig,
            "train": TrainConfig, "model": EncoderConfig}``; dataclasses become dicts).
        data_files: files and directories the run reads (corpus, tokenizer, initial model):
            each file's path, size and sha256 are recorded.
        seed: the run's seed.

    Returns:
        ``{"argv", "config", "seed", "threads", "versions", "data", "platform", "started"}``:
        ``argv`` is ``sys.argv``; ``threads`` torch's intra-op and inter-op thread counts and
        the ``OMP_NUM_THREADS`` / ``TOKENIZERS_PARALLELISM`` environment; ``versions`` python
        and the installed bertfamily, torch, tokenizers, transformers (None when absent),
        numpy, safetensors.
    """
    import torch

    versions = {"python": platform.python_version()}
    versions.update({name: _version(name) for name in _VERSIONED})
    return {
        "argv": list(sys.argv),
        "config": _plain(config),
        "seed": seed,
        "threads": {
            "torch_intra_op": torch.get_num_threads(),
            "torch_inter_op": torch.get_num_interop_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM"),
        },
        "versions": versions,
        "data": _data_files(data_files),
        "platform": {"system": platform.platform(), "machine": platform.machine()},
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_run_record(
    output_dir: str | Path,
    config: dict[str, Any],
    data_files: Iterable[str | Path],
    seed: int,
) -> dict[str, Any]:
    """Write `run_record` to ``output_dir/run.json`` atomically (call on the main process;
    a resumed run rewrites it with its own command line). Returns the record."""
    record = run_record(config, data_files, seed)
    path = Path(output_dir) / RUN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2)
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return record
