"""Token lengths for the pipelines' length-sorted batching (`bertfamily.train.data.sorted_batches`):
sequences of similar length share a batch, so little padding is computed; results go back to
the caller's order."""

from __future__ import annotations

from collections.abc import Sequence


def token_lengths(
    tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    max_length: int | None = None,
) -> list[int]:
    """Token counts (with special tokens) of each text (or pair) after truncation to
    ``max_length`` (default: the tokenizer's ``model_max_length``), so a huge text costs no
    more than one of the maximum length (the tokenizer cuts it by characters first)."""
    if not len(texts):
        return []
    enc = tokenizer(
        list(texts),
        list(pairs) if pairs is not None else None,
        max_length=max_length,
        padding=False,
        return_tensors=None,
    )
    return [len(ids) for ids in enc["input_ids"]]
