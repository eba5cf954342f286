"""Training and evaluation files of embedding models and rerankers, with sentence-transformers'
column conventions, and the STS Benchmark's own layout.

A *pair table* is a list of text columns plus an optional label column:

- CSV/TSV with a header, or JSONL: every column is a text column, in file order, except one
  named ``label`` or ``score`` (the label, a number). So ``anchor,positive[,negative...]`` are
  (anchor, positive, hard negatives) rows and ``sentence1,sentence2,score`` scored pairs, as in
  sentence-transformers' datasets. ``columns`` picks and orders the text columns instead.
- ``.txt``: one text a line (blank lines skipped), one column ``text`` (unsupervised SimCSE).
- format ``"sts"``: the STS Benchmark TSV (`read_sts`), columns ``sentence1, sentence2`` and
  the gold score divided by 5 (so in [0, 1], as sentence-transformers' ``stsb`` data set).

``stsb:train`` / ``stsb:dev`` / ``stsb:test`` name the fetched ``stsb`` resource's splits
(`resolve_pair_file`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError
from .tables import _table_rows, read_text, text_lines

__all__ = [
    "LABEL_COLUMNS",
    "PairTable",
    "ScoredPair",
    "read_pairs",
    "read_retrieval",
    "read_sts",
    "resolve_pair_file",
]

#: Column names read as the label (the first one present), never as text.
LABEL_COLUMNS = ("label", "score")
STS_SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class ScoredPair:
    """One STS pair: two sentences and the gold similarity (0–5 in the STS Benchmark)."""

    sentence1: str
    sentence2: str
    score: float


@dataclass(frozen=True)
class PairTable:
    """Text columns (``rows[i][j]`` = row i's text of column j), optional float labels and,
    when read from a file, each row's 1-based file line (``lines[i]``, for messages)."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    labels: list[float] | None = None
    lines: list[int] | None = None

    def column(self, j: int) -> list[str]:
        """Every row's text of column ``j``."""
        return [r[j] for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


def read_sts(path: str | Path) -> list[ScoredPair]:
    """Read an STS Benchmark file: TSV without a header and without CSV quoting (texts hold
    ``"``), fields [4] score, [5] sentence1, [6] sentence2; trailing fields beyond the 7th
    (some rows carry source notes there) are ignored.

    Raises:
        DataError: a line with fewer than 7 fields or a score that is not a number (names the
            file and line), or no rows.
    """
    path = Path(path)
    pairs = []
    for n, line in enumerate(text_lines(read_text(path)), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 7:
            raise DataError(f"{path}:{n}: {len(fields)} tab-separated fields; STS rows have >= 7")
        try:
            score = float(fields[4])
        except ValueError:
            raise DataError(f"{path}:{n}: the score {fields[4]!r} is not a number") from None
        pairs.append(ScoredPair(fields[5], fields[6], score))
    if not pairs:
        raise DataError(f"{path} holds no rows")
    return pairs


def resolve_pair_file(spec: str | Path) -> tuple[Path, str | None]:
    """``(path, format)`` of a data argument: ``stsb:SPLIT`` is the fetched ``stsb``
    resource's file (fetched if needed) in format ``"sts"``; anything else is a path whose
    suffix tells the format (None)."""
    text = str(spec)
    if text.startswith("stsb:"):
        split = text.split(":", 1)[1]
        if split not in STS_SPLITS:
            raise DataError(f"{text!r}: the STS Benchmark splits are {', '.join(STS_SPLITS)}")
        from ..resources.cache import fetch

        return fetch("stsb") / f"sts-{split}.csv", "sts"
    return Path(spec), None


def _label(path: Path, line: int, value: object) -> float:
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise DataError(f"{path}:{line}: the label {value!r} is not a number") from None
    if out != out or out in (float("inf"), float("-inf")):
        raise DataError(f"{path}:{line}: the label {value!r} is not finite")
    return out


def read_pairs(
    spec: str | Path, *, format: str | None = None, columns: tuple[str, ...] | None = None
) -> PairTable:
    """Read a pair table (see the module docstring); ``spec`` may be ``stsb:SPLIT``.

    Raises:
        DataError: an unknown format, a row missing a column or holding a non-text value, a
            label that is not a finite number, fewer than one text column, or no rows.
    """
    path, fmt = resolve_pair_file(spec)
    fmt = format or fmt
    if fmt == "sts":
        pairs = read_sts(path)
        return PairTable(
            ("sentence1", "sentence2"),
            [(p.sentence1, p.sentence2) for p in pairs],
            [p.score / 5.0 for p in pairs],
        )
    fmt = fmt or {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl"}.get(
        path.suffix.lower(), "txt" if path.suffix.lower() == ".txt" else None
    )
    if fmt == "txt":
        numbered = [(n, t.strip()) for n, t in enumerate(text_lines(read_text(path)), 1)]
        numbered = [(n, t) for n, t in numbered if t]
        if not numbered:
            raise DataError(f"{path} holds no rows")
        return PairTable(("text",), [(t,) for _, t in numbered], lines=[n for n, _ in numbered])
    if fmt not in ("csv", "tsv", "jsonl"):
        raise DataError(f"cannot tell the format of {path.name}; use .csv, .tsv, .jsonl or .txt")
    header, found = _table_rows(path, read_text(path), fmt)
    if not found:
        raise DataError(f"{path} holds no rows")
    keys = header if header is not None else list(found[0][1])
    label = next((c for c in LABEL_COLUMNS if c in keys), None)
    names = tuple(columns) if columns else tuple(c for c in keys if c != label)
    if not names:
        raise DataError(f"{path}: no text column (columns: {keys})")
    rows, labels, lines = [], [] if label is not None else None, []
    for n, row in found:
        lines.append(n)
        texts = []
        for c in names:
            value = row.get(c)
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise DataError(f"{path}:{n}: no text in column {c!r} (got {value!r})")
            texts.append(str(value))
        rows.append(tuple(texts))
        if labels is not None:
            labels.append(_label(path, n, row.get(label)))
    return PairTable(names, rows, labels, lines)


def read_retrieval(directory: str | Path) -> tuple[dict[str, str], dict[str, str], dict]:
    """A retrieval data set in the BEIR layout: ``corpus.jsonl`` (``_id``, ``text``, optional
    ``title``, joined to the text by a space), ``queries.jsonl`` (``_id``, ``text``) and
    ``qrels.tsv`` (or ``qrels/test.tsv``; header, then query id, document id, relevance).

    Returns:
        (queries {id: text}, corpus {id: text}, qrels {query id: {document id: relevance}}).

    Raises:
        DataError: a missing file, a row without ``_id``/``text``, a bad qrels line.
    """
    d = Path(directory)

    def jsonl(name: str) -> dict[str, str]:
        _, rows = _table_rows(d / name, read_text(d / name), "jsonl")
        out = {}
        for n, row in rows:
            if "_id" not in row or not isinstance(row.get("text"), str):
                raise DataError(f"{d / name}:{n}: needs '_id' and 'text'")
            title = row.get("title") or ""
            out[str(row["_id"])] = f"{title} {row['text']}".strip() if title else row["text"]
        return out

    queries, corpus = jsonl("queries.jsonl"), jsonl("corpus.jsonl")
    qfile = d / "qrels.tsv" if (d / "qrels.tsv").is_file() else d / "qrels" / "test.tsv"
    qrels: dict[str, dict[str, float]] = {}
    for n, line in enumerate(text_lines(read_text(qfile)), 1):
        fields = line.split("\t")
        if n == 1 and not fields[-1].strip().lstrip("-").replace(".", "").isdigit():
            continue  # the header
        if not line.strip():
            continue
        if len(fields) < 3:
            raise DataError(f"{qfile}:{n}: expected query id, document id, relevance")
        qrels.setdefault(fields[0], {})[fields[1]] = _label(qfile, n, fields[2])
    return queries, corpus, qrels
