"""Pretraining corpora: readers, sentence splitting, and unpacking of the real corpora that
`bertfamily fetch` downloads (../shared/DATA.md).

Corpus formats accepted by `read_documents`:

- plain text (``.txt``): one sentence (or paragraph) per line, a blank line between documents;
- JSONL (``.jsonl``): one document per line, text in a field (default ``"text"``), optionally
  ``"entities"``: [[start, end], ...] character spans of phrases/entities (ERNIE-style masking)
  and ``"words"``: [[start, end], ...] gold word spans (whole-word masking units, e.g. the
  segmented People's Daily corpus);
- a directory written by ``datasets.Dataset.save_to_disk`` (needs the ``datasets`` package).

Sentence splitting uses pysbd (rule-based, pure Python, no data download).
"""

from __future__ import annotations

import bz2
import contextlib
import json
import logging
import re
import struct
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

from ..errors import DataError, InputError
from ..files import write_text_atomic
from .tables import read_utf8, text_lines
from .text_input import is_stdin, read_input_text

__all__ = [
    "Sentence",
    "read_documents",
    "split_sentences",
    "write_documents",
    "parse_rdata_strings",
    "austen_from_rdb",
    "wiki_xml_to_documents",
    "read_peoples_daily",
    "tagged_sentences",
    "word_spans",
    "entity_spans",
    "bert_units",
    "char_bio",
    "write_peoples_daily",
    "write_review_split",
]

logger = logging.getLogger(__name__)

Document = list[str]  # sentences (or lines) of one document

_DROP_LINK_NAMESPACES = {"file", "image", "category"}
_DROP_TAGS = {"ref", "gallery", "math", "timeline", "score", "imagemap", "syntaxhighlight"}


class Sentence(str):
    """A line of text with spans supplied by the corpus, as (start, end) character offsets into
    the string (end exclusive): ``entities``, phrases/entities masked as units by the "entity"
    masking strategy (ERNIE, Sun et al. 2019 §3.2); ``words``, gold word boundaries (a
    segmented corpus such as People's Daily), the units of whole-word masking when given."""

    entities: tuple[tuple[int, int], ...] = ()
    words: tuple[tuple[int, int], ...] = ()

    def __new__(cls, text: str, entities=(), words=()):
        """A `Sentence` of ``text`` with ``entities`` and ``words`` as (start, end) int pairs."""
        obj = super().__new__(cls, text)
        obj.entities = tuple((int(s), int(e)) for s, e in entities)
        obj.words = tuple((int(s), int(e)) for s, e in words)
        return obj


def _annotated_pieces(text: str, pieces: list[str], entities, words=()) -> list[str]:
    """Locate each piece in ``text`` (in order) and give it the entities and words inside it."""
    out, cursor = [], 0
    for piece in pieces:
        start = text.find(piece, cursor)
        if start < 0:
            out.append(piece)
            continue
        end = start + len(piece)
        cursor = end

        def inside(spans):
            return [(s - start, e - start) for s, e in spans if start <= s and e <= end]

        out.append(Sentence(piece, inside(entities), inside(words)))
    return out


@lru_cache(maxsize=4)
def _segmenter(language: str):
    from ..runtime import require

    pysbd = require("pysbd", "corpora", "sentence splitting (pysbd)")
    return pysbd.Segmenter(language=language, clean=False)


def split_sentences(text: str, language: str = "en") -> list[str]:
    """Sentences of ``text`` (pysbd; stripped, empty ones dropped)."""
    return [s.strip() for s in _segmenter(language).segment(text) if s.strip()]


def read_documents(
    path: str | Path, *, text_field: str = "text", split: bool = False, language: str = "en"
) -> list[Document]:
    """Read a corpus into documents, each a list of sentences/lines.

    Args:
        path: a ``.txt`` file, a ``.jsonl`` file, or a ``datasets`` save_to_disk directory.
        text_field: the JSONL / dataset field holding the text.
        split: split each line (txt) or text (jsonl/dataset) into sentences with pysbd; JSONL
            and dataset texts are always split into lines first.

    Raises:
        ValueError: unreadable file, unknown format, a JSONL line without ``text_field``, or no
            text at all.
    """
    path = Path(path)
    if path.is_dir() and not is_stdin(path):
        docs = _read_dataset(path, text_field)
    elif path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(text_lines(read_input_text(path, what="corpus")), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as e:  # bad JSON, too-long ints, too deep
                raise DataError(f"{path}:{n}: not JSON ({e})") from None
            if not isinstance(record, dict) or text_field not in record:
                raise InputError(f"{path}:{n} has no field {text_field!r}")
            text = str(record[text_field])
            pieces = [x.strip() for x in text.splitlines() if x.strip()]
            if split:
                pieces = [p for line in pieces for p in split_sentences(line, language)]
            if record.get("entities") or record.get("words"):
                pieces = _annotated_pieces(
                    text, pieces, record.get("entities") or (), record.get("words") or ()
                )
            docs.append(pieces)
    else:  # plain text (or standard input, -): the one reader's checks and messages
        docs, current = [], []
        for line in text_lines(read_input_text(path, what="corpus")):
            if line.strip():
                current.append(line.strip())
            elif current:
                docs.append(current)
                current = []
        if current:
            docs.append(current)
    if split and path.suffix != ".jsonl":
        docs = [[s for line in doc for s in split_sentences(line, language)] for doc in docs]
    docs = [d for d in docs if d]
    if not docs:
        raise InputError(f"corpus {path} holds no text")
    return docs


def _read_dataset(path: Path, text_field: str) -> list[Document]:
    try:
        import datasets
    except ImportError as e:
        raise InputError(
            f"{path} is a directory; reading a saved dataset needs the 'datasets' package"
        ) from e
    ds = datasets.load_from_disk(str(path))
    if text_field not in ds.column_names:
        raise InputError(f"dataset {path} has no column {text_field!r} ({ds.column_names})")
    return [[x.strip() for x in str(t).splitlines() if x.strip()] for t in ds[text_field]]


def write_documents(docs: Iterable[Document], path: Path) -> None:
    """Write documents as plain text: one line per sentence, a blank line between documents."""
    body = "\n\n".join("\n".join(d) for d in docs if d) + "\n"
    path.write_text(body, encoding="utf-8")


# --------------------------------------------------------------------------- Jane Austen (R data)


def parse_rdata_strings(record: bytes) -> list[str | None]:
    """Decode one R XDR serialisation of a character vector (STRSXP).

    Layout (R Internals §1.8): ``X\\n``; format version, R version, minimal R version (three
    big-endian int32); for version 3 an int32-length-prefixed native encoding name; then the
    STRSXP header (flags int32 with low byte 0x10, length int32) and per element a CHARSXP
    (flags int32, byte length int32, -1 for NA, then the bytes).

    Raises:
        ValueError: not an XDR serialisation of a character vector.
    """
    if record[:2] != b"X\n":
        raise InputError("not an R XDR serialisation (no 'X\\n' header)")
    pos = 2
    version = struct.unpack_from(">i", record, pos)[0]
    pos += 12
    if version == 3:
        n = struct.unpack_from(">i", record, pos)[0]
        pos += 4 + n
    flags, count = struct.unpack_from(">ii", record, pos)
    pos += 8
    if flags & 0xFF != 0x10:
        raise InputError(f"R object type {flags & 0xFF:#x} is not a character vector (0x10)")
    out: list[str | None] = []
    for _ in range(count):
        _flags, length = struct.unpack_from(">ii", record, pos)
        pos += 8
        if length == -1:
            out.append(None)
            continue
        out.append(record[pos : pos + length].decode("utf-8", errors="replace"))
        pos += length
    return out


def austen_from_rdb(rdb: Path) -> list[tuple[str, list[str]]]:
    """The novels in janeaustenr's ``Rdata.rdb``: [(title, lines)], one record per novel,
    each a 4-byte big-endian length then a zlib stream (the length is the unpacked size)."""
    data, pos, novels = rdb.read_bytes(), 0, []
    while pos + 4 <= len(data):
        inflater = zlib.decompressobj()
        record = inflater.decompress(data[pos + 4 :])
        pos = len(data) - len(inflater.unused_data)
        lines = [x if x is not None else "" for x in parse_rdata_strings(record)]
        title = next((x.strip() for x in lines if x.strip()), f"novel {len(novels) + 1}")
        novels.append((title, lines))
    return novels


def austen_documents(lines: list[str]) -> list[Document]:
    """A novel's lines → documents (one per chapter), each a list of sentences (pysbd).

    Lines are hard-wrapped prose; paragraphs are separated by empty lines and chapters start
    with a line like "CHAPTER 1" / "Chapter 1". Front matter before the first chapter (title,
    author, "VOLUME I") is dropped."""
    chapter = re.compile(r"^\s*(chapter|CHAPTER)\s+[\dIVXLC]+", re.IGNORECASE)
    docs, paragraphs, para = [], [], []
    seen_chapter = False

    def flush_para():
        if para:
            paragraphs.append(" ".join(para))
            para.clear()

    for line in lines:
        if chapter.match(line):
            flush_para()
            if paragraphs and seen_chapter:  # text before the first chapter: front matter
                docs.append(paragraphs[:])
            paragraphs.clear()
            seen_chapter = True
        elif not line.strip():
            flush_para()
        else:
            para.append(line.strip())
    flush_para()
    if paragraphs:
        docs.append(paragraphs)
    return [[s for p in d for s in split_sentences(p)] for d in docs]


# --------------------------------------------------------------------------- Wikipedia XML


def wiki_xml_to_documents(path: Path) -> Iterator[tuple[str, Document]]:
    """(title, sentences) for each article of a MediaWiki XML dump (``.xml`` or ``.bz2``).

    Markup is stripped with mwparserfromhell: ``<ref>``, ``<gallery>``, ``<math>`` and similar
    tags are removed with their content, then ``strip_code`` drops templates, tables and file
    links and keeps link text; redirects and non-article namespaces are skipped."""
    import xml.etree.ElementTree as ET

    from ..runtime import require

    mwparserfromhell = require("mwparserfromhell", "corpora", "reading Wikipedia XML dumps")

    opener = bz2.open if path.suffix == ".bz2" else open
    with opener(path, "rb") as f:
        title, ns, text = None, None, None
        for _event, elem in ET.iterparse(f, events=("end",)):
            tag = elem.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = elem.text
            elif tag == "ns":
                ns = elem.text
            elif tag == "text":
                text = elem.text or ""
            elif tag == "page":
                if ns == "0" and text and not text.lstrip().lower().startswith("#redirect"):
                    code = mwparserfromhell.parse(text)
                    for tag in code.filter_tags(
                        matches=lambda n: str(n.tag).strip().lower() in _DROP_TAGS
                    ):
                        with contextlib.suppress(ValueError):  # already gone with a parent
                            code.remove(tag)
                    for link in code.filter_wikilinks(
                        matches=lambda n: (
                            str(n.title).split(":")[0].strip().lower() in _DROP_LINK_NAMESPACES
                        )
                    ):
                        with contextlib.suppress(ValueError):
                            code.remove(link)
                    plain = code.strip_code(normalize=True, collapse=True)
                    sentences = []
                    for para in plain.split("\n"):
                        para = re.sub(r"\s+", " ", para).strip()
                        if len(para) > 40:  # headings, list stubs and leftovers are dropped
                            sentences.extend(split_sentences(para))
                    if sentences:
                        yield title or "", sentences
                elem.clear()
                title, ns, text = None, None, None


# --------------------------------------------------------------------------- People's Daily 1998

Word = tuple[str, str]  # (word, part-of-speech tag) of the PKU tag set
# Entity types of the character-level NER derived from the part-of-speech tags.
PEOPLES_DAILY_ENTITIES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
PEOPLES_DAILY_HELDOUT_EVERY = 10  # article i is held out when i % 10 == 9
_SENTENCE_END = frozenset("。！？")
_CLOSING = frozenset("”’」』）》")
_CONTINUING = frozenset("：:，,；;、")


def parse_tagged_line(line: str, where: str = "") -> list[Word]:
    """One line of the PKU-tagged corpus, ``word/tag`` items separated by spaces.

    Raises:
        ValueError: an item without ``/tag`` (``where`` names the file and line).
    """
    words = []
    for item in line.split():
        word, sep, tag = item.rpartition("/")
        if not sep or not word or not tag.isalpha():
            raise InputError(f"{where}: {item!r} is not a word/tag item")
        words.append((word, tag))
    return words


def _is_body(paragraph: list[Word]) -> bool:
    """A paragraph that cannot be a headline: it has sentence-final punctuation, ends in a
    colon or comma (a salutation, 同胞们、朋友们：), or is all in brackets (a photo credit,
    （新华社记者樊如钧摄）)."""
    bracketed = paragraph[0][0] == "（" and paragraph[-1][0] == "）"
    return (
        bracketed
        or paragraph[-1][0][-1:] in _CONTINUING
        or any(w[-1:] in _SENTENCE_END for w, _ in paragraph)
    )


def read_peoples_daily(path: str | Path) -> list[list[list[Word]]]:
    """The People's Daily corpus (``199801.txt``) as articles → paragraphs → (word, tag).

    The file has one paragraph per line and no article ids, so article boundaries are
    recovered from the layout: an article starts at a headline, a line without sentence-final
    punctuation (。！？) and not ending in a colon or comma, that follows a line of running
    text (its subtitles and date lines stay with it). An approximation: a headline-like line
    inside an article (a bare list of names) starts a new one (3,252 articles are found).

    Raises:
        ValueError: a malformed item (file and line named); the file holds no text.
    """
    articles: list[list[list[Word]]] = []
    previous_body = True
    for n, line in enumerate(text_lines(read_utf8(path)), 1):
        paragraph = parse_tagged_line(line, f"{path}:{n}")
        if not paragraph:
            continue
        body = _is_body(paragraph)
        if not articles or (not body and previous_body):
            articles.append([])
        articles[-1].append(paragraph)
        previous_body = body
    if not articles:
        raise InputError(f"{path} holds no text")
    return articles


def tagged_sentences(paragraph: list[Word]) -> list[list[Word]]:
    """A paragraph split after each sentence-final word (。！？, with closing quotes and
    brackets that follow it); words never straddle two sentences."""
    sentences, current = [], []
    for i, (word, tag) in enumerate(paragraph):
        current.append((word, tag))
        nxt = paragraph[i + 1][0] if i + 1 < len(paragraph) else ""
        ends = word[-1:] in _SENTENCE_END or (
            word in _CLOSING and current[-2:-1] and current[-2][0][-1:] in _SENTENCE_END
        )
        if ends and nxt not in _CLOSING:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


def word_spans(words: list[Word]) -> list[tuple[int, int]]:
    """(start, end) character offsets of each word in ``"".join(word for word, _ in words)``."""
    spans, pos = [], 0
    for word, _ in words:
        spans.append((pos, pos + len(word)))
        pos += len(word)
    return spans


def entity_spans(words: list[Word]) -> list[tuple[str, int, int]]:
    """Named entities of a tagged sentence as (type, start, end) character offsets (end
    exclusive): ``nt`` → ORG, ``ns`` → LOC, ``nr`` → PER.

    The corpus tags a Chinese surname and given name as two ``nr`` words (江/nr 泽民/nr), and
    lists of names run together (江/nr 泽民/nr 李/nr 鹏/nr), so a run of ``nr`` words is read
    as persons of two words each: a word of at most 2 characters (a surname, 欧阳 included)
    joins the next ``nr`` word when that one has at most 2 characters (a given name); any
    other ``nr`` word (a foreign name, a name of 3+ characters) is a person by itself.
    """
    spans = word_spans(words)
    out, i = [], 0
    while i < len(words):
        word, tag = words[i]
        kind = PEOPLES_DAILY_ENTITIES.get(tag)
        if kind is None:
            i += 1
            continue
        end = i + 1
        if (
            tag == "nr"
            and len(word) <= 2
            and end < len(words)
            and words[end][1] == "nr"
            and len(words[end][0]) <= 2
        ):
            end += 1
        out.append((kind, spans[i][0], spans[end - 1][1]))
        i = end
    return out


def _is_cjk(ch: str) -> bool:
    """BERT's CJK ranges (google-research/bert tokenization.py ``_is_chinese_char``)."""
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _is_punct(ch: str) -> bool:
    """BERT's punctuation: ASCII non-alphanumeric symbols, and Unicode category P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def bert_units(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the words BERT's basic tokenizer makes of ``text``
    (whitespace dropped; each CJK character and each punctuation character alone; other runs
    kept together), so a character-level CoNLL word is what `EntityTagger` sees as a word."""
    units, start = [], None
    for i, ch in enumerate(text):
        alone = _is_cjk(ch) or _is_punct(ch)
        if ch.isspace() or alone:
            if start is not None:
                units.append((start, i))
                start = None
            if alone:
                units.append((i, i + 1))
        elif start is None:
            start = i
    if start is not None:
        units.append((start, len(text)))
    return units


def char_bio(words: list[Word]) -> tuple[list[str], list[str]]:
    """Character-level BIO tagging of a tagged sentence: its BERT words (`bert_units`, found
    inside each corpus word, so a unit never straddles two) and their tags from
    `entity_spans` (B- on an entity's first unit, I- on the rest, O elsewhere)."""
    text = "".join(w for w, _ in words)
    tag_at = ["O"] * len(text)
    for kind, s, e in entity_spans(words):
        tag_at[s] = f"B-{kind}"
        for k in range(s + 1, e):
            tag_at[k] = f"I-{kind}"
    units, tags = [], []
    for ws, we in word_spans(words):
        for us, ue in bert_units(text[ws:we]):
            units.append(text[ws + us : ws + ue])
            tags.append(tag_at[ws + us])
    return units, tags


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    write_text_atomic(path, "".join(line + "\n" for line in lines))


def write_peoples_daily(
    source: str | Path, dest: str | Path, heldout_every: int = PEOPLES_DAILY_HELDOUT_EVERY
) -> dict[str, int]:
    """Derive the corpus files of ``199801.txt`` into ``dest``, split by article (article i,
    counted from 0, is held out when ``i % heldout_every == heldout_every - 1``):

    - ``pretrain.jsonl`` / ``heldout.jsonl``: one article per line, ``text`` = its sentences
      joined by newlines, ``words`` = the corpus's word spans [[start, end], ...] in ``text``
      (read by `read_documents` as `Sentence.words`, the gold whole-word masking units);
    - ``pretrain.txt`` / ``heldout.txt``: the same sentences as plain text (`write_documents`);
    - ``ner_train.conll`` / ``ner_test.conll``: one BERT word per line with its BIO tag
      (`char_bio`), a blank line after each sentence.

    Returns:
        counts: articles, sentences and entities per split.
    """
    dest = Path(dest)
    articles = read_peoples_daily(source)
    counts: dict[str, int] = {}
    outputs: dict[str, dict[str, list[str]]] = {
        split: {"jsonl": [], "txt": [], "conll": []} for split in ("train", "test")
    }
    for i, article in enumerate(articles):
        split = "test" if i % heldout_every == heldout_every - 1 else "train"
        sentences = [s for p in article for s in tagged_sentences(p)]
        texts, spans, pos = [], [], 0
        for sentence in sentences:
            text = "".join(w for w, _ in sentence)
            spans.extend([s + pos, e + pos] for s, e in word_spans(sentence))
            texts.append(text)
            pos += len(text) + 1
            units, tags = char_bio(sentence)
            outputs[split]["conll"].extend([f"{u}\t{t}" for u, t in zip(units, tags)] + [""])
            counts[f"{split}_entities"] = counts.get(f"{split}_entities", 0) + len(
                entity_spans(sentence)
            )
        record = {"text": "\n".join(texts), "words": spans}
        outputs[split]["jsonl"].append(json.dumps(record, ensure_ascii=False))
        outputs[split]["txt"].append("\n".join(texts) + "\n")
        counts[f"{split}_articles"] = counts.get(f"{split}_articles", 0) + 1
        counts[f"{split}_sentences"] = counts.get(f"{split}_sentences", 0) + len(sentences)
    for split, stem in (("train", "pretrain"), ("test", "heldout")):
        _write_lines(dest / f"{stem}.jsonl", outputs[split]["jsonl"])
        _write_lines(dest / f"{stem}.txt", outputs[split]["txt"])
        _write_lines(dest / f"ner_{split}.conll", outputs[split]["conll"])
    return counts


def write_review_split(
    pos: str | Path, neg: str | Path, dest: str | Path, test_fraction: float = 0.1, seed: int = 0
) -> dict[str, int]:
    """The sentiment reviews (one per line) as ``train.jsonl`` / ``test.jsonl`` of
    ``{"text", "label"}`` rows (label ``positive`` / ``negative``), written into ``dest``.

    Half of the 35,124 lines are exact repeats, and 47 texts appear under both labels: each
    text is kept once, texts with both labels are dropped, so no test review is also a
    training review. Then a stratified split: per label, a seeded shuffle and
    ``round(n · test_fraction)`` reviews to the test set.

    Returns:
        counts: lines read, reviews kept, per split and label.
    """
    import numpy as np

    by_label: dict[str, list[str]] = {}
    seen_label: dict[str, set[str]] = {}
    lines = 0
    for label, path in (("positive", pos), ("negative", neg)):
        texts = [t.strip() for t in text_lines(read_utf8(path))]
        lines += len(texts)
        by_label[label] = list(dict.fromkeys(t for t in texts if t))
        seen_label[label] = set(by_label[label])
    both = seen_label["positive"] & seen_label["negative"]
    rng = np.random.default_rng(seed)
    rows: dict[str, list[str]] = {"train": [], "test": []}
    counts = {"lines": lines, "conflicting": len(both)}
    for label, texts in by_label.items():
        texts = [t for t in texts if t not in both]
        order = rng.permutation(len(texts))
        n_test = round(len(texts) * test_fraction)
        for k, idx in enumerate(order):
            split = "test" if k < n_test else "train"
            rows[split].append(json.dumps({"text": texts[idx], "label": label}, ensure_ascii=False))
        counts[f"train_{label}"] = len(texts) - n_test
        counts[f"test_{label}"] = n_test
    for split, lines_out in rows.items():
        shuffled = [lines_out[i] for i in rng.permutation(len(lines_out))]
        _write_lines(Path(dest) / f"{split}.jsonl", shuffled)
    return counts
