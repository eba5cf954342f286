"""The machine a benchmark ran on, for its JSON output (shared by the scripts in benchmarks/;
they run as ``python benchmarks/NAME.py``, so this directory is on ``sys.path``)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else `platform.processor`, else "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: The /proc/cpuinfo flags that decide which kernels torch runs (vector width, bf16, AMX).
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_flags() -> list[str]:
    """Which of `KERNEL_FLAGS` the CPU reports (empty where /proc/cpuinfo is unreadable)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in KERNEL_FLAGS if f in have]
    except OSError:
        pass
    return []
