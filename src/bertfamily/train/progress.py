"""The training progress bar (rich, on stderr): steps done of ``max_steps``, elapsed time, and a
time left that never runs past the time budget. On a terminal it is redrawn as it goes; when
stderr is a pipe or a file, its last state is written once, when the run ends."""

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

        p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),  # stdout is the commands' machine output
            transient=False,
        )
        p.start()
        task = p.add_task("training", total=self.config.max_steps, completed=self.state.step)
        if self.config.max_time_s is not None:  # ETA: never past the time budget
            p.columns = (*p.columns[:-1], _budget_column(time.monotonic() + self.config.max_time_s))
        return p, task

    @staticmethod
    def _finish_bar(bar) -> None:
        if bar is not None:
            bar[0].stop()


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
