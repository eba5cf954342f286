"""Token lengths for the pipelines' length-sorted batching (`bertfamily.train.data.sorted_batches`):
sequences of similar length share a batch, so little padding is computed; results go back to
the caller's order."""

from __future__ import annotations

from collections.abc import Sequence


def token_lengths(tokenizer, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[int]:
    """Token counts (with special tokens) of each text (or pair), from the fast tokenizer."""
    inputs = list(zip(texts, pairs)) if pairs is not None else list(texts)
    return [len(e.ids) for e in tokenizer.backend.encode_batch(inputs)]
