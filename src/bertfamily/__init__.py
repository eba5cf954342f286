"""bertfamily: the BERT family of encoders from one configurable code path.

The public names load on first use (PEP 562), so `import bertfamily` (and the command line's
`--help`) does not import torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from . import _compat

__version__ = "0.1.0"

# OpenMP threads that wait for work spin for a bounded time (GOMP_SPINCOUNT=30000: libgomp's
# count of pause loops, about a millisecond), then sleep. libgomp reads this once, when torch
# loads, so only while torch is not imported yet and neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT
# is set (a value the user set wins). Between the many small parallel regions of an encoder
# forward a sleeping thread must be woken (passive waits: 0.48x the speed at batch 1, 0.74x on
# Austen lines, idle); an unbounded spin (OMP_WAIT_POLICY=ACTIVE, libgomp's default of 300000)
# burns the time slice of a core another process needs. With the thread governor
# (`bertfamily.runtime`) the bounded spin cost nothing with a core busy; at a thread count
# pinned on a busy machine, OMP_WAIT_POLICY=PASSIVE is the better choice
# (benchmarks/wait_policy.py).
if "torch" not in sys.modules and not {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"} & set(os.environ):
    os.environ["GOMP_SPINCOUNT"] = "30000"

_compat.install()  # old import paths of moved modules (see _compat.MOVED)

# public name -> the module that defines it
_LAZY = {
    "EncoderConfig": ".config",
    "Model": ".model",
    "ModelOutput": ".model",
    "build_model": ".build",
    "from_pretrained": ".pretrained",
    "load_tokenizer": ".tokenization",
    "Tokenizer": ".tokenization",
    "LoadReport": ".checkpoints.convert",
    "fetch": ".resources",
    "resolve_model": ".resources",
    "BertFamilyError": ".errors",
    "UnknownNameError": ".errors",
    "InputError": ".errors",
    "ArgumentTypeError": ".errors",
    "BulkEmbedError": ".errors",
    "CacheCorruptError": ".errors",
    "CheckpointError": ".errors",
    "ConfigError": ".errors",
    "DataError": ".errors",
    "JSONFileError": ".errors",
    "FileAccessError": ".errors",
    "DataEngineError": ".errors",
    "FetchError": ".errors",
    "MissingDependency": ".errors",
    "ModelDirectoryError": ".errors",
    "ModelNotFoundError": ".errors",
    "NonFiniteOutputError": ".errors",
    "QuantizationError": ".errors",
    "RunDirectoryError": ".errors",
    "SentenceModulesError": ".errors",
    "ServeError": ".errors",
    "TokenizerFileError": ".errors",
    "TokenizerNotFoundError": ".errors",
    "UnsafePathError": ".errors",
    "VectorIndexError": ".errors",
}

__all__ = [
    "EncoderConfig",
    "Model",
    "ModelOutput",
    "build_model",
    "from_pretrained",
    "load_tokenizer",
    "Tokenizer",
    "LoadReport",
    "fetch",
    "resolve_model",
    "BertFamilyError",
    "UnknownNameError",
    "InputError",
    "ArgumentTypeError",
    "BulkEmbedError",
    "CacheCorruptError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "JSONFileError",
    "FileAccessError",
    "DataEngineError",
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

if TYPE_CHECKING:
    from .build import build_model
    from .checkpoints.convert import LoadReport
    from .config import EncoderConfig
    from .errors import (
        ArgumentTypeError,
        BertFamilyError,
        BulkEmbedError,
        CacheCorruptError,
        CheckpointError,
        ConfigError,
        DataEngineError,
        DataError,
        FetchError,
        FileAccessError,
        InputError,
        JSONFileError,
        MissingDependency,
        ModelDirectoryError,
        ModelNotFoundError,
        NonFiniteOutputError,
        QuantizationError,
        RunDirectoryError,
        SentenceModulesError,
        ServeError,
        TokenizerFileError,
        TokenizerNotFoundError,
        UnknownNameError,
        VectorIndexError,
    )
    from .model import Model, ModelOutput
    from .pretrained import from_pretrained
    from .resources import fetch, resolve_model
    from .tokenization import Tokenizer, load_tokenizer


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
