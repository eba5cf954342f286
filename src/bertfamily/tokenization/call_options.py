"""The options of `tokenizer.Tokenizer.__call__` (checked, mapped to the backend's truncation
strategy) and the shaping of its output (overflowing windows, lists to arrays or tensors)."""

from __future__ import annotations

import logging
from typing import Any, Literal

import numpy as np
import tokenizers

from ..errors import InputError

logger = logging.getLogger("bertfamily.tokenization.tokenizer")

Padding = bool | Literal["longest", "max_length", "do_not_pad"]
Truncation = bool | Literal["longest_first", "only_first", "only_second", "do_not_truncate"]
_TRUNCATION_STRATEGIES: dict[bool | str, str | None] = {
    True: "longest_first",
    "longest_first": "longest_first",
    "only_first": "only_first",
    "only_second": "only_second",
    False: None,
    "do_not_truncate": None,
}
# transformers' __call__ arguments this tokenizer does not take (a TypeError names them).
_UNSUPPORTED_HF_ARGUMENTS = frozenset(
    {
        "is_split_into_words",
        "pad_to_multiple_of",
        "padding_side",
        "text_target",
        "text_pair_target",
        "return_attention_masks",
        "verbose",
        "split_special_tokens",
    }
)
ReturnTensors = Literal["pt", "np"] | None


def _call_strategy(
    padding: Padding,
    return_tensors: ReturnTensors,
    truncation: Truncation,
    truncation_side: str,
    stride: int,
) -> str | None:
    """`Tokenizer.__call__`'s options checked; the backend's truncation strategy (None: no cut).

    Raises:
        ValueError: an unknown ``padding``, ``return_tensors``, ``truncation`` or
            ``truncation_side``, or a ``stride`` that is not a non-negative integer.
    """
    if padding not in (True, False, "longest", "max_length", "do_not_pad"):
        raise InputError(f"unknown padding {padding!r}")
    if return_tensors not in ("pt", "np", None):
        raise InputError(f"unknown return_tensors {return_tensors!r}; use 'pt', 'np' or None")
    if truncation not in _TRUNCATION_STRATEGIES:
        raise InputError(
            f"unknown truncation {truncation!r}; use True, False, 'longest_first', "
            "'only_first', 'only_second' or 'do_not_truncate'"
        )
    strategy = _TRUNCATION_STRATEGIES[truncation]
    if truncation_side not in ("right", "left"):
        raise InputError(f"truncation_side must be 'right' or 'left', got {truncation_side!r}")
    if isinstance(stride, bool) or not isinstance(stride, int) or stride < 0:
        raise InputError(f"stride must be a non-negative integer, got {stride!r}")
    return strategy


def _windows(
    encodings: list[tokenizers.Encoding],
    cut: list[bool],
    overflowing_rows: bool,
    limit: int | None,
) -> tuple[list[tokenizers.Encoding], list[int], list[int]]:
    """The output rows of one batch: each input's encoding, followed by its overflowing
    windows when ``overflowing_rows``; per row, the input it comes from and whether that input
    was truncated (1) or not (0). ``cut``: per input, whether a character pre-cut dropped
    tokens."""
    rows: list[tokenizers.Encoding] = []
    sample: list[int] = []
    was_cut: list[int] = []  # per input
    for i, enc in enumerate(encodings):
        overflowing = enc.overflowing  # built anew on every access: read it once
        was_cut.append(int(cut[i] or bool(overflowing)))
        windows = [enc] + (overflowing if overflowing_rows else [])
        rows += windows
        sample += [i] * len(windows)
    if any(was_cut):
        logger.debug(
            "%d of %d inputs were longer than %s tokens and were truncated",
            sum(was_cut),
            len(encodings),
            limit,
        )
    return rows, sample, [was_cut[i] for i in sample]


def _int_list(ids: Any) -> list[int]:
    if hasattr(ids, "tolist"):  # numpy array or torch tensor
        ids = ids.tolist()
    return [int(i) for i in ids]


def _to_tensors(fields: dict[str, list[list[Any]]], return_tensors: ReturnTensors) -> dict:
    if return_tensors is None:
        return fields
    arrays = {key: np.asarray(rows, dtype=np.int64) for key, rows in fields.items()}
    if return_tensors == "np":
        return arrays
    import torch  # deferred: tokenisation alone does not need torch

    return {key: torch.from_numpy(a) for key, a in arrays.items()}
