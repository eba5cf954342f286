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
