"""Atomic writes of files and whole directories, shared by checkpoints, tokenizers, run outputs
and the CLI, and the one bounded reader of JSON metadata files (`read_json`; `parse_json` for
JSON text, `json_field` for a field's type and range) (torch-free).

A file write goes to a temporary file beside the target and is renamed onto it; a directory
save is built in a sibling temporary directory and swapped in. Readers see the old content or
the new, never a mix; created files and directories get the permissions of the user's umask
(``tempfile`` would make them private).

Writes stay inside their target: a write below a directory being built (`atomic_directory`) or
below a ``root`` given to `atomic_write` goes through real directories only, never through a
symbolic link out of it (`check_inside`); a directory swapped in whole must not itself be a
link; and the clean-up of interrupted writes deletes only entries named as this module names
its temporaries, owned by the user, never through a link (`remove_inside`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import JSONFileError, UnsafePathError

log = logging.getLogger(__name__)

TMP_TAG = ".tmp-"  # sibling temporaries: .<name>.tmp-<random>
OLD_TAG = ".old-"  # the previous directory during a swap: .<name>.old-<random>
# the random parts: tempfile's 8 characters, and uuid4's first 8 hex digits
_TMP_SUFFIX = re.compile(r"[a-z0-9_]{8}")
_OLD_SUFFIX = re.compile(r"[0-9a-f]{8}")
# the directories `atomic_directory` is building (innermost last): writes below them are checked
_BUILDING: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar("building", default=())


def _absolute(path: Path) -> Path:
    """``path`` made absolute without following links (``..`` folded lexically)."""
    return Path(os.path.abspath(path))


def check_inside(root: Path, path: Path) -> Path:
    """``path`` after checking that a write there stays inside ``root``: it lies below
    ``root`` with no ``..`` on the way (the system applies ``..`` after following a link),
    and every directory between ``root`` and it that exists is a real directory, not a
    symbolic link. ``path`` itself may be a link to a file: writes replace it by a rename
    (`atomic_write`), never write through it. ``root`` itself may be a link: the caller
    named it.

    Raises:
        UnsafePathError: ``path`` is outside ``root``, holds ``..`` below it, or a directory
            on the way is a link (the message names it and where it points) or a file.
    """
    root_abs, path_abs = _absolute(root), _absolute(path)
    head, parts = Path(root).parts, Path(path).parts
    below = parts[len(head) :] if parts[: len(head)] == head else parts
    if ".." in below:  # the system resolves ".." after a link, not before: never fold it
        raise UnsafePathError(f"refusing to write {path}: a '..' in a path below {root}")
    try:
        rel = path_abs.relative_to(root_abs)
    except ValueError:
        raise UnsafePathError(
            f"refusing to write {path}: it is outside {root}, the directory being written"
        ) from None
    here = root_abs
    for part in rel.parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise UnsafePathError(
                f"refusing to write {path}: {here} is a symbolic link (to "
                f"{os.readlink(here)}); writes stay inside {root} and never go through a link "
                "(remove the link, or write elsewhere)"
            )
        if here.exists() and not here.is_dir():
            raise UnsafePathError(f"refusing to write {path}: {here} is not a directory")
    return path


def _root_for(path: Path) -> Path | None:
    """The innermost directory being built (`atomic_directory`) that holds ``path``."""
    path_abs = _absolute(path)
    for root in reversed(_BUILDING.get()):
        if path_abs.is_relative_to(root):
            return root
    return None


def make_directory_inside(root: Path, path: Path) -> Path:
    """Create directory ``path`` (and its parents) below ``root`` without going through a
    link (`check_inside`); an existing link in its place is refused.

    Raises:
        UnsafePathError: see `check_inside`; ``path`` itself is a link.
    """
    path = Path(path)
    check_inside(root, path / "_")
    path.mkdir(parents=True, exist_ok=True)
    return path


def remove_inside(root: Path, path: Path) -> bool:
    """Delete the file (or link) ``path`` when it lies below ``root`` through real
    directories only; anything else is left, with a warning. Returns whether it was deleted.
    A link is removed itself; what it points to is never touched."""
    try:
        check_inside(root, path)
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except UnsafePathError:
        log.warning("kept %s: it lies behind a symbolic link or outside %s", path, root)
        return False
    if stat.S_ISDIR(st.st_mode):
        log.warning("kept %s: it is a directory", path)
        return False
    os.unlink(path)
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(
    path: Path, write: Callable[[Path], object], *, inside: Path | None = None
) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path`` (same directory, so the rename is
    atomic): readers see the old file or the new one, never half of one. The file gets mode
    0o666 minus the umask, like a file opened for writing. A link at ``path`` is replaced, not
    written through.

    Args:
        inside: the directory the write must stay in (`check_inside`); by default the
            innermost `atomic_directory` being built that holds ``path``, if any.

    Raises:
        UnsafePathError: the write would leave ``inside`` (a linked subdirectory).
        whatever ``write`` raises; the temporary file is removed first.
    """
    path = Path(path)
    root = inside if inside is not None else _root_for(path)
    if root is not None:
        check_inside(root, path)
        make_directory_inside(root, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}{TMP_TAG}", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, *, inside: Path | None = None) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see `atomic_write`)."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), inside=inside)


def is_own_temporary(entry: Path, name: str | None = None) -> bool:
    """Whether ``entry`` is a temporary this module made (for the target ``name``, or any):
    named ``.<name>.tmp-XXXXXXXX`` (`atomic_write`, `atomic_directory`) or
    ``.<name>.old-XXXXXXXX`` (a swap's previous version), with exactly the random part this
    module writes, and owned by the current user. Anything else is never deleted as stale."""
    base = entry.name
    for tag, suffix in ((TMP_TAG, _TMP_SUFFIX), (OLD_TAG, _OLD_SUFFIX)):
        head, sep, rand = base.rpartition(tag)
        if not sep or not head.startswith(".") or not suffix.fullmatch(rand):
            continue
        if name is not None and head != f".{name}":
            continue
        try:
            st = os.lstat(entry)
        except OSError:
            return False
        return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    return False


def _remove_stale(stale: Path) -> None:
    """Delete one of our temporaries: a real directory whole, a file or a link itself."""
    try:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    except OSError:  # a read-only location: leave it, it is never read
        pass


def remove_stale_temporaries(directory: Path, name: str) -> list[Path]:
    """Delete the temporaries (`is_own_temporary`) an interrupted write of ``directory/name``
    left beside it; returns them. Call only when no write of that target is in progress."""
    directory = Path(directory)
    found = [p for p in directory.glob(f".{glob_escape(name)}.*-*") if is_own_temporary(p, name)]
    for stale in found:
        _remove_stale(stale)
    return found


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def recover_directory(path: Path) -> None:
    """Finish or undo an interrupted `atomic_directory` swap of ``path`` and remove stale
    temporaries: when ``path`` is missing but its previous version (``.<name>.old-*``) is
    there, the previous version is put back; then every ``.<name>.tmp-*`` and ``.<name>.old-*``
    beside it is deleted. Safe to call at any time; does nothing when nothing was interrupted.
    """
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        return
    name = glob_escape(path.name)
    olds = sorted(
        (
            p
            for p in parent.glob(f".{name}{OLD_TAG}*")
            if is_own_temporary(p, path.name) and p.is_dir() and not p.is_symlink()
        ),
        key=lambda p: p.stat().st_mtime,
    )
    if not path.exists() and not path.is_symlink() and olds:
        os.replace(olds.pop(), path)  # the newest previous version
    tmps = [p for p in parent.glob(f".{name}{TMP_TAG}*") if is_own_temporary(p, path.name)]
    for stale in [*tmps, *olds]:
        _remove_stale(stale)


@contextmanager
def atomic_directory(
    path: Path, *, keep_existing: bool = True, inside: Path | None = None
) -> Iterator[Path]:
    """Build a new version of directory ``path`` all-or-nothing.

    Yields a sibling temporary directory to write into. On a normal exit it replaces ``path``:
    ``path`` is renamed aside, the temporary directory renamed onto ``path``, and the previous
    version deleted. On an exception (or a kill) ``path`` is left as it was; the temporaries are
    removed then, or by the next `recover_directory` (every `atomic_directory` call starts
    with one). A reader sees the old directory or the new one, never a mix: at worst, for the
    instant between the two renames, no directory (a clear "not found").

    Args:
        path: the directory to create or replace.
        keep_existing: start the new version with the files of the current one (hard links,
            or copies across devices), so a save that writes only some files (weights and
            config, not the tokenizer) keeps the others; False starts empty.
        inside: a directory ``path`` must stay in (a run directory for its ``model/``).

    Write files inside the yielded directory by creating or renaming them (`atomic_write` does),
    never by rewriting a kept file in place: kept files are hard links shared with the current
    version.

    Writes below the yielded directory are checked (`atomic_write` does, `check_inside`):
    a kept subdirectory that is a symbolic link is never written through. Kept links stay
    links; nothing outside ``path`` is written or deleted.

    Raises:
        NotADirectoryError: ``path`` exists and is a file.
        UnsafePathError: ``path`` is a symbolic link (the swap would replace the link, not
            the directory it names), or lies behind a link below ``inside``.
        whatever the body raises; ``path`` is then unchanged.
    """
    path = Path(path)
    if inside is not None:
        check_inside(inside, path)
    if path.is_symlink():
        raise UnsafePathError(
            f"refusing to replace {path}: it is a symbolic link (to {os.readlink(path)}); a "
            "save builds a new directory and swaps it in whole, which would replace the link. "
            "Give the directory it points to, or remove the link"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}{TMP_TAG}", dir=path.parent))
    token = None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        if keep_existing and path.is_dir():
            shutil.copytree(path, tmp, symlinks=True, dirs_exist_ok=True, copy_function=_link)
        token = _BUILDING.set((*_BUILDING.get(), _absolute(tmp)))
        yield tmp
        _BUILDING.reset(token)
        token = None
        old = path.parent / f".{path.name}{OLD_TAG}{uuid.uuid4().hex[:8]}"
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        if token is not None:
            _BUILDING.reset(token)
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _link(src: str, dst: str) -> None:
    """Hard-link ``src`` to ``dst`` (a copy when links are impossible): the new directory
    version shares unchanged files with the old one. Files are always replaced by rename,
    never rewritten in place, so the shared inode of the old version is not modified."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def directory_digest(path: Path) -> str:
    """SHA-256 (hex) identifying a directory's content: over each regular file (symlinks
    followed, as in the Hugging Face cache) in sorted relative-path order, its path and the
    SHA-256 of its bytes. Hidden entries (``.``-prefixed: our temporaries, ``.git``) are
    skipped, so the digest names what a loader reads.

    Raises:
        NotADirectoryError: ``path`` is not a directory.
    """
    import hashlib

    path = Path(path)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a directory")
    outer = hashlib.sha256()
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    for file in files:
        inner = hashlib.sha256()
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                inner.update(block)
        outer.update(file.relative_to(path).as_posix().encode() + b"\0")
        outer.update(inner.digest())
    return outer.hexdigest()


# --- bounded JSON: every metadata file bertfamily reads ---------------------------------------
MAX_JSON_BYTES = 64 * 2**20  # config.json, tokenizer_config.json, index meta: far above real ones
MAX_JSON_DEPTH = 64  # real metadata nests a handful of levels; json recurses in C per level
_REQUIRED = object()


def read_json(
    path: str | os.PathLike[str],
    *,
    what: str = "a JSON object",
    kind: type | tuple[type, ...] | None = dict,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    error: Callable[[str], Exception] = JSONFileError,
    missing: Any = _REQUIRED,
) -> Any:
    """The JSON value of a metadata file, read within bounds: the one reader of config.json,
    tokenizer_config.json, modules.json, sentence-transformers module configs, index and cache
    records and run-directory state.

    Args:
        path: the file (UTF-8, a leading BOM allowed).
        what: what the file must hold, for the message ("a JSON object of model settings").
        kind: the type(s) the top-level value must have (None: any JSON value).
        max_bytes: the largest file accepted.
        max_depth: the deepest nesting of arrays and objects accepted.
        error: the exception class raised, called with the one-line message: the caller's
            own `BertFamilyError` subclass (`ModelDirectoryError` for a model directory), or a
            function of the message that returns one.
        missing: returned when the file does not exist (by default that is an error).

    Raises:
        ``error`` (default `JSONFileError`): the file is missing, a directory or unreadable
            (permissions), larger than ``max_bytes``, not UTF-8, not JSON (or a number too
            long to parse), nested deeper than ``max_depth``, or its top-level value is not
            ``kind``. One line naming the file; the underlying exception is its cause.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            raw = fh.read(max_bytes + 1) if size <= max_bytes else b""
    except FileNotFoundError as e:
        if missing is not _REQUIRED:
            return missing
        raise error(f"{path} does not exist (it should hold {what})") from e
    except IsADirectoryError as e:
        raise error(f"{path} is a directory, not a JSON file") from e
    except OSError as e:
        raise error(f"{path} cannot be read: {e.strerror or e}") from e
    size = max(size, len(raw))
    if size > max_bytes:
        raise error(f"{path} is {size:,} bytes; a JSON file here is at most {max_bytes:,}")
    return parse_json(raw, source=str(path), what=what, kind=kind, max_depth=max_depth, error=error)


def parse_json(
    text: str | bytes,
    *,
    source: str = "the input",
    what: str = "a JSON object",
    kind: type | tuple[type, ...] | None = dict,
    max_depth: int = MAX_JSON_DEPTH,
    error: Callable[[str], Exception] = JSONFileError,
) -> Any:
    """The JSON value of ``text`` (a file's content, one JSON Lines row, a metadata string),
    parsed within the bounds of `read_json` (which reads files with it): the one parser of
    JSON that bertfamily did not write itself.

    Args:
        text: the JSON text; bytes are decoded as UTF-8 (a leading BOM allowed).
        source: where it comes from, for the message (``"rows.jsonl:12"``).
        what, kind, max_depth, error: as for `read_json`.

    Raises:
        ``error`` (default `JSONFileError`): not UTF-8, not JSON (or a number too long to
            parse), nested deeper than ``max_depth``, or a top-level value that is not
            ``kind``; one line naming ``source``, the underlying exception its cause.
    """
    try:
        data = json.loads(text.decode("utf-8-sig") if isinstance(text, bytes) else text)
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.start + 1]
        raise error(
            f"{source} is not valid JSON: not UTF-8 text (byte {bad!r} at offset {e.start})"
        ) from e
    except RecursionError as e:
        raise error(f"{source} is not valid JSON: nested deeper than Python can parse") from e
    except ValueError as e:  # JSONDecodeError, and ints longer than Python converts
        raise error(f"{source} is not valid JSON: {e}") from e
    if json_depth(data) > max_depth:
        raise error(f"{source} is not valid JSON here: nested deeper than {max_depth} levels")
    if kind is not None and not isinstance(data, kind):
        raise error(f"{source} must hold {what}, got {type(data).__name__} ({_shown(data)})")
    return data


def _shown(value: Any, limit: int = 60) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", dict: "an object",
               list: "a list", bool: "true or false"}  # fmt: skip


def json_field(
    data: dict[str, Any],
    name: str,
    kind: type | tuple[type, ...],
    *,
    source: str,
    low: float | None = None,
    high: float | None = None,
    error: Callable[[str], Exception] = JSONFileError,
) -> Any:
    """``data[name]`` checked against its schema: the one type and range check of a parsed
    metadata field (``True`` is no int here, as it is not in JSON's schema).

    Args:
        data: a parsed JSON object; name: the field (``"a.b"`` reads ``data["a"]["b"]``).
        kind: the type(s) the value must have (``int``, ``str``, ``(int, float)``, ``dict``).
        source: the file, for the message ("" when ``error`` names it). low, high: the
            inclusive range of a number.
        error: the exception class raised, called with the one-line message.

    Raises:
        ``error``: the field is absent, of another type, or out of range; the message names
            the file, the field and the value.
    """
    where = f"{source}: " if source else ""
    value: Any = data
    for part in name.split("."):
        value = value.get(part, _REQUIRED) if isinstance(value, dict) else _REQUIRED
    if value is _REQUIRED:
        raise error(f"{where}{name} is missing")
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise error(f"{where}{name} is {_shown(value)}, not {names}")
    if low is not None and value < low:
        raise error(f"{where}{name} is {_shown(value)}, below {low}")
    if high is not None and value > high:
        raise error(f"{where}{name} is {_shown(value)}, above {high:,}")
    return value


def json_depth(value: Any) -> int:
    """The nesting depth of a parsed JSON value (0 for a scalar, 1 for ``[]`` or ``{"a": 1}``),
    found without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest
