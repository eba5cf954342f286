"""Dynamic batching for the server: the inputs of requests that arrive together run in one
model call, up to a token budget (text-embeddings-inference's ``--max-batch-tokens``).

One worker task takes every request waiting in the queue whose tokens still fit the budget
(at least one), groups them by their options (``key``: e.g. ``normalize``), and runs each group
in one call of ``run`` on a single worker thread, so the event loop keeps accepting requests
while the model computes. The model call sorts the inputs by length and cuts them into batches
itself (`SentenceEmbedder.encode` with ``max_batch_tokens``); each request gets its own rows
back, in its own order.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError

log = logging.getLogger(__name__)

#: ``run(key, inputs) -> one result per input`` (a list, or an array of rows).
RunFn = Callable[[Hashable, list[Any]], Sequence[Any]]


@dataclass
class _Job:
    inputs: list[Any]
    tokens: int
    key: Hashable
    future: asyncio.Future = field(repr=False)
    queued: float = field(default_factory=time.perf_counter)


class DynamicBatcher:
    """Queue requests and run them together.

    Args:
        run: the model call; runs on one worker thread, never two at once.
        max_batch_tokens: the budget of one gathered round (sum of the requests' token counts;
            a request larger than it runs alone).
        batching: False runs every request alone (the baseline the load benchmark compares).
        on_round: called (on the event loop) with (requests, inputs) of each model call, for
            metrics.
        max_batch_requests: most requests in one gathered round (None: no cap but the
            token budget).
        on_computed: called (on the event loop) after each successful model call with the
            seconds each of its requests waited in the queue, the call's seconds, its inputs
            and its tokens, for metrics.

    Raises:
        ValueError: max_batch_tokens < 1.
    """

    def __init__(
        self,
        run: RunFn,
        max_batch_tokens: int,
        *,
        batching: bool = True,
        on_round: Callable[[int, int], None] | None = None,
        max_batch_requests: int | None = None,
        on_computed: Callable[[list[float], float, int, int], None] | None = None,
    ) -> None:
        if max_batch_tokens < 1:
            raise InputError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        self.run = run
        self.max_batch_tokens = max_batch_tokens
        self.batching = batching
        self.on_round = on_round
        self.max_batch_requests = max_batch_requests
        self.on_computed = on_computed
        self._pending: collections.deque[_Job] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._closing = False

    async def start(self) -> None:
        """Start the worker (inside the running event loop)."""
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertfamily-model")
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Finish every queued request, then stop the worker and its thread."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            await self._task
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    async def submit(self, inputs: list[Any], tokens: int, key: Hashable = None) -> Sequence[Any]:
        """Queue one request's inputs; returns ``run``'s results for them, in their order.

        Raises:
            RuntimeError: the batcher is not running (not started, or stopping).
            Exception: whatever ``run`` raises for the group this request ran in.
        """
        if self._task is None or self._closing or self._wake is None:
            raise RuntimeError("the model worker is not running")
        future = asyncio.get_running_loop().create_future()
        self._pending.append(_Job(list(inputs), tokens, key, future))
        self._wake.set()
        return await future

    def _take(self) -> list[_Job]:
        """The next round: the oldest job, then (batching on) every following job that still
        fits the token budget, in arrival order; jobs whose request was cancelled (its client
        went away) are dropped, never computed."""
        while self._pending and self._pending[0].future.done():  # cancelled: client gone
            self._pending.popleft()
        if not self._pending:
            return []
        jobs = [self._pending.popleft()]
        tokens = jobs[0].tokens
        cap = self.max_batch_requests or len(self._pending) + 1
        while self.batching and self._pending and len(jobs) < cap:
            nxt = self._pending[0]
            if nxt.future.done():  # cancelled while queued: never computed
                self._pending.popleft()
                continue
            if tokens + nxt.tokens > self.max_batch_tokens:
                break
            jobs.append(self._pending.popleft())
            tokens += nxt.tokens
        return jobs

    async def _loop(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            jobs = self._take()
            if not jobs:
                continue
            groups: dict[Hashable, list[_Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for key, group in groups.items():
                inputs = [x for job in group for x in job.inputs]
                if self.on_round is not None:
                    self.on_round(len(group), len(inputs))
                started = time.perf_counter()
                try:
                    results = await loop.run_in_executor(self._executor, self.run, key, inputs)
                    if self.on_computed is not None:
                        waits = [started - job.queued for job in group]
                        tokens = sum(job.tokens for job in group)
                        self.on_computed(waits, time.perf_counter() - started, len(inputs), tokens)
                except Exception as e:
                    if len(group) == 1:
                        log.warning("model call failed: %s: %s", type(e).__name__, e)
                        if not group[0].future.done():
                            group[0].future.set_exception(e)
                        continue
                    # one bad request must not fail the others: run each alone, so only the
                    # requests that fail by themselves get their error
                    for job in group:
                        try:
                            alone = await loop.run_in_executor(
                                self._executor, self.run, key, list(job.inputs)
                            )
                        except Exception as own:
                            log.warning("model call failed: %s: %s", type(own).__name__, own)
                            if not job.future.done():
                                job.future.set_exception(own)
                            continue
                        if not job.future.done():
                            job.future.set_result(alone)
                    continue
                start = 0
                for job in group:
                    n = len(job.inputs)
                    if not job.future.done():  # a client that went away cancelled it
                        job.future.set_result(results[start : start + n])
                    start += n
