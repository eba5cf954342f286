"""ERNIE 1.0 phrase-level masking: a chunker's phrases masked as units (Sun et al. 2019 §3.2.2).

ERNIE masks in three levels: basic (words), phrase ("a small group of words or characters
together acting as a conceptual unit", found with "lexical analysis and chunking tools", and
for Chinese with language-dependent segmentation) and entity. Entity-level masking is the
``"entity"`` strategy of `bertfamily.objectives.masking` over spans the corpus supplies; this
module finds the phrase spans, so the same strategy masks every phrase as one unit, never
partly (`masking.mask_tokens` keeps a unit whole or skips it).

Phrases are character spans (start, end), end exclusive, of two or more words:

- English (`english_phrases`): the chunks (NP, VP, PP, ADJP, ADVP, ...) of the rule-based
  shallow parser that TextBlob ships (the Brill tagger and chunker of CLiPS Pattern, lexicon
  included, no download); one-word chunks are ordinary words and are left out.
- Chinese (`chinese_phrases`): jieba words of two or more characters, or, with ``words``,
  a gold segmentation (e.g. the People's Daily corpus) instead of jieba's.

`annotate_phrases` turns a corpus's documents into `corpora.Sentence` lines that carry the
phrases (after the corpus's own entity spans, which win where they overlap), ready for
`objectives.pretraining.tokenize_documents` and the ``"entity"`` masking strategy.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..data.corpora import Sentence
from ..errors import InputError
from ..runtime import require

__all__ = [
    "PHRASE_LANGUAGES",
    "english_phrases",
    "chinese_phrases",
    "phrases",
    "annotate_phrases",
]

PHRASE_LANGUAGES = ("english", "chinese")


def _align(
    text: str, words: Sequence[str], pos: int = 0, *, contiguous: bool = False
) -> tuple[list[tuple[int, int] | None], int]:
    """Character span of each word, found in order in ``text`` from ``pos`` (None where the
    tokenizer changed the word, e.g. quotes, so it cannot be located; with ``contiguous``, also
    where anything but whitespace lies before it), and the position after the last word."""
    spans: list[tuple[int, int] | None] = []
    for w in words:
        i = text.find(w, pos) if w else -1
        if i < 0 or (contiguous and text[pos:i].strip()):
            spans.append(None)
            continue
        spans.append((i, i + len(w)))
        pos = i + len(w)
    return spans, pos


def english_phrases(text: str) -> list[tuple[int, int]]:
    """Multi-word chunks of ``text`` as character spans, from TextBlob's shallow parser
    (``textblob.en.parse(..., chunks=True)``: Penn tags, then B-/I- chunk tags).

    A chunk whose words cannot all be located in ``text`` is left out.

    Raises:
        MissingDependency: textblob is not installed.
    """
    parse = require("textblob.en", "phrases", "English phrase masking").parse
    tagged = parse(text, tokenize=True, tags=True, chunks=True, relations=False, lemmata=False)
    out: list[tuple[int, int]] = []
    pos = 0
    for sentence in tagged.split():
        where, pos = _align(text, [tok[0] for tok in sentence], pos)
        chunk: list[int] = []
        for i, tok in enumerate(sentence + [["", "", "O"]]):
            tag = tok[2]
            if chunk and not tag.startswith("I-"):
                spans = [where[j] for j in chunk]
                if len(chunk) >= 2 and all(s is not None for s in spans):
                    out.append((spans[0][0], spans[-1][1]))
                chunk = []
            if tag.startswith(("B-", "I-")):
                chunk.append(i)
    return out


def chinese_phrases(text: str, words: Sequence[str] | None = None) -> list[tuple[int, int]]:
    """Words of two or more characters as character spans: jieba's segmentation of ``text``,
    or the gold ``words`` (their concatenation must be ``text``, whitespace aside).

    Raises:
        ValueError: ``words`` that do not spell ``text``.
    """
    if words is None:
        from ..runtime import require

        words = require("jieba", "chinese", "Chinese phrase masking (jieba words)").lcut(text)
    where, end = _align(text, words, contiguous=True)
    if any(s is None for s in where) or text[end:].strip():
        raise InputError("the gold words do not spell the text, in order")
    return [(s, e) for s, e in where if e - s >= 2]  # type: ignore[misc]


def phrases(text: str, language: str) -> list[tuple[int, int]]:
    """`english_phrases` or `chinese_phrases` (jieba) by ``language`` (`PHRASE_LANGUAGES`).

    Raises:
        ValueError: an unknown language.
    """
    if language == "english":
        return english_phrases(text)
    if language == "chinese":
        return chinese_phrases(text)
    raise InputError(f"phrase language must be one of {PHRASE_LANGUAGES}, got {language!r}")


def annotate_phrases(docs: Sequence[Sequence[str]], language: str) -> list[list[Sentence]]:
    """Every line as a `Sentence` whose ``entities`` are its own entity spans (if any) followed
    by the phrases of ``language`` that overlap none of them.

    Raises:
        ValueError: an unknown language.
    """
    if language not in PHRASE_LANGUAGES:
        raise InputError(f"phrase language must be one of {PHRASE_LANGUAGES}, got {language!r}")
    out = []
    for doc in docs:
        lines = []
        for text in doc:
            own = list(getattr(text, "entities", ()))
            extra = [
                (s, e)
                for s, e in phrases(str(text), language)
                if all(e <= a or s >= b for a, b in own)
            ]
            lines.append(Sentence(str(text), own + extra))
        out.append(lines)
    return out
