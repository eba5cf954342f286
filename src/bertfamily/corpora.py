"""Pretraining corpora: readers, sentence splitting, and unpacking of the real corpora that
`bertfamily fetch` downloads (../shared/DATA.md).

Corpus formats accepted by `read_documents`:

- plain text (``.txt``): one sentence (or paragraph) per line, a blank line between documents;
- JSONL (``.jsonl``): one document per line, text in a field (default ``"text"``), optionally
  ``"entities"``: [[start, end], ...] character spans of phrases/entities (ERNIE-style masking);
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
import zlib
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

__all__ = [
    "Sentence",
    "read_documents",
    "split_sentences",
    "write_documents",
    "parse_rdata_strings",
    "austen_from_rdb",
    "wiki_xml_to_documents",
]

logger = logging.getLogger(__name__)

Document = list[str]  # sentences (or lines) of one document

_DROP_LINK_NAMESPACES = {"file", "image", "category"}
_DROP_TAGS = {"ref", "gallery", "math", "timeline", "score", "imagemap", "syntaxhighlight"}


class Sentence(str):
    """A line of text with phrase/entity spans supplied by the corpus: ``entities`` holds
    (start, end) character offsets into the string (end exclusive), masked as units by the
    "entity" masking strategy (ERNIE, Sun et al. 2019 §3.2)."""

    entities: tuple[tuple[int, int], ...] = ()

    def __new__(cls, text: str, entities=()):
        """A `Sentence` of ``text`` with ``entities`` as (start, end) int pairs."""
        obj = super().__new__(cls, text)
        obj.entities = tuple((int(s), int(e)) for s, e in entities)
        return obj


def _annotated_pieces(text: str, pieces: list[str], entities) -> list[str]:
    """Locate each piece in ``text`` (in order) and give it the entities inside it."""
    out, cursor = [], 0
    for piece in pieces:
        start = text.find(piece, cursor)
        if start < 0:
            out.append(piece)
            continue
        end = start + len(piece)
        cursor = end
        out.append(
            Sentence(
                piece, [(s - start, e - start) for s, e in entities if start <= s and e <= end]
            )
        )
    return out


@lru_cache(maxsize=4)
def _segmenter(language: str):
    import pysbd

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
    if path.is_dir():
        docs = _read_dataset(path, text_field)
    elif path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if text_field not in record:
                raise ValueError(f"{path}:{n} has no field {text_field!r}")
            text = str(record[text_field])
            pieces = [x.strip() for x in text.splitlines() if x.strip()]
            if split:
                pieces = [p for line in pieces for p in split_sentences(line, language)]
            if record.get("entities"):
                pieces = _annotated_pieces(text, pieces, record["entities"])
            docs.append(pieces)
    elif path.is_file():
        docs, current = [], []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                current.append(line.strip())
            elif current:
                docs.append(current)
                current = []
        if current:
            docs.append(current)
    else:
        raise ValueError(f"corpus {path} does not exist")
    if split and path.suffix != ".jsonl":
        docs = [[s for line in doc for s in split_sentences(line, language)] for doc in docs]
    docs = [d for d in docs if d]
    if not docs:
        raise ValueError(f"corpus {path} holds no text")
    return docs


def _read_dataset(path: Path, text_field: str) -> list[Document]:
    try:
        import datasets
    except ImportError as e:
        raise ValueError(
            f"{path} is a directory; reading a saved dataset needs the 'datasets' package"
        ) from e
    ds = datasets.load_from_disk(str(path))
    if text_field not in ds.column_names:
        raise ValueError(f"dataset {path} has no column {text_field!r} ({ds.column_names})")
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
        raise ValueError("not an R XDR serialisation (no 'X\\n' header)")
    pos = 2
    version = struct.unpack_from(">i", record, pos)[0]
    pos += 12
    if version == 3:
        n = struct.unpack_from(">i", record, pos)[0]
        pos += 4 + n
    flags, count = struct.unpack_from(">ii", record, pos)
    pos += 8
    if flags & 0xFF != 0x10:
        raise ValueError(f"R object type {flags & 0xFF:#x} is not a character vector (0x10)")
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

    import mwparserfromhell

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
