"""Cutting a long text before tokenising it (`Tokenizer._cut_long_inputs`): prefixes that end at
a whitespace (no word split), shortened to the tokens kept."""

from __future__ import annotations

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
