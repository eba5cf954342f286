"""Optional dependencies: import one, or fail with the pip command that installs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import MissingDependency


def install_command(extra: str) -> str:
    """The pip command that installs the ``extra`` of bertfamily."""
    return f'pip install "bertfamily[{extra}]"'


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` or raise `MissingDependency` naming ``pip install "bertfamily[extra]"``.

    Args:
        module: the importable name (e.g. ``"onnx"``).
        extra: the bertfamily extra that installs it (e.g. ``"onnx"``).
        feature: what needs it, for the message (e.g. ``"ONNX export"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        if e.name is not None and e.name != module and not module.startswith(e.name + "."):
            raise  # the module is there but one of its own imports is broken
        raise MissingDependency(
            f"{feature} needs the optional package {top!r}, which is not installed; "
            f"install it with: {install_command(extra)}",
            name=top,
        ) from e
