"""Mixed precision for the `Trainer`: which precisions a device takes, the autocast context and
the gradient scaler.

- ``fp32``: no autocast.
- ``bf16``: forward passes under ``torch.autocast(dtype=torch.bfloat16)``; weights, gradients
  and optimizer state stay fp32. bfloat16 keeps fp32's exponent range, so no loss scaling is
  needed (Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training" §3). Allowed on
  CPU; without native bf16 units (AVX512-BF16 / AMX) the matrix multiplies are emulated and
  slower than fp32, which is logged as a warning.
- ``fp16``: autocast to float16 plus dynamic loss scaling with `torch.amp.GradScaler`
  (Micikevicius et al. 2018, "Mixed Precision Training" §3.2: the loss is multiplied by a scale
  S before backward, gradients are divided by S before the step, and a step with inf/NaN
  gradients is skipped while S is halved). CUDA only.
"""

from __future__ import annotations

import contextlib
import logging

import torch

from ..errors import InputError
from ..runtime import cpu_info_field

__all__ = [
    "PRECISIONS",
    "cpu_flags",
    "cpu_bf16_units",
    "cpu_int8_units",
    "bf16_native",
    "check_precision",
    "autocast",
    "grad_scaler",
]

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo (empty when unreadable:
    not Linux, or no flags line).

    Args:
        cpuinfo: the text of /proc/cpuinfo (read when None).
    """
    return set((cpu_info_field("flags", cpuinfo) or "").split())


def cpu_bf16_units(cpuinfo: str | None = None) -> list[str]:
    """The bf16 matrix units this x86 CPU announces: any of ``amx_bf16`` (Intel AMX tiles) and
    ``avx512_bf16`` (VDPBF16PS); [] when none or unreadable (`cpu_flags`)."""
    flags = cpu_flags(cpuinfo)
    return [f for f in ("amx_bf16", "avx512_bf16") if f in flags]


def cpu_int8_units(cpuinfo: str | None = None) -> list[str]:
    """The int8 dot-product units this x86 CPU announces: any of ``amx_int8``,
    ``avx512_vnni`` and ``avx_vnni`` (VPDPBUSD); [] when none or unreadable (`cpu_flags`).
    Without them int8 matrix multiplies use AVX2's 16-bit multiply-adds and gain little."""
    flags = cpu_flags(cpuinfo)
    return [f for f in ("amx_int8", "avx512_vnni", "avx_vnni") if f in flags]


def bf16_native(device: torch.device | str | None = None) -> bool:
    """Whether bf16 matrix multiplies run natively on ``device`` (None: CUDA when available,
    else the CPU): a CUDA GPU with bf16 support, or a CPU announcing AVX512-BF16 or AMX-BF16
    (`cpu_bf16_units`; oneDNN's own check also passes plain AVX-512, where bf16 is emulated)."""
    kind = torch.device(device).type if device is not None else None
    if kind == "cuda" or (kind is None and torch.cuda.is_available()):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return bool(cpu_bf16_units())


def check_precision(precision: str, device: torch.device) -> None:
    """Refuse a precision ``device`` cannot train in; warn when bf16 is emulated.

    Raises:
        ValueError: ``precision`` not in `PRECISIONS`, or "fp16" on a device other than CUDA
            (the gradient scaler that fp16 training needs is CUDA's).
    """
    if precision not in PRECISIONS:
        raise InputError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "fp16" and device.type != "cuda":
        raise InputError(
            f"precision 'fp16' needs a CUDA device (float16 training relies on CUDA's gradient "
            f"scaler); this run is on {device.type!r}: use 'bf16' or 'fp32'"
        )
    if precision == "bf16" and not bf16_native(device):
        logger.warning(
            "precision 'bf16' on %s without native bf16 matrix units: it runs (emulated) but "
            "may be slower than fp32",
            device.type,
        )


def autocast(precision: str, device: torch.device):
    """The forward-pass context of ``precision`` on ``device``: ``torch.autocast`` to bf16 or
    fp16, or a null context for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=_DTYPES[precision])


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """A `torch.amp.GradScaler`, enabled for fp16 only (disabled, its ``scale``/``unscale_``/
    ``step``/``update`` pass through and its state dict is empty)."""
    enabled = precision == "fp16"
    return torch.amp.GradScaler(device.type if enabled else "cuda", enabled=enabled)
