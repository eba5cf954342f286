"""Cutting a long text before tokenising it (`Tokenizer._cut_long_inputs`): prefixes that end at
a whitespace (no word split), shortened to the tokens kept."""

from __future__ import annotations

from typing import Any

MAX_CHARS_PER_TOKEN = 1024
_BOUNDARY_SEARCH = 256  # characters searched back from the cut for a whitespace


def tighten(prefix: str, offsets: list[tuple[int, int]], limit: int) -> str:
    """Shorten a prefix that holds at least ``limit`` tokens (``offsets``, in characters) to
    the end of the word holding its token number ``limit + 1``: the first ``limit + 1``
    tokens are unchanged (no word is split) and little more is left to tokenise again (a pair
    of long segments would otherwise give overflowing windows by the thousand)."""
    if len(offsets) <= limit:
        return prefix
    end = offsets[limit][1]
    while end < len(prefix) and not prefix[end].isspace():
        end += 1
    return prefix[:end]


def prefix_at_whitespace(text: str, length: int) -> str:
    """``text[:length]``, shortened to end just before a whitespace when there is one in the
    last ``_BOUNDARY_SEARCH`` characters, so the cut splits no word."""
    for i in range(length, max(length - _BOUNDARY_SEARCH, 0), -1):
        if text[i].isspace():
            return text[:i]
    return text[:length]


def truncation_problem(
    backend, inputs: list[Any], limit: int, strategy: str, stride: int, special: int
) -> str:
    """Why the backend (with truncation off) refused a truncation, with the numbers of the
    first input at fault."""
    for i, item in enumerate(inputs):
        segments = (item,) if isinstance(item, str) else item
        counts = [len(backend.encode(t, add_special_tokens=False).ids) for t in segments]
        if strategy == "only_second" and len(counts) == 1:
            if counts[0] + special > limit:
                return f"input {i}: truncation='only_second' needs text pairs (text_pair)"
            continue
        if strategy == "longest_first" or len(counts) == 1:
            room = limit - special
            if sum(counts) > room and stride >= room:
                return f"input {i}: stride must be below the {room} tokens of a window"
            continue
        kept = counts[1] if strategy == "only_first" else counts[0]
        room = limit - special - kept
        if sum(counts) + special > limit and room <= 0:
            which = "second" if strategy == "only_first" else "first"
            return (
                f"input {i}: the {which} sequence alone has {kept} tokens, which with "
                f"{special} special tokens leaves no room in {limit}"
            )
        if sum(counts) + special > limit and stride >= room:
            return f"input {i}: stride must be below the {room} tokens left to cut"
    return "the backend refused it"
