"""Cutting a long text before tokenising it (`Tokenizer._cut_long_inputs`): prefixes that end at
a whitespace (no word split), shortened to the tokens kept; and, for a text whose first window
holds too few tokens (a long run of spaces, a hex blob, DNA), a scan window by window that keeps
the tokens the whole text would give (`scan_cut`), with the memory of a few windows."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import Any

MAX_CHARS_PER_TOKEN = 1024
_BOUNDARY_SEARCH = 256  # characters searched back from the cut for a whitespace
# where a cut may end: Python's whitespace but the separators U+001C..U+001F, which BERT's
# normaliser deletes as control characters (a cut there would split a word)
_CUT_SPACES = (
    " \t\n\x0b\x0c\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_SPACE = re.compile(f"[{re.escape(_CUT_SPACES)}]")
_NON_SPACE = re.compile(f"[^{re.escape(_CUT_SPACES)}]")
_WORD = re.compile(f"[^{re.escape(_CUT_SPACES)}]+")
# a word longer than a window is represented by its first characters when they give the same
# tokens (WordPiece makes any word over 100 characters one [UNK])
GIANT_WORD_CHARS = 1024


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


def _last_space(text: str, start: int, end: int) -> int:
    """The position of the last cut space in ``text[start + 1 : end]``, or -1."""
    return max(text.rfind(c, start + 1, end) for c in _CUT_SPACES)


def scan_cut(
    text: str,
    limit: int,
    window: int,
    encode: Callable[[str], Any],
    drops_whitespace: bool,
) -> tuple[str, list[tuple[int, int]], bool]:
    """A short text with the first ``limit + 1`` tokens of ``text``, for a text whose first
    ``window`` characters hold fewer than ``limit`` tokens.

    ``text`` is read window by window (``window`` characters, each ending before a space), and
    only what gives tokens is kept, so what is tokenised is bounded by the model's limit, not
    by the text. Where the tokenizer drops whitespace (``drops_whitespace``: BERT's), runs of
    it are only separators: the words are kept joined by one space. A word of more than
    `GIANT_WORD_CHARS` characters (a hex blob, DNA) is represented by its first ones when they
    give the same tokens (past a window, by its first window). The scan stops once the kept
    text holds ``limit + 1`` tokens (cut after the word of the last, `tighten`), or
    ``limit * MAX_CHARS_PER_TOKEN`` characters.

    Args:
        encode: tokenises a string without special tokens (an ``Encoding``: ids, offsets).

    Returns:
        ``(cut text, anchors, truncated)``: the anchors of the kept parts (`_joined`, read by
        `remap_offsets`); truncated: tokens were left out.
    """
    sep = " " if drops_whitespace else ""
    parts: list[tuple[int, str, int]] = []
    total = kept = pos = 0
    n = len(text)
    while pos < n:
        if drops_whitespace:
            found = _NON_SPACE.search(text, pos)
            if found is None:
                break
            pos = found.start()
        end = after = min(pos + window, n)
        if end < n:
            space = _last_space(text, pos, end)
            if space > pos:
                end = after = space
            else:  # one word longer than the window: its first window stands for it
                found = _SPACE.search(text, end)
                after = found.start() if found else n
        # (position in text, kept characters, their length in text: a whole giant word)
        if drops_whitespace:
            words = [
                (
                    m.start(),
                    _word(m.group(), encode),
                    (after if m.end() == end else m.end()) - m.start(),
                )
                for m in _WORD.finditer(text, pos, end)
            ]
        else:
            piece = text[pos:end]
            one = not _SPACE.search(piece)
            words = [(pos, _word(piece, encode) if one else piece, (after if one else end) - pos)]
        piece = sep.join(w for _, w, _ in words)
        enc = encode(piece)
        if enc.ids:
            if total + len(enc.ids) > limit:
                parts += _prefix_of(words, len(tighten(piece, enc.offsets, limit - total)), sep)
                return (*_joined(parts, sep), True)
            parts += words
            total, kept = total + len(enc.ids), kept + len(piece)
            if kept > limit * MAX_CHARS_PER_TOKEN:
                return (*_joined(parts, sep), True)
        pos = after
    return (*_joined(parts, sep), False)


def _word(word: str, encode: Callable[[str], Any]) -> str:
    """``word``, or its first `GIANT_WORD_CHARS` characters when they give the same tokens."""
    if len(word) <= GIANT_WORD_CHARS:
        return word
    short = word[:GIANT_WORD_CHARS]
    return short if encode(short).ids == encode(word).ids else word


def _prefix_of(
    words: list[tuple[int, str, int]], length: int, sep: str
) -> list[tuple[int, str, int]]:
    """The words (parts) covering the first ``length`` characters of their join."""
    out, at = [], 0
    for start, word, span in words:
        if at >= length:
            break
        kept = word[: length - at]
        out.append((start, kept, span if kept == word else len(kept)))
        at += len(word) + len(sep)
    return out


def _joined(
    parts: list[tuple[int, str, int]], sep: str
) -> tuple[str, list[tuple[int, int, int, int]]]:
    """The kept parts joined, and per part ``(start in the cut text, start in the text, kept
    length, length in the text)``."""
    anchors, at = [], 0
    for start, kept, span in parts:
        anchors.append((at, start, len(kept), span))
        at += len(kept) + len(sep)
    return sep.join(kept for _, kept, _ in parts), anchors


def remap_offsets(
    offsets: list[tuple[int, int]],
    sequence_ids: list[int | None],
    anchors: dict[int, list[tuple[int, int, int, int]]],
) -> list[list[int]]:
    """Character offsets in a `scan_cut` text turned back into offsets in the original text,
    per segment (``anchors``: segment id → that segment's anchors); a token ending where a
    shortened giant word ends ends where the whole word does. Special tokens and segments
    without anchors are kept."""
    out = []
    for (start, end), seq in zip(offsets, sequence_ids):
        marks = anchors.get(seq) if seq is not None else None
        if marks and end > start:
            k = bisect.bisect_right([m[0] for m in marks], start) - 1
            at, origin, kept, span = marks[k]
            stop = origin + span if end == at + kept else end - at + origin
            start, end = start - at + origin, stop
        out.append([start, end])
    return out


def unreadable_input(inputs: list[Any]) -> str | None:
    """Why the tokenizer cannot read one of ``inputs`` (texts or (text, text) pairs): the
    first that is not a string, or that holds a lone surrogate (Python's stand-in for bytes
    that are not UTF-8, e.g. in a command-line argument); None when every input is fine."""
    for n, item in enumerate(inputs):
        for text in item if isinstance(item, tuple) else (item,):
            if not isinstance(text, str):
                return f"input {n} is a {type(text).__name__}, not a str"
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                bad = text[e.start].encode("utf-8", "surrogateescape")
                return (
                    f"input {n} is not valid Unicode: {bad!r} at character {e.start} "
                    "(bytes that are not UTF-8, e.g. in a command-line argument)"
                )
    return None
