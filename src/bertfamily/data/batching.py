"""Positionable batch sources: the trainer's view of the data.

A *batch source* is a callable ``source(epoch, start=0) -> Iterator[batch]`` that yields the
batches of one epoch of this process, beginning with batch number ``start``. Calling it again
with the same arguments must give the same batches: this is what lets a checkpoint store the
data position as ``(epoch, batches consumed)`` and a resumed run continue exactly.

`IndexedBatches` is the standard source over an indexable dataset (shuffled per epoch from a
seed, sharded over data-parallel ranks, seeded collation for dynamic masking). `as_batch_source`
adapts anything else (a list of batches, a ``DataLoader``, a factory without ``start``).
`sorted_batches` is the length-sorted batching of inference (pipelines, task evaluation).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from ..errors import ArgumentTypeError, InputError
from ..runtime import ThreadPolicy, adapt_threads, default_policy

IGNORE_INDEX = -100  # label of positions that carry no loss (sub-tokens, special tokens)

__all__ = [
    "BatchSource",
    "IndexedBatches",
    "TokenRows",
    "as_batch_source",
    "default_collate",
    "run_batches",
    "sorted_batches",
]


class BatchSource(Protocol):
    """A resumable source of batches: ``source(epoch, start)`` yields the epoch's batches."""

    def __call__(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """Yield the batches of ``epoch``, from batch index ``start`` on."""


def default_collate(examples: list[Any], rng: np.random.Generator) -> Any:
    """Stack a list of dicts of equal-shape arrays/tensors/numbers into a dict of tensors."""
    del rng
    first = examples[0]
    if isinstance(first, dict):
        return {k: torch.as_tensor(np.stack([np.asarray(e[k]) for e in examples])) for k in first}
    return torch.as_tensor(np.stack([np.asarray(e) for e in examples]))


class IndexedBatches:
    """Batches of ``dataset[i]`` in a seeded per-epoch order, sharded over ranks.

    Each epoch the indices are permuted with ``numpy.random.default_rng((seed, epoch))`` (or
    kept in order when ``shuffle`` is False) and cut into *global* batches of
    ``batch_size * world_size`` examples; rank r takes the r-th slice of ``batch_size`` of each
    global batch, so K processes with ``batch_size`` b see exactly the examples one process
    with ``batch_size`` K·b would. An incomplete last global batch is dropped.

    Args:
        dataset: anything with ``__len__`` and ``__getitem__(int)``.
        batch_size: examples per process per batch.
        collate: ``(examples, rng) -> batch``; ``rng`` is a numpy Generator seeded from
            (seed, epoch, batch number, rank), so random choices made at collation (dynamic
            masking) are reproducible and differ between epochs.
        shuffle: permute the indices every epoch (False keeps them in order).
        seed: seeds the per-epoch order and the collation ``rng``.
        rank: this process's data-parallel position.
        world_size: the number of data-parallel processes.

    Raises:
        ValueError: a non-positive batch size, or fewer examples than one global batch.
    """

    def __init__(
        self,
        dataset: Sequence[Any],
        batch_size: int,
        collate: Callable[[list[Any], np.random.Generator], Any] = default_collate,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if batch_size < 1:
            raise InputError(f"batch_size must be >= 1, got {batch_size}")
        if len(dataset) < batch_size * world_size:
            raise InputError(
                f"{len(dataset)} examples is fewer than one global batch of "
                f"{batch_size} x {world_size} processes"
            )
        self.dataset, self.batch_size, self.collate = dataset, batch_size, collate
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size

    def __len__(self) -> int:
        """Batches per epoch (per process)."""
        return len(self.dataset) // (self.batch_size * self.world_size)

    def __call__(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """Yield this rank's batches of ``epoch`` from batch ``start`` on; the order is seeded by
        (seed, epoch), so a resumed epoch continues the same order."""
        n = len(self.dataset)
        order = (
            np.random.default_rng((self.seed, epoch)).permutation(n)
            if self.shuffle
            else np.arange(n)
        )
        g = self.batch_size * self.world_size
        for b in range(start, len(self)):
            lo = b * g + self.rank * self.batch_size
            examples = [self.dataset[int(i)] for i in order[lo : lo + self.batch_size]]
            rng = np.random.default_rng((self.seed, epoch, b, self.rank, 1))
            yield self.collate(examples, rng)


def as_batch_source(obj: Any) -> BatchSource:
    """Adapt ``obj`` to the `BatchSource` protocol.

    - a callable accepting ``start``: returned as is;
    - a callable ``(epoch) -> iterable``: batches before ``start`` are skipped by iterating;
    - a re-iterable (list, ``DataLoader``): the same each epoch (``set_epoch`` is called on its
      sampler when it has one, as for ``DistributedSampler``), skipping by iterating.

    Raises:
        TypeError: ``obj`` is neither callable nor iterable.
    """
    if callable(obj) and not hasattr(obj, "__iter__"):
        params = inspect.signature(obj).parameters
        if "start" in params:
            return obj

        def from_factory(epoch: int, start: int = 0) -> Iterator[Any]:
            return itertools.islice(iter(obj(epoch)), start, None)

        return from_factory
    if isinstance(obj, Iterable):

        def from_iterable(epoch: int, start: int = 0) -> Iterator[Any]:
            sampler = getattr(obj, "sampler", None)
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(epoch)
            return itertools.islice(iter(obj), start, None)

        return from_iterable
    raise ArgumentTypeError(
        f"train_batches must be a batch source, a factory or an iterable, got {type(obj).__name__}"
    )


def sorted_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int | None = None
) -> Iterator[list[int]]:
    """Indices of the items, longest first, in chunks of ``batch_size``: sequences of similar
    length share a batch, so little padding is computed; the caller puts results back in its
    own order.

    Args:
        lengths: one length (e.g. token count) per item.
        batch_size: items per chunk (the last may be smaller).
        max_tokens: also close a chunk before its padded size (items × its longest length,
            the first one) would exceed this token budget, as text-embeddings-inference's
            ``--max-batch-tokens``; an item longer than the budget gets a chunk of its own.

    Raises:
        ValueError: batch_size < 1, or max_tokens < 1.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise InputError(f"max_tokens must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    chunk: list[int] = []
    for i in order:
        longest = lengths[chunk[0]] if chunk else lengths[i]
        full = len(chunk) == batch_size
        over = max_tokens is not None and (len(chunk) + 1) * longest > max_tokens
        if chunk and (full or over):
            yield chunk
            chunk = []
        chunk.append(i)
    if chunk:
        yield chunk


@dataclass
class TokenRows:
    """Texts (or text pairs) tokenized once, unpadded.

    Attributes:
        rows: ``input_ids``, ``attention_mask`` and, for models with segments,
            ``token_type_ids`` (and any other per-token field a pipeline keeps, such as
            ``offset_mapping``): one list per text, ints.
        truncated: per text, whether it was cut to the length limit.
        skip: leading tokens (a prompt) left out of the pooling; embedding only.
        extra: per-text data a pipeline keeps beside the rows (word ids, windows, ...).
    """

    rows: dict[str, list[list[Any]]]
    truncated: list[bool]
    skip: int = 0
    extra: dict[str, list[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows["input_ids"])

    @property
    def lengths(self) -> list[int]:
        """Tokens per text (special tokens included)."""
        return [len(r) for r in self.rows["input_ids"]]

    def take(self, positions: Sequence[int]) -> TokenRows:
        """The rows at ``positions`` (in that order), with their ``truncated`` flags and
        ``extra`` data: a request's rows split off, or rows gathered for one model call."""
        return TokenRows(
            {k: [v[i] for i in positions] for k, v in self.rows.items()},
            [self.truncated[i] for i in positions],
            self.skip,
            {k: [v[i] for i in positions] for k, v in self.extra.items()},
        )

    @classmethod
    def join(cls, parts: Sequence[TokenRows]) -> TokenRows:
        """The rows of ``parts`` one after the other (``rows``, ``truncated``, ``extra``).

        Raises:
            InputError: no parts, or parts with different fields or prompt lengths (``skip``).
        """
        if not parts:
            raise InputError("cannot join zero TokenRows")
        first = parts[0]
        for part in parts[1:]:
            if set(part.rows) != set(first.rows) or set(part.extra) != set(first.extra):
                raise InputError("cannot join TokenRows with different fields")
            if part.skip != first.skip:
                raise InputError(f"cannot join TokenRows of prompts {first.skip} and {part.skip}")
        return cls(
            {k: [r for p in parts for r in p.rows[k]] for k in first.rows},
            [t for p in parts for t in p.truncated],
            first.skip,
            {k: [x for p in parts for x in p.extra[k]] for k in first.extra},
        )


def run_batches(
    tokens: TokenRows,
    step: Callable[[dict[str, torch.Tensor]], Any],
    *,
    pad: Callable[[dict[str, list[list[Any]]], int], dict[str, list[list[Any]]]],
    batch_size: int = 32,
    max_batch_tokens: int | None = None,
    device: str | torch.device = "cpu",
    keys: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
    threads: ThreadPolicy | None = None,
) -> Iterator[tuple[list[int], Any]]:
    """Run ``step`` over length-sorted batches of ``tokens``, padded per batch.

    Rows of similar length share a batch (`data.batching.sorted_batches`, longest first), so
    little padding is computed. The batches run under the thread policy (`runtime.ThreadPolicy`)
    in the thread that computes; before each batch the active governor (if any:
    `runtime.AdaptiveThreads`) may re-decide torch's thread count — the one place it looks.

    Args:
        tokens: the rows (`tokenize_rows`).
        step: (padded batch of (B, T) int64 tensors) → the batch's output (anything).
        pad: right-pads lists of rows to a length (``Tokenizer.pad_rows``).
        batch_size: rows per batch (≥ 1).
        max_batch_tokens: also cap each batch's padded size (rows × longest) at this many
            tokens, as text-embeddings-inference's ``--max-batch-tokens``.
        device: where the tensors go.
        keys: the fields of ``tokens.rows`` given to ``step`` (default: all).
        progress: called with the number of rows done after each batch.
        threads: the caller's thread policy (default `runtime.default_policy`: automatic).

    Yields:
        (positions of the batch's rows in ``tokens``, ``step``'s output), batch by batch.

    Raises:
        InputError: ``batch_size`` or ``max_batch_tokens`` < 1.
    """
    if max_batch_tokens is not None and max_batch_tokens < 1:
        raise InputError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
    with (threads or default_policy()).scope():
        lengths = tokens.lengths
        names = list(tokens.rows) if keys is None else [k for k in keys if k in tokens.rows]
        for idx in sorted_batches(lengths, batch_size, max_batch_tokens):
            adapt_threads()  # the governor's look between batches (a no-op without one)
            rows = {k: [tokens.rows[k][i] for i in idx] for k in names}
            padded = pad(rows, max(lengths[i] for i in idx))
            batch = {
                k: v.to(device) if isinstance(v, torch.Tensor) else torch.tensor(v, device=device)
                for k, v in padded.items()
            }
            yield idx, step(batch)
            if progress is not None:
                progress(len(idx))
