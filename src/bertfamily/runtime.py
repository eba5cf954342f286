"""What this process runs with: the cores that are free right now and the optional packages.

**Threads.** Never more than the cores that are free right now.

Every torch operator on CPU is a parallel region whose threads meet at a barrier when it ends.
When another process holds one of the cores, the thread that shares it runs only part of the
time and every barrier waits for it: with 2 threads on 2 cores and one core taken, each region
takes about as long as on one thread *plus* the waits. One thread per free core avoids that.

`free_cores` samples ``/proc/stat`` for a short interval (Linux; elsewhere every core counts as
free) and subtracts what other processes used on the CPUs this process may run on; the result
is capped by the physical cores and by a cgroup CPU quota. `choose_threads` turns a request
(``--threads N``; 0 = automatic) into a count and the reason, and `apply_threads` sets torch's
intra-op pool to it. Nothing here runs at import.

**Optional packages.** `require` imports one or raises `MissingDependency` with the
``pip install "bertfamily[extra]"`` that installs it.
"""

from __future__ import annotations

import importlib
import math
import os
import time
from pathlib import Path
from types import ModuleType

from .errors import MissingDependency


def cpu_info_field(name: str, cpuinfo: str | None = None) -> str | None:
    """The value of the first ``name : value`` line of /proc/cpuinfo (the first CPU's:
    "vendor_id" → "AuthenticAMD", "flags" → "fpu vme …"), or None when there is no such
    line or the file cannot be read (not Linux).

    Args:
        cpuinfo: the text of /proc/cpuinfo (read when None; tests pass their own).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == name:
            return value.strip()
    return None


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads not counted; /proc/cpuinfo when
    readable, else the logical count), capped by a cgroup v2 CPU quota (``cpu.max``)."""
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    cores: set[tuple[str, str]] = set()
    try:
        phys = ""
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "physical id":
                phys = value.strip()
            elif key == "core id":
                cores.add((phys, value.strip()))
    except OSError:
        pass
    count = max(1, min(logical, len(cores))) if cores else max(1, logical)
    quota = cgroup_cpu_quota()
    return max(1, min(count, math.ceil(quota))) if quota else count


def cgroup_cpu_quota(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> float | None:
    """CPUs allowed by the cgroup v2 quota (``cpu.max``: "quota period" in µs, or "max
    period"), or None when there is no quota or no such file."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def _cpu_times() -> dict[int, tuple[int, int]]:
    """Logical CPU → (idle jiffies incl. iowait, total jiffies) from /proc/stat."""
    times = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        times[int(name[3:])] = (values[3] + values[4], sum(values))
    return times


def free_cores(sample_s: float = 0.1) -> float:
    """Cores of this process's CPU set that other processes left idle during ``sample_s``
    seconds (this process sleeps meanwhile), in physical-core units: e.g. 2.0 on an idle
    2-core machine, ≈1.0 while another process spins on one core. Falls back to
    `physical_cores` where /proc/stat cannot be read."""
    cores = physical_cores()
    try:
        cpus = os.sched_getaffinity(0)
        before = _cpu_times()
        time.sleep(sample_s)
        after = _cpu_times()
    except (AttributeError, OSError, ValueError, IndexError):
        return float(cores)
    idle = total = 0
    for cpu in cpus:
        if cpu in before and cpu in after:
            idle += after[cpu][0] - before[cpu][0]
            total += after[cpu][1] - before[cpu][1]
    if total <= 0:
        return float(cores)
    return cores * idle / total


def choose_threads(requested: int = 0, processes: int = 1) -> tuple[int, str]:
    """The intra-op thread count for one of ``processes`` processes on this machine and why.

    ``requested`` > 0 wins; else ``OMP_NUM_THREADS`` when set; else the free cores
    (`free_cores`, rounded to the nearest whole core, at least 1) divided by ``processes``.

    Raises:
        InputError: ``requested`` < 0.
    """
    if requested < 0:
        from .errors import InputError

        raise InputError(f"threads must be >= 0 (0 = automatic), got {requested}")
    if requested > 0:
        return requested, "--threads"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env), f"OMP_NUM_THREADS={env}"
    cores = physical_cores()
    free = free_cores()
    usable = max(1, min(cores, int(free + 0.5)))
    per_process = max(1, usable // max(1, processes))
    why = f"{free:.1f} of {cores} physical cores free"
    if processes > 1:
        why += f" / {processes} processes"
    return per_process, why


def apply_threads(requested: int = 0, processes: int = 1) -> str:
    """Set torch's intra-op threads by `choose_threads`; returns the line that says what was
    chosen (``"threads: 1 torch intra-op (1.0 of 2 physical cores free)"``)."""
    import torch

    count, why = choose_threads(requested, processes)
    torch.set_num_threads(count)
    return f"threads: {count} torch intra-op ({why})"


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
