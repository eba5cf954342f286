"""The engine's batching: texts tokenized once (`tokenize_rows` → `TokenRows`) and the one
batch loop (`run_batches`: length-sorted, per-batch padded batches, results handed back with
the rows' positions so the caller puts them in input order). The loop itself lives in
`data.batching` (floor 0), so the training evaluation (`data.task_data.forward_rows`) runs on
it too; it is re-exported here.

Every pipeline (embedding, sparse, reranking, classification, NER, QA, fill-mask, early
exit) and the server's dynamic batcher run their batches through `run_batches`; none keeps a
loop of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ..data.batching import TokenRows, run_batches
from ..errors import InputError

__all__ = [
    "FEATURE_KEYS",
    "TokenRows",
    "eval_mode",
    "run_batches",
    "text_list",
    "tokenize_rows",
]  # the loop: data.batching


@contextlib.contextmanager
def eval_mode(module: Any) -> Iterator[None]:
    """``module`` (a torch ``nn.Module``) in eval mode for the block, its training mode given
    back after; a module already in eval mode throughout is not walked (each ``train()`` sets
    the flag on every submodule: 0.6 ms a call for MiniLM, paid by every encode call)."""
    was_training = module.training
    switch = was_training or any(m.training for m in module.modules())
    if switch:
        module.eval()
    try:
        yield
    finally:
        if switch:
            module.train(was_training)


#: The tokenizer outputs an encoder reads.
FEATURE_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def tokenize_rows(
    tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    *,
    max_length: int,
    truncation_side: str = "right",
    keys: Sequence[str] = FEATURE_KEYS,
    **options: Any,
) -> TokenRows:
    """The one tokenization of an inference call: ``texts`` (with ``pairs``, as pairs) cut to
    ``max_length`` tokens, unpadded (the tokenizer cuts a huge text by characters first, so
    its cost is bounded by ``max_length``).

    Args:
        tokenizer: a `tokenization.Tokenizer`.
        texts: N strings; ``pairs``: N second segments, or None.
        max_length: tokens per row, special tokens included.
        truncation_side: "right" or "left".
        keys: the tokenizer outputs kept in ``rows`` (those it gives).
        options: further tokenizer keywords (``return_offsets_mapping``, ...).

    Returns:
        `TokenRows` of N rows (none for N = 0: the tokenizer is not called).
    """
    if not len(texts):
        return TokenRows({k: [] for k in ("input_ids", "attention_mask")}, [])
    enc = tokenizer(
        list(texts),
        list(pairs) if pairs is not None else None,
        max_length=max_length,
        padding=False,
        return_tensors=None,
        return_truncated=True,
        truncation_side=truncation_side,
        **options,
    )
    rows = {k: [list(r) for r in enc[k]] for k in keys if k in enc}
    return TokenRows(rows, [bool(x) for x in enc["truncated"]])


def text_list(texts: Any, what: str = "texts") -> list[str]:
    """The texts of an inference call as a list, checked once for every pipeline: a bare
    string is one text (never N one-character texts); every item must be a ``str``.

    Raises:
        InputError: ``texts`` is None or not a sequence of strings (names the first bad item
            and its position, counting from 0).
    """
    if isinstance(texts, str):
        return [texts]
    if texts is None or isinstance(texts, bytes | bytearray) or not hasattr(texts, "__iter__"):
        raise InputError(
            f"{what} must be a string or a list of strings, got {type(texts).__name__}"
        )
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InputError(
                f"{what}[{i}] is {type(t).__name__} ({str(t)[:40]!r}), not a string; give "
                "every text as a str"
            )
    return out
