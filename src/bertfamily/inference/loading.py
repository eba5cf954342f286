"""How every task pipeline loads its model (reranking, sparse, classify, NER, QA, fill-mask,
early exit): the name resolved once (`resolve_model`), config.json read once and shared by the
model and the tokenizer, the model moved to ``device`` in ``dtype`` (fp32 unless asked:
`inference.dtype.resolve_dtype`), put in eval mode and, on the CPU, given the inference Linear
kernel (`modules.kernels`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..checkpoints.io import read_hf_config
from ..errors import InputError
from ..model import Model
from ..modules.kernels import apply_linear_kernel
from ..pretrained import model_from_directory
from ..resources.resolve import resolve_model
from ..tokenization.tokenizer import Tokenizer, tokenizer_from_directory
from .dtype import resolve_dtype

__all__ = ["LoadedModel", "load_into", "load_model_and_tokenizer", "to_device"]


@dataclass
class LoadedModel:
    """A resolved directory, its model (eval mode, on ``device``), its tokenizer, and the
    parameter dtype with why it was chosen (`inference.dtype.resolve_dtype`'s reason)."""

    directory: Path
    model: Model
    tokenizer: Tokenizer
    device: torch.device
    dtype: torch.dtype = torch.float32
    dtype_reason: str = "fp32 (default)"


def load_model_and_tokenizer(
    path: str | os.PathLike[str],
    *,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = "auto",
    revision: str | None = None,
    linear_kernel: str = "auto",
    head: tuple[str, str] | None = None,
) -> LoadedModel:
    """Load the model and tokenizer of ``path`` (a directory, a resource name or a cached
    ``org/name``), resolving it once and reading its config.json once.

    Args:
        path: what every ``--model`` option takes.
        device: where the model runs ("cpu", "cuda", "cuda:1", a `torch.device`).
        dtype: parameter dtype: "auto" (the default, and None) is fp32 on every device, the
            faithful choice (the reference libraries' numbers); "fp32", "bf16", "fastest"
            (bf16 where the CPU or GPU has bf16 units, else fp32) or a torch dtype
            (`bertfamily.inference.dtype.resolve_dtype`).
        revision: for a cached ``org/name``: a branch, tag or commit.
        linear_kernel: the kernel of the fp32/bf16 Linear layers at inference on the CPU
            ("auto": oneDNN on pre-packed weights where it measured faster;
            `bertfamily.modules.kernels.resolve_linear_kernel`); training calls are unchanged.

    Raises:
        ModelNotFoundError: as `bertfamily.from_pretrained`; so are ModelDirectoryError and
            CheckpointError, and TokenizerNotFoundError / TokenizerFileError as
            `bertfamily.load_tokenizer`.
        InputError: an unknown ``linear_kernel`` or ``dtype`` name; with ``head`` = (task,
            what the pipeline runs), a model whose head is another task ("DIR holds a 'tokens'
            head, not a sequence classifier"), before the tokenizer is read.
    """
    directory = resolve_model(path, revision)
    config_json = read_hf_config(directory)
    device = torch.device(device)
    torch_dtype, reason = resolve_dtype(dtype, device)
    model = model_from_directory(directory, config_json=config_json, dtype=torch_dtype)
    if head is not None and model.task != head[0]:
        raise InputError(f"{path} holds a {model.task!r} head, not {head[1]}")
    model = model.to(device).eval()
    apply_linear_kernel(model, linear_kernel, torch_dtype, device)
    tokenizer = tokenizer_from_directory(directory, model_config=config_json)
    return LoadedModel(directory, model, tokenizer, device, torch_dtype, reason)


def load_into(pipeline: Any, path: str | os.PathLike[str], **options: Any) -> LoadedModel:
    """`load_model_and_tokenizer` (``options``: its keywords), its parts kept on ``pipeline``
    as every task pipeline holds them: ``model`` (eval mode, on the device), ``tokenizer``,
    ``device`` (a `torch.device`) and ``dtype_reason``.

    Returns:
        The `LoadedModel` (its ``directory`` and ``dtype`` for what a pipeline loads beside).

    Raises:
        ModelNotFoundError: and the other errors of `load_model_and_tokenizer`.
    """
    loaded = load_model_and_tokenizer(path, **options)
    pipeline.model, pipeline.tokenizer = loaded.model, loaded.tokenizer
    pipeline.device, pipeline.dtype_reason = loaded.device, loaded.dtype_reason
    return loaded


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """``batch`` with every tensor moved to ``device``."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
