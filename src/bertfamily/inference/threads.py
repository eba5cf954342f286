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

from ..runtime import ThreadPolicy, default_policy

__all__ = ["ThreadPolicy", "default_policy"]
