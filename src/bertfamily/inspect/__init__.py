"""Look inside: parameter table, traced dataflow, comparison table, explorer page.

The names below are imported on first use (PEP 562), so the comparison table
(`inspect.compare`, `bertfamily models`) loads without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "meta_model": ".models",
    "resolve_config": ".models",
    "shrink_layers": ".models",
    "Step": ".trace",
    "Trace": ".trace",
    "trace": ".trace",
    "trace_model": ".trace",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    """Import ``name`` from its module on first access."""
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name], __name__), name)
