"""The dtype an application runs in: fp32 by default (``dtype="auto"``), bf16 as an explicit
choice (``"bf16"``, or ``"fastest"``: bf16 only where the hardware has bf16 matrix units)."""

from __future__ import annotations

import torch

from ..errors import InputError
from ..train.mixed_precision import cpu_bf16_units

__all__ = ["DTYPE_NAMES", "fastest_dtype", "resolve_dtype"]

DTYPE_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def resolve_dtype(
    dtype: str | torch.dtype | None, device: str | torch.device = "cpu", cpuinfo: str | None = None
) -> tuple[torch.dtype, str]:
    """The parameter dtype to run in, and why (one line for a log or stderr).

    The default is the faithful one: ``"auto"`` (and None) is fp32 on every device, so a
    model gives the reference's numbers (sentence-transformers and transformers run fp32 on the
    CPU; ≤ 1e-5 on every parity test) and the same vector for the same text whatever its batch
    neighbours. bf16 is an explicit choice: ``"bf16"``, or ``"fastest"``, which picks bf16 only
    where it pays: a CUDA device that supports bf16, or a CPU with native bf16 dot-product
    units — AMX-BF16 tiles, or AVX512-BF16 alone (``vdpbf16ps``, as on AMD Zen 4): on a 2-core
    Zen 4 MiniLM embeddings ran 1.64× (Austen lines) and 1.40× (short queries) fp32's speed
    idle at min cosine 0.9999 to fp32 (benchmarks/embed.py → results/embed_zen4.json), but a
    text's bf16 vector depends on its batch neighbours by up to ~1e-3 and a Dense layer's
    output differs from sentence-transformers by ~1e-2 (issue 42). Elsewhere ``"fastest"`` is
    fp32: emulated bf16 is slower than fp32 (0.26× on an AVX2-only CPU, issue 20).

    Args:
        dtype: "auto" (fp32), "fp32", "bf16", "fastest", a torch dtype, or None (fp32).
        device: where the model runs.
        cpuinfo: /proc/cpuinfo text, for tests (read when None).

    Returns:
        (torch dtype, reason).

    Raises:
        InputError (a ValueError): an unknown dtype name.
    """
    if dtype is None:
        return torch.float32, "fp32 (default)"
    if isinstance(dtype, torch.dtype):
        return dtype, f"{str(dtype).removeprefix('torch.')} (requested)"
    if dtype in DTYPE_NAMES:
        return DTYPE_NAMES[dtype], f"{dtype} (requested)"
    if dtype == "auto":
        return torch.float32, "fp32 (auto: the faithful default; --dtype fastest for bf16)"
    if dtype != "fastest":
        raise InputError(
            f"dtype must be auto, fastest or one of {sorted(DTYPE_NAMES)}, got {dtype!r}"
        )
    return fastest_dtype(device, cpuinfo)


def fastest_dtype(
    device: str | torch.device = "cpu", cpuinfo: str | None = None
) -> tuple[torch.dtype, str]:
    """``dtype="fastest"``: bf16 where the hardware has bf16 matrix units, else fp32 (see
    `resolve_dtype`).

    Args:
        device: where the model runs.
        cpuinfo: /proc/cpuinfo text, for tests (read when None).

    Returns:
        (torch dtype, reason).
    """
    device = torch.device(device)
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, "bf16 (fastest: this CUDA device supports bf16)"
        return torch.float32, "fp32 (fastest: this CUDA device has no bf16 support)"
    if device.type != "cpu":
        return torch.float32, f"fp32 (fastest: no bf16 rule for device {device.type})"
    units = cpu_bf16_units(cpuinfo)
    if "amx_bf16" in units:
        return torch.bfloat16, "bf16 (fastest: this CPU has AMX-BF16 matrix units)"
    if units:
        return torch.bfloat16, "bf16 (fastest: this CPU has AVX512-BF16 dot-product units)"
    return torch.float32, "fp32 (fastest: this CPU has no bf16 matrix units; bf16 would be slower)"
