"""Resources: the registry of fetchable weights and data, their download and verified cache
(`cache`), and the one resolver that turns a model name into a local directory (`resolve`)."""

from .cache import cache_dir, cached, fetch, sha256_file, verify
from .registry import DEFAULT_MODEL, KINDS, RESOURCES, Kind, Resource
from .resolve import resolve_model, resolve_model_dir

__all__ = [
    "DEFAULT_MODEL",
    "KINDS",
    "RESOURCES",
    "Kind",
    "Resource",
    "cache_dir",
    "cached",
    "fetch",
    "resolve_model",
    "resolve_model_dir",
    "sha256_file",
    "verify",
]
