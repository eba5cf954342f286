"""Choosing the tokens a masked-LM predicts, and corrupting them.

One function, `mask_tokens`, covers the schemes of the family:

- ``"token"``: independent tokens (Devlin et al. 2019 §3.1);
- ``"whole_word"``: all pieces of a word together (BERT whole-word-masking release; for
  Chinese, words from a segmenter, Cui et al. 2021 §3.1);
- ``"ngram"``: spans of n complete words, p(n) ∝ 1/n for n ≤ ``max_ngram`` (Lan et al. 2020
  §4.1, ALBERT);
- ``"entity"``: phrase/entity spans supplied with the corpus are masked as units, other words
  as single units (Sun et al. 2019 §3.2, ERNIE knowledge masking);
- ``"span"``: SpanBERT (Joshi et al. 2020 §3.1): span length in words ~ Geometric(p=0.2)
  clipped at 10 (renormalised over 1..10, mean ≈ 3.8), a uniformly random start word, complete
  words, repeated until 15% of the tokens are chosen.

Every scheme but ``"token"`` masks whole words or none of them: a span or n-gram whose next
word would exceed the budget ends before that word (SpanBERT's code cuts the last span inside a
word; a partly masked word leaks its other pieces, so we keep words whole).

Budget: ``floor(n·p + u)`` tokens, u ~ U[0, 1) (unbiased rounding; n = maskable tokens), capped
at ``max_predictions``. Special tokens and padding are never chosen. Each chosen token becomes
``[MASK]`` with probability 0.8, a random non-special token with 0.1, or stays unchanged; for
``"span"`` the choice is made once per span (SpanBERT §3.1), otherwise per token.

Word boundaries come from ``word_ids`` ((T,) int, the same id for the pieces of one word, -1
for special tokens); `word_starts` derives them from WordPiece ``##`` continuations, byte-level
BPE ``Ġ`` word starts or SentencePiece ``▁``, and `chinese_word_ids` from gold word spans
(a segmented corpus) or jieba.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..data.batching import IGNORE_INDEX
from ..errors import InputError

__all__ = [
    "MASKING_STRATEGIES",
    "MaskingConfig",
    "MaskResult",
    "mask_tokens",
    "word_starts",
    "word_ids_from_starts",
    "chinese_word_ids",
    "span_length_distribution",
]

MASKING_STRATEGIES = ("token", "whole_word", "ngram", "entity", "span")


@dataclass(frozen=True)
class MaskingConfig:
    """Masking choices (defaults: BERT).

    Attributes:
        strategy: one of ``MASKING_STRATEGIES``.
        mlm_probability: fraction of maskable tokens to predict.
        mask_prob / random_prob: of the chosen tokens, the fraction replaced by [MASK] / by a
            random token (the rest stay unchanged).
        max_predictions: cap on chosen tokens per sequence (None: no cap).
        max_ngram: longest n-gram for "ngram".
        span_p / max_span: geometric parameter and clip for "span" (in words).
        replace_per_span: draw the 80/10/10 choice once per unit (None: only for "span").
    """

    strategy: str = "token"
    mlm_probability: float = 0.15
    mask_prob: float = 0.8
    random_prob: float = 0.1
    max_predictions: int | None = None
    max_ngram: int = 3
    span_p: float = 0.2
    max_span: int = 10
    replace_per_span: bool | None = None

    def __post_init__(self) -> None:
        if self.strategy not in MASKING_STRATEGIES:
            raise InputError(f"strategy must be one of {MASKING_STRATEGIES}, got {self.strategy!r}")
        if not 0.0 < self.mlm_probability < 1.0:
            raise InputError(f"mlm_probability must lie in (0, 1), got {self.mlm_probability}")
        if self.mask_prob < 0 or self.random_prob < 0 or self.mask_prob + self.random_prob > 1:
            raise InputError(
                f"mask_prob ({self.mask_prob}) + random_prob ({self.random_prob}) "
                f"must lie in [0, 1]"
            )
        if self.max_predictions is not None and self.max_predictions < 1:
            raise InputError(f"max_predictions must be >= 1, got {self.max_predictions}")
        if self.max_ngram < 1 or self.max_span < 1 or not 0 < self.span_p <= 1:
            raise InputError("max_ngram and max_span must be >= 1 and span_p in (0, 1]")


@dataclass
class MaskResult:
    """input_ids (T,) int64 corrupted; labels (T,) int64, the original id where chosen else
    -100; spans: the (start, end) token ranges chosen as units, end exclusive; unit_lengths:
    the sampled lengths in words (n-gram / span) for statistics."""

    input_ids: np.ndarray
    labels: np.ndarray
    spans: list[tuple[int, int]]
    unit_lengths: list[int]


def span_length_distribution(p: float = 0.2, max_span: int = 10) -> np.ndarray:
    """P(length = l) for l = 1..max_span: Geometric(p) renormalised over 1..max_span."""
    lengths = np.arange(1, max_span + 1)
    probs = p * (1 - p) ** (lengths - 1)
    return probs / probs.sum()


def word_starts(tokens: Sequence[str], scheme: str) -> np.ndarray:
    """(T,) bool: whether each token begins a word.

    wordpiece: not starting with ``##``; bpe: starting with ``Ġ`` (or the first token);
    unigram: starting with ``▁``; anything else: every token."""
    if scheme == "wordpiece":
        flags = [not t.startswith("##") for t in tokens]
    elif scheme == "bpe":
        flags = [t.startswith("Ġ") for t in tokens]
    elif scheme == "unigram":
        flags = [t.startswith("▁") for t in tokens]
    else:
        flags = [True] * len(tokens)
    if flags:
        flags[0] = True
    return np.asarray(flags, dtype=bool)


def word_ids_from_starts(starts: np.ndarray, special: np.ndarray) -> np.ndarray:
    """(T,) int64 word index from word-start flags; special tokens get -1 and always end a
    word."""
    starts = starts.copy()
    starts[1:] |= special[:-1]
    ids = np.cumsum(starts) - 1
    return np.where(special, -1, ids).astype(np.int64)


def chinese_word_ids(
    text: str,
    offsets: Sequence[tuple[int, int]],
    special: np.ndarray,
    words: Sequence[tuple[int, int]] | None = None,
) -> np.ndarray:
    """Word ids for Chinese whole-word masking (Cui et al. 2021 §3.1): tokens whose first
    character falls in the same word share an id (WordPiece splits CJK text one character per
    token, so a word of n characters is n tokens masked together).

    Args:
        text: the original text.
        offsets: (start, end) character span of each token (T of them).
        special: (T,) bool, True for special tokens (id -1).
        words: gold word spans, (start, end) character offsets into ``text`` (a segmented
            corpus); None: words from jieba's default segmentation of ``text``. A token
            outside every word is a word by itself.

    Returns:
        (T,) int64 word index per token, counting from 0, -1 for special tokens.
    """
    owner = np.full(len(text) + 1, -1, dtype=np.int64)
    if words is None:
        from ..runtime import require

        jieba = require("jieba", "chinese", "Chinese whole-word masking (jieba words)")
        pos = 0
        words = []
        for piece in jieba.lcut(text):
            words.append((pos, pos + len(piece)))
            pos += len(piece)
    for w, (s, e) in enumerate(words):
        owner[s:e] = w
    ids, last, next_id = [], None, -1
    for (s, _e), sp in zip(offsets, special):
        if sp:
            ids.append(-1)
            last = None
            continue
        key = int(owner[s]) if 0 <= s < len(text) and owner[s] >= 0 else None
        if key is None or key != last:
            next_id += 1
        ids.append(next_id)
        last = key
    return np.asarray(ids, dtype=np.int64)


def _units(
    word_ids: np.ndarray, strategy: str, entities: Sequence[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Token ranges of maskable units in order: words (or single tokens), with supplied
    entity spans merged into one unit each."""
    maskable = word_ids >= 0
    if strategy == "token":
        return [(i, i + 1) for i in np.flatnonzero(maskable)]
    units, i, T = [], 0, len(word_ids)
    while i < T:
        if word_ids[i] < 0:
            i += 1
            continue
        j = i + 1
        while j < T and word_ids[j] == word_ids[i]:
            j += 1
        units.append((i, j))
        i = j
    if strategy == "entity" and entities:
        merged, taken = [], np.zeros(T, dtype=bool)
        start_of = {w: s for s, e in units for w in [word_ids[s]]}
        end_of = {w: e for s, e in units for w in [word_ids[s]]}
        for s, e in sorted(entities):
            if not (0 <= s < e <= T and maskable[s:e].all()):
                continue
            s, e = start_of[word_ids[s]], end_of[word_ids[e - 1]]  # widen to whole words
            if not taken[s:e].any():
                taken[s:e] = True
                merged.append((s, e))
        units = sorted(merged + [u for u in units if not taken[u[0] : u[1]].any()])
    return units


def mask_tokens(
    input_ids: np.ndarray,
    special: np.ndarray,
    config: MaskingConfig,
    rng: np.random.Generator,
    *,
    vocab_size: int,
    mask_token_id: int,
    word_ids: np.ndarray | None = None,
    entities: Sequence[tuple[int, int]] = (),
    special_ids: Sequence[int] = (),
) -> MaskResult:
    """Choose and corrupt the prediction targets of one sequence.

    Args:
        input_ids: (T,) int token ids.
        special: (T,) bool, True for special tokens and padding (never chosen).
        config: `MaskingConfig`.
        rng: numpy Generator (all randomness comes from it).
        vocab_size: V, for random replacements; mask_token_id: the [MASK] id.
        word_ids: (T,) word index per token, -1 for specials (needed for every strategy but
            "token"; None = each token its own word).
        entities: (start, end) token spans masked as units by "entity".
        special_ids: ids never used as random replacements.

    Returns:
        `MaskResult`.

    Raises:
        ValueError: mismatched lengths.
    """
    input_ids = np.asarray(input_ids, dtype=np.int64)
    special = np.asarray(special, dtype=bool)
    T = len(input_ids)
    if len(special) != T or (word_ids is not None and len(word_ids) != T):
        raise InputError(
            f"input_ids ({T}), special ({len(special)}) and word_ids must have the same length"
        )
    if word_ids is None:
        word_ids = np.where(special, -1, np.arange(T))
    word_ids = np.where(special, -1, np.asarray(word_ids, dtype=np.int64))
    n = int((word_ids >= 0).sum())
    budget = int(np.floor(n * config.mlm_probability + rng.random()))
    if config.max_predictions is not None:
        budget = min(budget, config.max_predictions)
    chosen = np.zeros(T, dtype=bool)
    spans: list[tuple[int, int]] = []
    lengths: list[int] = []
    units = _units(word_ids, config.strategy, entities)
    if budget > 0 and units:
        if config.strategy in ("token", "whole_word", "entity"):
            count = 0
            for k in rng.permutation(len(units)):
                s, e = units[k]
                if count + (e - s) > budget:
                    continue
                chosen[s:e] = True
                spans.append((s, e))
                count += e - s
                if count == budget:
                    break
        else:
            spans, lengths = _grow_spans(units, budget, config, rng, chosen)
    labels = np.where(chosen, input_ids, IGNORE_INDEX)
    out = input_ids.copy()
    per_span = (
        config.replace_per_span
        if config.replace_per_span is not None
        else (config.strategy == "span")
    )
    groups = spans if per_span else [(i, i + 1) for i in np.flatnonzero(chosen)]
    allowed = _replacement_ids(vocab_size, tuple(special_ids))
    for s, e in groups:
        u = rng.random()
        if u < config.mask_prob:
            out[s:e] = mask_token_id
        elif u < config.mask_prob + config.random_prob:
            out[s:e] = rng.choice(allowed, size=e - s)
    return MaskResult(out, labels, sorted(spans), lengths)


@lru_cache(maxsize=8)
def _replacement_ids(vocab_size: int, special_ids: tuple[int, ...]) -> np.ndarray:
    """Ids a random replacement may take: every id but the special ones."""
    return np.setdiff1d(np.arange(vocab_size), np.asarray(special_ids, dtype=np.int64))


def _grow_spans(units, budget, config, rng, chosen):
    """n-gram / SpanBERT selection: sample a length in words and a random start word, mask
    those words; skip starts already chosen or whose first word exceeds the remaining budget;
    stop after 50 misses in a row. Words are kept whole: a span ends before a word that would
    exceed the budget. Returns (spans, sampled lengths in words)."""
    if config.strategy == "span":
        dist = span_length_distribution(config.span_p, config.max_span)
    else:
        inv = 1.0 / np.arange(1, config.max_ngram + 1)
        dist = inv / inv.sum()
    spans, lengths, count, misses = [], [], 0, 0
    while count < budget and misses < 50:
        length = int(rng.choice(len(dist), p=dist)) + 1
        start = int(rng.integers(len(units)))
        if chosen[units[start][0]] or units[start][1] - units[start][0] > budget - count:
            misses += 1
            continue
        lengths.append(length)
        s = e = units[start][0]
        for w in range(start, min(start + length, len(units))):
            ws, we = units[w]
            if chosen[ws] or (ws != e and w != start):
                break  # stop at an already chosen word or a gap (a special token)
            if we - ws > budget - count:
                break  # words stay whole
            chosen[ws:we] = True
            count += we - ws
            e = we
            if count >= budget:
                break
        spans.append((s, e))
    return spans, lengths
