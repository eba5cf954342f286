"""bertfamily: the BERT family of encoders from one configurable code path.

The public names load on first use (PEP 562), so `import bertfamily` (and the command line's
`--help`) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> the module that defines it
_LAZY = {
    "EncoderConfig": ".config",
    "ConfigError": ".config",
    "Model": ".model",
    "ModelOutput": ".model",
    "build_model": ".build",
    "from_pretrained": ".pretrained",
    "load_tokenizer": ".tokenization",
    "Tokenizer": ".tokenization",
    "CheckpointError": ".checkpoints.convert",
    "LoadReport": ".checkpoints.convert",
    "ModelDirectoryError": ".checkpoints.io",
    "TokenizerFileError": ".tokenization",
    "DataError": ".tasks.data",
    "RunDirectoryError": ".train.rundir",
    "FetchError": ".fetch",
    "CacheCorruptError": ".fetch",
}

__all__ = [
    "EncoderConfig",
    "Model",
    "ModelOutput",
    "build_model",
    "from_pretrained",
    "load_tokenizer",
    "Tokenizer",
    "CheckpointError",
    "LoadReport",
    "ModelDirectoryError",
    "ConfigError",
    "TokenizerFileError",
    "DataError",
    "RunDirectoryError",
    "FetchError",
    "CacheCorruptError",
]

if TYPE_CHECKING:
    from .build import build_model
    from .checkpoints.convert import CheckpointError, LoadReport
    from .checkpoints.io import ModelDirectoryError
    from .config import ConfigError, EncoderConfig
    from .fetch import CacheCorruptError, FetchError
    from .model import Model, ModelOutput
    from .pretrained import from_pretrained
    from .tasks.data import DataError
    from .tokenization import Tokenizer, TokenizerFileError, load_tokenizer
    from .train.rundir import RunDirectoryError


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
