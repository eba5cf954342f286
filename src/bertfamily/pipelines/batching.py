"""Length-sorted batching shared by the pipelines: sequences of similar length share a batch, so
little padding is computed; results go back to the caller's order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def sorted_batches(lengths: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Indices of the items, longest first, in chunks of ``batch_size``.

    Raises:
        ValueError: batch_size < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


def token_lengths(tokenizer, texts: Sequence[str],
                  pairs: Sequence[str] | None = None) -> list[int]:
    """Token counts (with special tokens) of each text (or pair), from the fast tokenizer."""
    inputs = list(zip(texts, pairs)) if pairs is not None else list(texts)
    return [len(e.ids) for e in tokenizer.backend.encode_batch(inputs)]
