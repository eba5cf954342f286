"""Model names → local directories: a directory path, or a model already in the user's Hugging
Face cache, found offline (torch-free; nothing is ever downloaded).

The cache layout read here is huggingface_hub's (its "Manage the cache" guide):

    <cache>/models--<org>--<name>/refs/<branch or tag>     a file holding a 40-hex commit
    <cache>/models--<org>--<name>/snapshots/<commit>/...   the files of that commit

and ``<cache>`` is chosen as huggingface_hub chooses it: ``HF_HUB_CACHE``, else the legacy
``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME``/hub, else ``XDG_CACHE_HOME``/huggingface/hub, else
``~/.cache/huggingface/hub``. Reading it takes a few file reads, so huggingface_hub itself
(and its network client) is not needed.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..errors import InputError, ModelNotFoundError
from .cache import _is_complete, _verify_entry, cache_dir, fetch
from .registry import DEFAULT_MODEL, RESOURCES

log = logging.getLogger(__name__)

#: A Hugging Face repository id: ``name`` or ``org/name`` (huggingface_hub's
#: ``validate_repo_id``: letters, digits, ``-``, ``_``, ``.``; no ``--`` or ``..``; ≤ 96 chars).
_REPO_ID = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_REVISION = "main"


def hub_cache_dir() -> tuple[Path, str]:
    """The Hugging Face hub cache directory and the setting that chose it (for messages)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.environ[var])).expanduser(), f"${var}"
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub", "$HF_HOME/hub"
    if os.environ.get("XDG_CACHE_HOME"):
        base = Path(os.path.expandvars(os.environ["XDG_CACHE_HOME"])).expanduser()
        return base / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"
    return Path("~/.cache/huggingface/hub").expanduser(), "the default"


def is_repo_id(name: str) -> bool:
    """Whether ``name`` can be a Hugging Face model id (``name`` or ``org/name``)."""
    return (
        bool(_REPO_ID.match(name))
        and len(name) <= 96
        and "--" not in name
        and ".." not in name
        and not any(p[0] in "-." or p[-1] in "-." for p in name.split("/"))
    )


def resolve_model_dir(name_or_path: str | os.PathLike[str], revision: str | None = None) -> Path:
    """The local directory of a model: ``name_or_path`` itself when it is an existing
    directory (a local directory always wins), else the snapshot of the Hugging Face model id
    ``name_or_path`` in the local cache (see the module docstring), read offline.

    Anything that is not a model id (an absolute path, ``~/x``, a path with two slashes, ...)
    is returned as a `Path` unchanged, so the loader reports what is wrong with it.

    Args:
        name_or_path: a directory, or ``org/name`` / ``name`` of a model in the cache.
        revision: a branch or tag under ``refs/`` (default ``main``) or a 40-hex commit; only
            for cache names.

    Returns:
        The directory (for a cached model: ``<cache>/models--org--name/snapshots/<commit>``).

    Raises:
        ModelNotFoundError: a model id that is not a local directory and not in the cache, a
            ref that names a commit whose snapshot is missing, or a revision given with a local
            directory; the message lists the places looked at.
        ValueError: a revision that is not a plain ref name or commit.
    """
    path = Path(name_or_path).expanduser()
    text = os.fspath(name_or_path)
    if path.is_dir():
        if revision is not None:
            raise ModelNotFoundError(
                f"revision={revision!r} was given, but {text!r} is a local directory "
                f"({path.resolve()}); a revision selects a snapshot of the Hugging Face cache"
            )
        return path
    if path.exists() or not is_repo_id(text):
        if revision is not None:
            raise ModelNotFoundError(
                f"{text!r} is not a model id (org/name), so revision={revision!r} cannot apply"
            )
        return path
    rev = DEFAULT_REVISION if revision is None else revision
    if not rev or rev.startswith("/") or "\\" in rev or ".." in rev.split("/") or "\x00" in rev:
        raise InputError(f"revision {rev!r} is not a branch, tag or commit name")
    cache, chosen_by = hub_cache_dir()
    repo = cache / ("models--" + text.replace("/", "--"))
    looked = [f"no local directory {path.resolve()}"]
    commit = rev if _COMMIT.match(rev) else None
    if commit is None:
        ref = repo / "refs" / rev
        try:
            commit = ref.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            what = "no such model" if not repo.is_dir() else f"no ref {rev!r}"
            looked.append(f"Hugging Face cache ({chosen_by}) {cache}: {what} ({ref} missing)")
        if commit is not None and not _COMMIT.match(commit):
            raise ModelNotFoundError(f"{ref} holds {commit[:60]!r}, not a 40-hex commit")
    if commit is not None:
        snapshot = repo / "snapshots" / commit
        if snapshot.is_dir():
            log.info("%s (revision %s) resolved to %s", text, rev, snapshot)
            return snapshot
        looked.append(
            f"Hugging Face cache ({chosen_by}) {cache}: revision {rev!r} is commit {commit}, "
            f"but {snapshot} is missing"
        )
    raise ModelNotFoundError(
        f"model {text!r} not found locally (nothing is downloaded): " + "; ".join(looked)
    )


__all__ = [
    "ModelNotFoundError",
    "hub_cache_dir",
    "is_repo_id",
    "resolve_model",
    "resolve_model_dir",
]


#: How many names `resolve_model` looked up in this process (a directory argument is already
#: resolved and is not counted); tests check one lookup per load.
RESOLUTIONS = 0


def _count() -> None:
    global RESOLUTIONS
    RESOLUTIONS += 1


def resolve_model(
    model: str | os.PathLike[str] | None,
    revision: str | None = None,
    *,
    must_exist: bool = False,
) -> Path:
    """Turn a user's model argument into a local directory: the one resolver behind every
    ``--model`` option, `from_pretrained`, `load_tokenizer`, `SentenceEmbedder`, the pipelines
    and the server.

    Args:
        model: ``None`` (the default model, fetched if needed), a path to an existing
            directory, a ``RESOURCES`` key (fetched if needed), or a model id (``org/name``)
            already in the local Hugging Face cache (`resolve_model_dir`; never
            downloaded). A cached resource, named or given as its cache directory, gets
            `fetch`'s cheap check.
        revision: for a Hugging Face cache id: a branch or tag (default ``main``) or a commit.
        must_exist: refuse a path that is no directory (the command line); by default such a
            path (``/x/y``, ``./m``, ``~/m``: no model id) is returned for the loader to report
            (or to put back a directory an interrupted save left renamed).

    Raises:
        ModelNotFoundError (a ValueError): none of these; the message lists every place looked
            at and the known resources.
        FetchError: fetching a known resource failed.
        CacheCorruptError: the cached entry fails its check (see `fetch`).
    """
    path = Path(model).expanduser() if model is not None else None
    if path is None or not path.is_dir():
        _count()  # a name looked up (a directory is already resolved)
    if path is None:
        return fetch(DEFAULT_MODEL)
    if path.is_dir():
        resource = RESOURCES.get(path.name)
        if (
            resource is not None
            and path.resolve() == (cache_dir() / path.name).resolve()
            and _is_complete(path, resource)
        ):
            _verify_entry(path, resource, full=False)
        return path
    if str(model) in RESOURCES:
        return fetch(str(model))
    known = f"known resources: {sorted(RESOURCES)}"
    try:  # a model id (org/name) already in the local Hugging Face cache; never downloaded
        found = resolve_model_dir(str(model), revision)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(f"{e}; and it is no bertfamily resource ({known})") from None
    if not found.is_dir() and must_exist:
        raise ModelNotFoundError(
            f"model {str(model)!r} is neither an existing directory, a known resource nor a "
            f"model id (org/name) in the local Hugging Face cache; {known}"
        )
    return found  # a path that is no model id goes to the loader, which says what is wrong
