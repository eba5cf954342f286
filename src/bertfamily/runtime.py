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
intra-op pool to it. One parser reads every count: `thread_count` checks a requested one (a
whole number up to `max_thread_count`, else `InputError`), and `env_threads` reads
``OMP_NUM_THREADS`` without ever failing (too large: capped, with a warning; not a count:
ignored, with a warning), as plain torch runs with any value of it. A count chosen
automatically then follows the load while the command runs: `AdaptiveThreads` re-decides it
between batches from what other processes used since its last look (/proc/stat minus this
process's own CPU time), so a long embedding run or a server drops a thread when a neighbour
starts and takes it back when the neighbour ends. Nothing here runs at import.

**Optional packages.** `require` imports one or raises `MissingDependency` with the
``pip install "bertfamily[extra]"`` that installs it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import numbers
import os
import re
import threading
import time
from collections.abc import Iterator
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

    ``requested`` > 0 wins; else ``OMP_NUM_THREADS`` when it holds a usable count
    (`env_threads`: one above `max_thread_count` is capped, garbage ignored, each with a
    warning); else the free cores (`free_cores`, rounded to the nearest whole core, at least 1)
    divided by ``processes``.

    Raises:
        InputError: ``requested`` not a whole number in 0..`max_thread_count`
            (`thread_count`).
    """
    requested = thread_count(requested, "threads")
    if requested > 0:
        return requested, "--threads"
    env = env_threads()
    if env is not None:
        return env, f"OMP_NUM_THREADS={env}"
    cores = physical_cores()
    free = free_cores()
    usable = max(1, min(cores, int(free + 0.5)))
    per_process = max(1, usable // max(1, processes))
    why = f"{free:.1f} of {cores} physical cores free"
    if processes > 1:
        why += f" / {processes} processes"
    return per_process, why


# --- the one parser of thread counts: --threads, threads= arguments, OMP_NUM_THREADS ---------
# A count far above the CPUs makes torch segfault (torch.set_num_threads(10**6)) or raise
# "Overflow when unpacking long long" (10**20); plain torch ignores such a variable, so we must
# never do worse. OpenMP's own syntax for the variable: a whole number, optionally signed "+",
# optionally followed by the nested levels' counts ("4,2": 4 at the top level).
_OMP_COUNT = re.compile(r"\s*\+?([0-9]+)\s*(?:,[0-9,\s]*)?")
_WARNED: set[str] = set()  # environment values already warned about (one line each)


def thread_count(value: object, source: str = "threads", *, minimum: int = 0) -> int:
    """``value`` as a thread count: a whole number from ``minimum`` (0 = automatic, where the
    caller allows it) to `max_thread_count`. The one check of every count a user gives: the
    ``--threads`` flag, ``threads=`` arguments, `AdaptiveThreads`.

    Args:
        value: an int (not a bool; a str is refused too: parse the environment with
            `env_threads`).
        source: what the value was, for the message ("threads", "max_threads").
        minimum: the smallest count allowed (0 or 1).

    Raises:
        InputError: not a whole number, or outside ``minimum``..`max_thread_count`; the
            message names ``source`` and the range.
    """
    from .errors import InputError

    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{source} must be a whole number, got {value!r}")
    count, limit = int(value), max_thread_count()
    if minimum == 0 and count < 0:
        raise InputError(f"{source} must be >= 0 (0 = automatic), got {count}")
    if count < minimum or count > limit:
        span = f"at most {limit}" if count > limit and minimum == 0 else f"between 1 and {limit}"
        raise InputError(f"{source} must be {span} (4 per logical CPU), got {_short_int(count)}")
    return count


def env_threads(name: str = "OMP_NUM_THREADS") -> int | None:
    """The thread count the environment variable ``name`` asks for, or None (unset, blank or
    unusable). Never raises: plain torch runs whatever the variable holds, so bertfamily does
    too. A count above the logical CPUs is capped to them (libgomp and torch accept at most
    `max_thread_count`; more threads than CPUs only wait at each barrier); a value that is not
    a count >= 1 (``abc``, ``0``, ``-3``, ``2.5``) is ignored, the count then chosen as without
    the variable. Each says so in one warning line (logger ``bertfamily.runtime``), once per
    value and process. OpenMP's list form (``4,2``) gives its first count."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    match = _OMP_COUNT.fullmatch(raw)
    count = int(match.group(1)) if match else 0
    if count < 1:
        _warn_once(
            f"{name}={raw}",
            f"{name}={raw!r} is not a thread count >= 1; ignored (threads chosen as if unset)",
        )
        return None
    cpus = os.cpu_count() or 1
    if count > max_thread_count():
        _warn_once(
            f"{name}={raw}",
            f"{name}={_short_int(count)} asks for more than {max_thread_count()} threads (4 per "
            f"logical CPU); using {cpus} (the logical CPUs)",
        )
        return cpus
    return count


def env_int(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    """The whole number the environment variable ``name`` holds, or ``default`` when it is unset
    or blank. The one parser of every numeric variable bertfamily reads other than thread
    counts (`env_threads`): ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``BERTFAMILY_MAX_PARAMETERS``. Digits (an optional sign, surrounding blanks), optionally
    times a power of ten (``1e9``); ``1_000``, ``2.5`` or ``1e400`` are refused.

    Args:
        minimum, maximum: the bounds, inclusive (``maximum`` None: no upper bound).

    Raises:
        InputError: not a whole number, or outside the bounds; one line naming the variable,
            its value (long values elided) and the range.
    """
    from .errors import InputError

    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    match = _ENV_INT.fullmatch(raw)
    span = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
    if match is None:
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise InputError(f"environment variable {name}={shown!r} must be a whole number {span}")
    value = int(match.group(1)) * 10 ** int(match.group(2) or 0)
    if value < minimum or (maximum is not None and value > maximum):
        raise InputError(
            f"environment variable {name}={_short_int(value)} must be a whole number {span}"
        )
    return value


MAX_PROCESSES = 1 << 20  # the bound of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
# digits with an optional power of ten ("1e9": 10**9; at most 10**99, so never a float's inf)
_ENV_INT = re.compile(r"\s*([+-]?[0-9]{1,30})(?:[eE]\+?([0-9]{1,2}))?\s*")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # read by libgomp / MKL at torch load


def sanitize_thread_environment() -> dict[str, str | None]:
    """Rewrite ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` to what `env_threads` makes of them,
    so that libgomp and MKL (which read them once, when torch loads) and every child process
    see a sane count: a count above `max_thread_count` becomes the logical CPUs, a value that
    is not a count >= 1 is removed; each with the one warning line of `env_threads`. A valid
    value is left exactly as written. Called by the command line before anything imports
    torch; a library user's environment is theirs. Returns ``{name: new value or None}`` for
    the variables it changed."""
    changed: dict[str, str | None] = {}
    for name in THREAD_VARIABLES:
        raw = os.environ.get(name)
        if raw is None or not raw.strip():
            continue
        count = env_threads(name)
        match = _OMP_COUNT.fullmatch(raw)
        if count is None:
            del os.environ[name]
            changed[name] = None
        elif match is None or int(match.group(1)) != count:
            os.environ[name] = str(count)
            changed[name] = str(count)
    return changed


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logging.getLogger(__name__).warning(message)


def _short_int(n: int) -> str:
    """``n`` in decimal, its middle elided past 24 digits (a message stays one short line)."""
    text = str(n)
    return text if len(text) <= 24 else f"{text[:10]}…{text[-4:]} ({len(text)} digits)"


def _omp_num_threads() -> int | None:
    """The old name of `env_threads` (kept for callers)."""
    return env_threads()


def threads_are_automatic(requested: int = 0) -> bool:
    """True when `choose_threads` picks the count from the free cores: no ``requested`` count
    and no ``OMP_NUM_THREADS``."""
    return requested == 0 and env_threads() is None


def max_threads_per_process(processes: int = 1) -> int:
    """The most threads a governor of one of ``processes`` processes may use: the physical
    cores shared out, at least 1."""
    return max(1, physical_cores() // max(1, processes))


def apply_threads(requested: int = 0, processes: int = 1, *, adapt: bool = True) -> str:
    """Set torch's intra-op threads by `choose_threads`; when the count was automatic and
    ``adapt`` is true, also start an `AdaptiveThreads` governor (for the rest of the process;
    at most the physical cores / ``processes`` threads) that follows the load while the work
    runs. Returns the line that says what was chosen (``"threads: 1 torch intra-op (1.0 of 2
    physical cores free; adapting while it runs)"``)."""
    import torch

    global _FIXED
    count, why = choose_threads(requested, processes)
    torch.set_num_threads(count)
    _FIXED = count  # what every thread of the process computes on (`fixed_threads`)
    if adapt and threads_are_automatic(requested):
        _FIXED = None
        AdaptiveThreads(max_threads_per_process(processes), threads=count).start()
        why += "; adapting while it runs"
    return f"threads: {count} torch intra-op ({why})"


_FIXED: int | None = None  # the count a command fixed by `apply_threads`, if any


def fixed_threads() -> int | None:
    """The intra-op count a command or server fixed for the whole process (`apply_threads`
    with ``--threads N``, ``OMP_NUM_THREADS`` or ``adapt=False``), or None. torch's count is
    per thread: a worker thread (the server's batcher) sets it from here before it computes
    (`ThreadPolicy`)."""
    return _FIXED


def _busy_cpu_seconds(cpus: set[int]) -> float | None:
    """CPU seconds the logical CPUs ``cpus`` have spent busy since boot (every process, this
    one included; /proc/stat's total minus idle and iowait), or None where it cannot be read."""
    try:
        times = _cpu_times()
        hz = os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError, IndexError):
        return None
    busy = [times[c][1] - times[c][0] for c in cpus if c in times]
    return sum(busy) / hz if busy and hz > 0 else None


class AdaptiveThreads:
    """torch's intra-op threads kept at the cores other processes leave free while work runs.

    A command picks its thread count once, when it starts (`choose_threads`); a long run (a
    corpus to embed, a server) outlives the load it saw then. While a governor is active
    (``with governor:``, or `start`), every encoder forward calls `adapt_threads`, which at most
    every ``interval_s`` seconds compares the busy time of this process's CPUs (/proc/stat)
    with this process's own CPU time (`time.process_time`, every thread) over the time since
    the last look: the difference is what other processes used, so no sleep is needed. The
    cores left (in physical cores) set the count, between 1 and ``max_threads``, with a
    margin against flapping: one thread less when the free cores fall half a core below the
    count, one more only when they are 0.6 of a core above it.

    fp32 results do not depend on the count beyond float rounding (≤ 2e-7 on MiniLM's unit
    vectors); bf16 ones may differ by ~1e-3 between counts (oneDNN and SDPA block their work
    by thread), so a bf16 run whose load changes is not bitwise reproducible: pass
    ``--threads N`` (or set ``OMP_NUM_THREADS``) for that.

    Args:
        max_threads: the most threads (≥ 1); default `physical_cores`.
        threads: the count to start with; default ``max_threads``.
        interval_s: seconds between decisions (> 0).

    Raises:
        InputError: ``max_threads`` or ``threads`` not a whole number in 1..`max_thread_count`,
            ``interval_s`` not a number > 0.
    """

    def __init__(
        self, max_threads: int | None = None, *, threads: int | None = None, interval_s: float = 0.5
    ) -> None:
        from .errors import InputError

        for name, value in (("max_threads", max_threads), ("threads", threads)):
            if value is not None:
                thread_count(value, name, minimum=1)
        self.cores = physical_cores()
        self.max_threads = self.cores if max_threads is None else int(max_threads)
        self.threads = self.max_threads if threads is None else min(int(threads), self.max_threads)
        if isinstance(interval_s, bool) or not isinstance(interval_s, numbers.Real):
            raise InputError(f"interval_s must be a number of seconds, got {interval_s!r}")
        if not interval_s > 0:
            raise InputError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = float(interval_s)
        try:
            self.cpus = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = set(range(os.cpu_count() or 1))
        self.free: float | None = None  # the free cores seen at the last decision
        self.changes = 0  # how many times the count changed
        self._lock = threading.Lock()
        self._sample = self._read()

    def _read(self) -> tuple[float, float, float | None]:
        return time.perf_counter(), time.process_time(), _busy_cpu_seconds(self.cpus)

    def reset(self) -> None:
        """Start a new look now: the next decision covers only what happens from here on (for
        a caller that knows the time since the last look is no guide, e.g. a benchmark whose
        other engines ran in other processes meanwhile)."""
        self._sample = self._read()

    def update(self) -> int:
        """Re-decide the count when ``interval_s`` has passed since the last decision (else
        keep it), and, when this governor is in charge, make the calling thread's torch pool
        that size (the intra-op count is per thread: a thread that computed before a change
        keeps its own). Returns the count."""
        wall = time.perf_counter()
        if wall - self._sample[0] >= self.interval_s and self._lock.acquire(blocking=False):
            try:
                self._decide()
            finally:
                self._lock.release()
        if _ACTIVE and _ACTIVE[-1] is self:
            import torch

            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)
        return self.threads

    def _decide(self) -> None:
        now = self._read()
        (w0, own0, busy0), (w1, own1, busy1) = self._sample, now
        self._sample = now
        if busy0 is None or busy1 is None or w1 <= w0:
            return
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (w1 - w0)  # logical CPUs
        free = max(0.0, len(self.cpus) - others) * self.cores / max(1, len(self.cpus))
        self.free = free
        count = self.threads
        if free < count - 0.5:
            count = max(1, int(free + 0.5))
        elif free >= count + 0.6:
            count = min(self.max_threads, int(free + 0.4))
        if count != self.threads:
            self.threads = count
            self.changes += 1

    def start(self) -> AdaptiveThreads:
        """Make this the active governor: torch's threads become its count, re-decided at
        once when ``interval_s`` has passed since its last look. Returns itself."""
        import torch

        global _BASE
        with _STACK_LOCK:
            if not _ACTIVE:
                _BASE = torch.get_num_threads()  # given back when the last governor stops
            _ACTIVE.append(self)
        try:
            torch.set_num_threads(self.threads)
            self.update()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Undo `start`: the governor still active (if any) takes over, else torch gets back
        the thread count it had before the first one started, whatever the order of stops.
        (torch's count is per thread once a thread has computed: this sets the calling
        thread's and the default of new threads; a worker thread that computed under the
        governor keeps its count until it next computes under one.)"""
        import torch

        with _STACK_LOCK:
            if self not in _ACTIVE:
                return
            _ACTIVE.remove(self)
            count = _ACTIVE[-1].threads if _ACTIVE else _BASE
        if count is not None:
            torch.set_num_threads(count)

    def __enter__(self) -> AdaptiveThreads:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_ACTIVE: list[AdaptiveThreads] = []  # started governors, the last one in charge
_BASE: int | None = None  # torch's thread count before the first of them started
_STACK_LOCK = threading.Lock()


def max_thread_count() -> int:
    """The most intra-op threads a count may ask for: 4 per logical CPU (libgomp fails, and
    the process can crash, when asked for far more threads than the system allows)."""
    return 4 * (os.cpu_count() or 1)


def adapt_threads() -> None:
    """Let the active `AdaptiveThreads` (if any) re-decide torch's thread count; called by
    `Encoder.begin` before every batch. Costs a list check when no governor is active."""
    if _ACTIVE:
        _ACTIVE[-1].update()


def active_governor() -> AdaptiveThreads | None:
    """The `AdaptiveThreads` in charge now, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


@contextlib.contextmanager
def governor_scope() -> Iterator[None]:
    """Every `AdaptiveThreads` started inside the block (by `apply_threads`, say) is stopped
    when it ends, its thread count given back: what one command started does not outlive it
    in a process that runs several (tests, notebooks)."""
    global _FIXED
    depth, fixed = len(_ACTIVE), _FIXED
    try:
        yield
    finally:
        _FIXED = fixed
        while len(_ACTIVE) > depth:
            _ACTIVE[-1].stop()


_FORKED = False  # true in a child made by os.fork (see `forked_child`)


def _note_fork() -> None:
    global _FORKED
    _FORKED = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork)


def forked_child() -> bool:
    """True in a process made by ``os.fork`` from one that imported bertfamily. GNU OpenMP
    (libgomp, torch's CPU pool) is not fork-safe: a child whose parent already ran a parallel
    region on two or more threads hangs in its first parallel region on more than one thread.
    So in such a child the automatic `ThreadPolicy` keeps torch's count as it found it (as
    ``torch.utils.data`` workers do) instead of starting a governor that raises it."""
    return _FORKED


class ThreadPolicy:
    """torch's intra-op thread count while inference computes (the one batch loop,
    `data.batching.run_batches`, runs every batch under one):

        - a count given (``threads=N``, or fixed for the process by a command or server:
          `fixed_threads`) is used exactly, in whatever thread computes (torch's count is per
          thread: a server's batcher thread would otherwise run the default);
        - in a process made by ``os.fork``: torch's count as it is (`forked_child`: OpenMP
          is not fork-safe, so nothing automatic raises it there);
        - ``OMP_NUM_THREADS`` set: that count;
        - else an `AdaptiveThreads` governor follows the load while the work runs, unless one is
          active already (the command line and each server replica start one for the process).

        Args:
            threads: 0 = automatic (a governor that follows the load, see the module docstring);
                N in 1..`runtime.max_thread_count` = exactly N.

        Raises:
            InputError: ``threads`` not a whole number in 0..`runtime.max_thread_count`.
    """

    def __init__(self, threads: int = 0) -> None:
        from .errors import InputError

        if isinstance(threads, bool) or not isinstance(threads, numbers.Integral):
            raise InputError(f"threads must be a whole number (0 = automatic), got {threads!r}")
        if not 0 <= threads <= max_thread_count():
            raise InputError(
                f"threads must be between 0 (automatic) and {max_thread_count()} "
                f"(4 per logical CPU), got {threads}"
            )
        self.threads = int(threads)
        self._governor: AdaptiveThreads | None = None

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The block runs under the policy; torch's count is given back after it."""
        import torch

        count = self.threads
        if not count and forked_child():
            count = torch.get_num_threads()  # nothing raises it after a fork (`forked_child`)
        if not count and active_governor() is None:
            count = fixed_threads() or env_threads() or 0  # a command's count, or the variable
        if count:  # set in the calling thread: torch's count is per thread (a server worker)
            before = torch.get_num_threads()
            torch.set_num_threads(count)
            try:
                yield
            finally:
                torch.set_num_threads(before)
            return
        if active_governor() is not None or not threads_are_automatic():
            yield  # a command or server governs already (the batch loop follows it)
            return
        if self._governor is None:
            self._governor = AdaptiveThreads(max_threads_per_process())
        with self._governor:
            yield


_DEFAULT_POLICY: ThreadPolicy | None = None


def default_policy() -> ThreadPolicy:
    """The automatic `ThreadPolicy` shared by every inference call that names no count (one
    governor, so its look at the load carries over from call to call)."""
    global _DEFAULT_POLICY
    if _DEFAULT_POLICY is None:
        _DEFAULT_POLICY = ThreadPolicy(0)
    return _DEFAULT_POLICY


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


def require_extra(module: str, extra: str, feature: str) -> None:
    """Check that ``module`` is installed, without importing it (cheap: a command calls this
    before its model loads, so a missing optional package costs no wait).

    Args:
        module: the importable name; only its top-level package is looked up.
        extra: the bertfamily extra that installs it.
        feature: what needs it, for the message.

    Raises:
        MissingDependency: not installed; the message names ``pip install "bertfamily[extra]"``.
    """
    import importlib.util

    top = module.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a broken or half-removed package
        found = False
    if not found:
        raise MissingDependency(
            f"{feature} needs the optional package {top!r}, which is not installed; "
            f"install it with: {install_command(extra)}",
            name=top,
        )
