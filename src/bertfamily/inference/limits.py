"""Token lengths for the pipelines' length-sorted batching (`bertfamily.train.data.sorted_batches`):
sequences of similar length share a batch, so little padding is computed; results go back to
the caller's order."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError


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


def input_limit(config, tokenizer=None, declared: int | None = None) -> int:
    """The longest input (in tokens, special tokens included) a pipeline feeds this model, as
    the reference libraries choose it.

    ``declared`` (a sentence-transformers directory's ``max_seq_length``) decides when given,
    as in sentence-transformers (the tokenizer's ``model_max_length`` does not cut it
    shorter); otherwise the tokenizer's ``model_max_length`` (transformers' pipelines). Either
    is capped by what the model itself takes, ``config.max_sequence_length`` (the position
    table less RoBERTa's padding offset; the encoder refuses longer inputs for every family,
    relative-only ones included), so no input ever fails for its length.

    Raises:
        ValueError: ``declared`` < 1.
    """
    model = config.max_sequence_length
    if declared is not None:
        if declared < 1:
            raise InputError(f"max_seq_length must be >= 1, got {declared}")
        return min(declared, model)
    own = getattr(tokenizer, "model_max_length", None)
    return min(own, model) if own else model


def checked_max_length(max_length: int | None, limit: int, what: str = "max_length") -> int:
    """``max_length`` when it fits the model's ``limit`` (`input_limit`), ``limit`` when None.

    Raises:
        ValueError: ``max_length`` < 1 or over ``limit`` (the message gives both).
    """
    if max_length is None:
        return limit
    if not 1 <= max_length <= limit:
        raise InputError(f"{what}={max_length} must lie in [1, {limit}], the model's input limit")
    return max_length
