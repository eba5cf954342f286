"""What every command area shares: the consoles, the one error handler, small input helpers.

Nothing here imports torch (or numpy) at module level: `bertfamily --help` stays fast.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err = Console(stderr=True)

#: The errors our library raises for bad input (DataError, CheckpointError, ModelDirectoryError,
#: TokenizerNotFoundError, ... are ValueErrors; FetchError is a RuntimeError).
LIBRARY_ERRORS = (ValueError, KeyError, TypeError, OSError, RuntimeError)

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command, turning a library error into ``error: …`` on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise  # typer's own exits (RuntimeErrors); usage errors are no library error
        except LIBRARY_ERRORS as e:
            err.print("[bold red]error:[/]", escape(str(e)))
            raise typer.Exit(code=2) from None

    return wrapper


def read_lines(path: Path) -> list[str]:
    """The non-empty, stripped lines of a UTF-8 text file."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from e
    lines = [line for line in lines if line]
    if not lines:
        raise ValueError(f"{path} holds no non-empty lines")
    return lines


def bf16_supported() -> bool:
    """Whether bf16 matrix multiplies run natively here (CUDA, or a CPU with AVX512-BF16/AMX)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def torch_dtype(name: str):
    """The torch dtype of a `--dtype` value (fp32, bf16); warns when bf16 is emulated."""
    import torch

    if name not in DTYPES:
        raise typer.BadParameter(f"dtype must be one of {sorted(DTYPES)}")
    if name == "bf16" and not bf16_supported():
        err.print(
            "[yellow]warning:[/] this CPU has no native bf16 matrix units; bf16 will run "
            "but may be slower than fp32"
        )
    return getattr(torch, DTYPES[name])


def model_overrides(
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    dropout: float | None = None,
) -> dict[str, Any]:
    """`EncoderConfig` overrides from --layers / --hidden (FFN = 4H) / --heads / --dropout."""
    overrides: dict[str, Any] = {}
    if layers:
        overrides["num_hidden_layers"] = layers
    if hidden:
        overrides.update(hidden_size=hidden, intermediate_size=4 * hidden)
    if heads:
        overrides["num_attention_heads"] = heads
    if dropout is not None:
        overrides.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return overrides
