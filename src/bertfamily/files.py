"""Atomic writes of files and whole directories, shared by checkpoints, tokenizers, run outputs
and the CLI (torch-free).

A file write goes to a temporary file beside the target and is renamed onto it; a directory
save is built in a sibling temporary directory and swapped in. Readers see the old content or
the new, never a mix; created files and directories get the permissions of the user's umask
(``tempfile`` would make them private).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

TMP_TAG = ".tmp-"  # sibling temporaries: .<name>.tmp-<random>
OLD_TAG = ".old-"  # the previous directory during a swap: .<name>.old-<random>


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write(tmp_path)`` then rename onto ``path`` (same directory, so the rename is
    atomic): readers see the old file or the new one, never half of one. The file gets mode
    0o666 minus the umask, like a file opened for writing.

    Raises:
        whatever ``write`` raises; the temporary file is removed first.
    """
    path = Path(path)
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


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically (see `atomic_write`)."""
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


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
    olds = sorted(parent.glob(f".{path.name}{OLD_TAG}*"), key=lambda p: p.stat().st_mtime)
    if not path.exists() and olds:
        os.replace(olds.pop(), path)  # the newest previous version
    for stale in [*parent.glob(f".{path.name}{TMP_TAG}*"), *olds]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            try:
                stale.unlink(missing_ok=True)
            except OSError:  # a read-only location: leave it, it is never read
                pass


@contextmanager
def atomic_directory(path: Path, *, keep_existing: bool = True) -> Iterator[Path]:
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

    Write files inside the yielded directory by creating or renaming them (`atomic_write` does),
    never by rewriting a kept file in place: kept files are hard links shared with the current
    version.

    Raises:
        NotADirectoryError: ``path`` exists and is a file.
        whatever the body raises; ``path`` is then unchanged.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_directory(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}{TMP_TAG}", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        if keep_existing and path.is_dir():
            shutil.copytree(path, tmp, symlinks=True, dirs_exist_ok=True, copy_function=_link)
        yield tmp
        old = path.parent / f".{path.name}{OLD_TAG}{uuid.uuid4().hex[:8]}"
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
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
