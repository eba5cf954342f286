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


def cpu_flags() -> list[str]:
    """The SIMD and matrix flags of /proc/cpuinfo that decide the kernels' speed (avx*, fma,
    amx*, *vnni, *bf16, f16c)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            keep = ("avx", "fma", "amx", "vnni", "bf16", "f16c")
            return sorted(f for f in line.split(":", 1)[1].split() if any(k in f for k in keep))
    return []
