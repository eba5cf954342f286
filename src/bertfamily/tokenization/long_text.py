"""Very long texts: before tokenizing, a text far longer than the token limit is cut by
characters (at a whitespace) to a prefix that still holds the first ``limit`` tokens, so a
50 MB line costs what its first tokens cost. `Tokenizer` uses these."""

from __future__ import annotations

# Truncating a long text: it is first cut by characters, so that time and memory per input
# are bounded by the length limit, not by the text (a 10 MB line would otherwise be tokenised
# whole, then truncated). The cut keeps ``limit * CHARS_PER_TOKEN`` characters, ending at a
# whitespace so no word is split; if that prefix has fewer than ``limit`` tokens (text with
# very long words or runs of whitespace), the cut grows x4, up to ``MAX_CHARS_PER_TOKEN``.
# Whenever the kept prefix has at least ``limit`` tokens, the result equals tokenising the
# whole text and truncating it.
CHARS_PER_TOKEN = 64
MAX_CHARS_PER_TOKEN = 1024
_BOUNDARY_SEARCH = 256  # characters searched back from the cut for a whitespace


def _tighten(prefix: str, offsets: list[tuple[int, int]], limit: int) -> str:
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


def _prefix_at_whitespace(text: str, length: int) -> str:
    """``text[:length]``, shortened to end just before a whitespace when there is one in the
    last ``_BOUNDARY_SEARCH`` characters, so the cut splits no word."""
    for i in range(length, max(length - _BOUNDARY_SEARCH, 0), -1):
        if text[i].isspace():
            return text[:i]
    return text[:length]
