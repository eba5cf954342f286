"""The thread policy of inference, one place for the Python API, the command line and the
server: how many torch intra-op threads a computation runs on.

- A count given (``threads=N`` / ``--threads N``, or fixed for the process by a command or
  server: `runtime.fixed_threads`) is used exactly, in whatever thread computes (torch's
  count is per thread: the server's batcher thread would otherwise run the default).
- ``OMP_NUM_THREADS`` set: that count.
- Otherwise an `runtime.AdaptiveThreads` governor follows the load while the work runs: the
  command line and each server replica start one for the whole process
  (`runtime.apply_threads`); a Python caller gets one per call of an embedder or pipeline
  (`ThreadPolicy.scope`), unless a governor is active already.

The governor re-decides between batches only (`inference.batches.run_batches` is where it
looks), never inside the model.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator

from ..errors import InputError
from ..runtime import (
    AdaptiveThreads,
    active_governor,
    env_threads,
    fixed_threads,
    max_thread_count,
    max_threads_per_process,
    threads_are_automatic,
)

__all__ = ["ThreadPolicy"]


class ThreadPolicy:
    """torch's intra-op thread count while an inference object computes.

    Args:
        threads: 0 = automatic (a governor that follows the load, see the module docstring);
            N in 1..`runtime.max_thread_count` = exactly N.

    Raises:
        InputError: ``threads`` not a whole number in 0..`runtime.max_thread_count`.
    """

    def __init__(self, threads: int = 0) -> None:
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
