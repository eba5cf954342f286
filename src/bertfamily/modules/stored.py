"""The one check of stored weights, for every source a model's tensors come from: model
directories (safetensors, ``pytorch_model.bin``, shards: `checkpoints.io`), training
checkpoints (`train.checkpoint`) and the early-exit students (`heads.early_exit`).

Floor 1: it needs torch and our errors only, so every loader above it shares it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..errors import ModelDirectoryError

__all__ = ["INTEGER_BUFFERS", "check_stored_tensors"]

log = logging.getLogger("bertfamily.checkpoints.io")  # the name its warnings always had


# integer buffers some checkpoints store (transformers' position/segment id buffers): kept as
# they are (the key tables drop them); every other tensor must be floating point
INTEGER_BUFFERS = ("position_ids", "token_type_ids")
_WIDENED = (torch.float16, torch.bfloat16)  # converted to float32 exactly


def check_stored_tensors(state: dict[str, torch.Tensor], file: Path) -> dict[str, torch.Tensor]:
    """Check every tensor of a weight file before it is used, and return the state with
    float16/bfloat16 tensors converted to float32 (exact; reported with a warning) and
    float64 tensors too where the conversion is exact.

    One pass over each tensor (``torch.isfinite``), about a millisecond per million weights.

    Raises:
        ModelDirectoryError: naming the file and the tensor: a dtype the family does not store
            (integer, bool, uint8, float8, complex; an integer is allowed only for the
            ``position_ids``/``token_type_ids`` buffers), float64 values float32 cannot hold
            exactly, or NaN/±inf values (with their count and the first position).
    """
    out: dict[str, torch.Tensor] = {}
    widened: dict[str, int] = {}
    for name, tensor in state.items():
        dtype = tensor.dtype
        if not dtype.is_floating_point or dtype.itemsize == 1:  # ints, bool, uint8, float8
            if name.rsplit(".", 1)[-1] in INTEGER_BUFFERS and not dtype.is_floating_point:
                out[name] = tensor
                continue
            raise ModelDirectoryError(
                f"{file}: tensor {name!r} is stored as {str(dtype).replace('torch.', '')}; "
                "the BERT family stores weights as float32, float16 or bfloat16 (refused, "
                "not cast)"
            )
        if dtype in _WIDENED:
            kind = str(dtype).replace("torch.", "")
            widened[kind] = widened.get(kind, 0) + 1
            tensor = tensor.float()
        elif dtype == torch.float64:
            narrow = tensor.float()
            if not torch.equal(narrow.double(), tensor) and bool(torch.isfinite(tensor).all()):
                raise ModelDirectoryError(
                    f"{file}: tensor {name!r} is stored as float64 with values float32 cannot "
                    "hold exactly; convert the checkpoint to float32 first"
                )
            tensor = narrow
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            bad = (~finite).nonzero()
            first = tuple(int(i) for i in bad[0])
            value = float(tensor[first]) if first else float(tensor)
            raise ModelDirectoryError(
                f"{file}: tensor {name!r} {tuple(tensor.shape)} holds {len(bad):,} non-finite "
                f"values (first: {value} at {list(first)}); the checkpoint is corrupt or "
                "diverged, it is not loaded"
            )
        out[name] = tensor
    if widened:
        log.warning(
            "%s: converted %s tensors to float32 (exact)",
            file,
            ", ".join(f"{n} {kind}" for kind, n in sorted(widened.items())),
        )
    return out
