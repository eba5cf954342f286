"""What a long wait says while it runs, and third-party notices kept off the user's screen.

`waiting` wraps every wait that can take more than a second on first use (a download and
unpack, the int8 plan's calibration, a model export or conversion). Library code logs, never
prints: by default a wait is two INFO records of this module's logger. The command line turns
the display on (`show_progress`): then, on a terminal, a rich spinner with the elapsed time,
elsewhere (a log file, a pipe, CI) one line when the wait starts and one every
`PROGRESS_EVERY_S` seconds while it runs; in both cases one line with its duration when it
ends. Everything goes to stderr, so stdout stays machine output.
`silence_root_warnings` drops advice that libraries log on the root logger (ONNX Runtime's
quantiser asks for a pre-processing step with a URL) while a call runs.

torch-free; rich is imported only when a wait is displayed.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator

__all__ = ["Steps", "show_progress", "silence_root_warnings", "waiting"]

log = logging.getLogger(__name__)

_display = False  # set by the command line (`show_progress`)
_active: list = []  # the rich Progress of the outermost wait on a terminal, if any


def show_progress(on: bool = True) -> None:
    """Display waits on stderr (the command line calls this) or only log them (the default)."""
    global _display
    _display = on


def _console():
    from rich.console import Console

    return Console(file=sys.stderr, soft_wrap=True, highlight=False)


@contextlib.contextmanager
def waiting(what: str, *, done: str = "done", total: int | None = None) -> Iterator[Steps]:
    """Say that ``what`` is under way, for as long as the block runs.

    Not displayed (the default outside the command line): INFO records ``what…`` and ``what:
    done in 7.2 s`` of this module's logger. Displayed (`show_progress`), on stderr: on a
    terminal, a transient spinner line ``what… 0:00:07`` (rich; a wait inside another one
    replaces its text while it runs); otherwise the line ``what…`` once, when the wait starts.
    Either way ``what: done in 7.2 s`` when the block ends normally (nothing more when it
    raises: the error says why).

    With ``total`` (a wait of counted steps: the int8 plan's layers, NNCF's tries), the
    yielded `Steps` counts them (``steps.advance()``): on a terminal a progress bar
    ``what… ━━━━━╺━━ 12/40 0:00:07`` instead of the spinner; elsewhere the lines that say the
    wait is still running name the step (``12/40``); not displayed, DEBUG records.

    Args:
        what: what is being waited for, e.g. ``"fetching janeausten (apt-get download,
            unpacking)"``; plain text (no markup).
        done: the word of the closing line.
        total: the steps the wait counts (None: not counted; ``advance`` still works).

    Yields:
        `Steps` of this wait.
    """
    start = time.monotonic()
    steps = Steps(what, total)
    if not _display:
        log.info("%s…", what)
        yield steps
        log.info("%s: %s in %.1f s", what, done, time.monotonic() - start)
        return
    console = _console()
    if _active:  # nested on a terminal: show the inner wait in the outer spinner
        progress, task, outer = _active[-1]
        progress.update(task, description=f"{what}…")
        try:
            yield steps
        finally:
            progress.update(task, description=outer)
        return
    if console.is_terminal:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        counted = (BarColumn(), MofNCompleteColumn()) if total else ()
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}", markup=False),
            *counted,
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        with progress:
            task = progress.add_task(f"{what}…", total=total)
            steps._bar = (progress, task)
            _active.append((progress, task, f"{what}…"))
            try:
                yield steps
            finally:
                _active.pop()
    else:
        console.print(f"{what}…", markup=False)
        with _heartbeat(console, what, start, steps=steps):
            yield steps
    console.print(f"{what}: {done} in {time.monotonic() - start:.1f} s", markup=False)


#: Seconds between the lines that say a wait is still running when stderr is not a terminal.
PROGRESS_EVERY_S = 10.0


class Steps:
    """The steps done of a counted wait (`waiting` yields one): ``advance()`` after each.

    Attributes:
        what: the wait's text; total: its steps (None: not counted); done: steps done.
    """

    def __init__(self, what: str, total: int | None) -> None:
        self.what, self.total, self.done = what, total, 0
        self._bar = None  # (rich Progress, task) on a terminal

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more steps done (the bar never runs past ``total``)."""
        self.done = self.done + n if self.total is None else min(self.total, self.done + n)
        if self._bar is not None:
            self._bar[0].update(self._bar[1], completed=self.done)
        log.debug("%s: step %d/%s", self.what, self.done, self.total)


@contextlib.contextmanager
def _heartbeat(
    console, what: str, start: float, every: float | None = None, steps: Steps | None = None
) -> Iterator[None]:
    """While the block runs, a line ``what… still running, 20 s`` (``…, step 12/40, 20 s``
    for counted ``steps``) every ``every`` seconds (default `PROGRESS_EVERY_S`), from a daemon
    thread: a log or a pipe shows that a long wait is alive without a redrawn bar."""
    import threading

    every = PROGRESS_EVERY_S if every is None else every
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            step = f"step {steps.done}/{steps.total}, " if steps and steps.total else ""
            elapsed = time.monotonic() - start
            console.print(f"{what}… still running, {step}{elapsed:.0f} s", markup=False)

    thread = threading.Thread(target=beat, name="bertfamily-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


@contextlib.contextmanager
def silence_root_warnings(*prefixes: str) -> Iterator[None]:
    """Drop records logged on the root logger (``logging.warning(...)`` in a library) whose
    message starts with one of ``prefixes``, while the block runs; other records pass."""
    root = logging.getLogger()
    drop = _DropMessages(prefixes)
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)
