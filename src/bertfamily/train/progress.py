"""The training progress bar (rich, on stderr): steps done of ``max_steps``, elapsed time, and a
time left that never runs past the time budget. On a terminal it is redrawn as it goes; when
stderr is a pipe or a file, a line every `notices.PROGRESS_EVERY_S` seconds and one when the
run ends (`LineProgress`)."""

from __future__ import annotations

import time


class ProgressMixin:
    """The `Trainer`'s progress-bar methods (they use its ``config``, ``dist`` and ``state``)."""

    def _progress(self):
        if not (self.config.progress and self.dist.is_main):
            return None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(stderr=True)  # stdout is the commands' machine output
        if not console.is_terminal:  # a log or a pipe: a line every few seconds, not a bar
            lines = LineProgress(console, self.config.max_steps, self.state.step)
            return lines, None
        p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        p.start()
        task = p.add_task("training", total=self.config.max_steps, completed=self.state.step)
        if self.config.max_time_s is not None:  # ETA: never past the time budget
            began = self.config.budget_start or time.monotonic()
            p.columns = (*p.columns[:-1], _budget_column(began + self.config.max_time_s))
        return p, task

    def _phase(self, what: str):
        """A context that says ``what`` (an evaluation) is under way: in the live bar's text on
        a terminal (rich allows one live display), else `notices.waiting` (a line, then one
        every few seconds when stderr is not a terminal; log records outside the CLI)."""
        import contextlib

        from ..notices import waiting

        bar = getattr(self, "_bar", None)
        if bar is None or bar[1] is None:
            return waiting(what)

        @contextlib.contextmanager
        def in_bar():
            before = bar[0].tasks[0].description if bar[0].tasks else ""
            bar[0].update(bar[1], description=f"{what}…")
            try:
                yield
            finally:
                bar[0].update(bar[1], description=before)

        return in_bar()

    @staticmethod
    def _finish_bar(bar) -> None:
        if bar is not None:
            bar[0].stop()


class LineProgress:
    """The training progress where stderr is not a terminal: one line ``training: step
    120/400 (30%), loss 0.4123, 0:01:10 elapsed`` every `notices.PROGRESS_EVERY_S` seconds
    and one when the run ends, with the same ``update``/``stop`` calls as rich's bar."""

    def __init__(self, console, total: int, completed: int = 0) -> None:
        self.console, self.total, self.completed = console, total, completed
        self.description, self.stopped = "", False
        self.start = self.last = time.monotonic()

    def update(
        self, task=None, *, completed: int, total: int | None = None, description=""
    ) -> None:
        """Record step ``completed`` of ``total``; a line when the last is old enough."""
        from ..notices import PROGRESS_EVERY_S

        self.completed, self.total = completed, total or self.total
        self.description = description
        if time.monotonic() - self.last >= PROGRESS_EVERY_S:
            self._line()

    def stop(self) -> None:
        """The last line, when the run ends (once, however often it is called)."""
        if not self.stopped:
            self.stopped = True
            self._line()

    def _line(self) -> None:
        from datetime import timedelta

        self.last = time.monotonic()
        share = f" ({100 * self.completed // self.total}%)" if self.total else ""
        what = f", {self.description}" if self.description else ""
        elapsed = timedelta(seconds=int(self.last - self.start))
        self.console.print(
            f"training: step {self.completed}/{self.total}{share}{what}, {elapsed} elapsed",
            markup=False,
            highlight=False,
        )


def _budget_column(deadline: float):
    """A rich column: the time left, never more than until ``deadline`` (time.monotonic)."""
    from datetime import timedelta

    from rich.progress import TimeRemainingColumn
    from rich.text import Text

    class BudgetRemaining(TimeRemainingColumn):
        def render(self, task) -> Text:
            left = max(0.0, deadline - time.monotonic())
            if task.time_remaining is not None:
                left = min(left, task.time_remaining)
            return Text(str(timedelta(seconds=int(left))), style="progress.remaining")

    return BudgetRemaining()
