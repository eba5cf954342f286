"""The one check of training data for embedding models and rerankers: data a loss can read but
learns nothing (or the wrong thing) from is refused, or warned about, before a step runs.

Every training loss declares what its data must satisfy (`DataRules`, the loss's
``data_rules``); `check_training_table` applies them to a `PairTable` read by
`data.pairs.read_pairs`. What it catches, with the number of rows and the first file line:

- a text that is empty or only blanks (refused: it trains the model toward the vector of an
  empty input);
- fewer than two rows (refused: one in-batch row is its own only candidate, loss log 1 = 0;
  one pair has nothing to be ordered against);
- losses with in-batch negatives (MNRL, cached MNRL, SimCSE, the reranker's MNRL): a positive
  that every row shares (refused: each negative equals the positive, nothing is learned) or
  repeated positives (warned: a batch holding two copies gives the row a negative equal to its
  positive, as sentence-transformers' ``NoDuplicatesBatchSampler`` avoids);
- a label outside the loss's range (refused: cosine similarity reaches only [-1, 1], binary
  cross-entropy's targets are probabilities in [0, 1]);
- losses that learn from the order of the labels (CoSENT): every label equal (refused: no pair
  is ordered, the loss is 0 at every step);
- losses over each query's passages (ListNet): a query with one passage (warned; refused when
  every query has one: a softmax over one passage is 1 whatever the model scores, loss 0).

A warning is one line on the logger ``bertfamily.data.validate`` (the command line shows it).
Classification and pair-classification files (`data.task_data.TaskData.load`) go through
`check_texts` too: a blank text there is warned about (count and first line), not refused.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..errors import DataError
from .pairs import PairTable

__all__ = ["DataRules", "check_texts", "check_training_table"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataRules:
    """What a loss needs of its training rows.

    Attributes:
        loss: the loss's name, for messages.
        in_batch_negatives: the other rows' positives (column 1; column 0 for a one-column
            table) are each row's negatives.
        label_range: the inclusive (low, high) every label must lie in; None: any finite value.
        ordered_labels: the loss learns only from pairs of rows with different labels.
        query_groups: the loss ranks each query's (column 0) passages against each other.
    """

    loss: str
    in_batch_negatives: bool = False
    label_range: tuple[float, float] | None = None
    ordered_labels: bool = False
    query_groups: bool = False

    @classmethod
    def of(cls, loss: Any) -> DataRules:
        """The rules a loss object declares as class attributes of these names (``name`` for
        ``loss``); an attribute it lacks keeps the default. The one reading of them for every
        loss family (embedding losses, reranker losses)."""
        fields = ("in_batch_negatives", "label_range", "ordered_labels", "query_groups")
        return cls(loss.name, **{f: getattr(loss, f) for f in fields if hasattr(loss, f)})


def _where(table: PairTable, source: Any, i: int) -> str:
    """Row ``i`` as ``file:line`` when the table knows its file lines, else ``file row i+1``."""
    lines = getattr(table, "lines", None)
    return f"{source}:{lines[i]}" if lines else f"{source} row {i + 1}"


def _refuse_or_warn(message: str, refuse: bool) -> str | None:
    if refuse:
        raise DataError(message)
    log.warning(message)
    return message


def check_texts(
    rows: list[tuple[str | None, ...]],
    source: Any,
    lines: list[int] | None = None,
    *,
    refuse: bool = True,
) -> str | None:
    """Refuse (or, ``refuse`` False, warn about) rows holding an empty or whitespace-only text
    (None counts as no text: an optional second text left out). Also the check of
    classification and pair-classification files (`data.task_data.TaskData.load`, which
    warns: a labelled empty text is noise there, not a loss of 0).

    Args:
        rows: each row's texts.
        lines: each row's 1-based file line, for the message (None: row numbers).

    Returns:
        The warning given, or None.

    Raises:
        DataError: ``refuse`` and such rows: the count and the first one's line.
    """
    blank = [i for i, row in enumerate(rows) if any(t is not None and not t.strip() for t in row)]
    if not blank:
        return None
    first = f"{source}:{lines[blank[0]]}" if lines else f"{source} row {blank[0] + 1}"
    return _refuse_or_warn(
        f"{source}: {len(blank)} of {len(rows)} rows hold an empty or blank text (first: "
        f"{first}); remove or fill them",
        refuse,
    )


def check_training_table(table: PairTable, source: Any, rules: DataRules) -> list[str]:
    """Check ``table`` (read from ``source``, a path or ``stsb:SPLIT``) against ``rules``.

    Returns:
        The warnings given (each also logged once); empty when the data is clean.

    Raises:
        DataError: data the loss learns nothing or the wrong thing from (see the module
            docstring); the message names the loss, how many rows and the first one's line.
    """
    rows, warnings = table.rows, []
    if len(rows) < 2:
        raise DataError(
            f"{source}: {len(rows)} training row(s); the {rules.loss} loss needs at least 2 "
            "(one row is its own only comparison: the loss is 0 at every step)"
        )
    check_texts(rows, source, table.lines)
    if rules.in_batch_negatives:
        warnings += _check_in_batch(table, source, rules)
    if table.labels is not None and rules.label_range is not None:
        low, high = rules.label_range
        bad = [i for i, y in enumerate(table.labels) if not low <= y <= high]
        if bad:
            raise DataError(
                f"{source}: {len(bad)} label(s) outside [{low:g}, {high:g}], the range of the "
                f"{rules.loss} loss (first: {table.labels[bad[0]]:g} at "
                f"{_where(table, source, bad[0])}); rescale them (e.g. a 0-5 score / 5)"
            )
    if table.labels is not None and rules.ordered_labels and len(set(table.labels)) < 2:
        raise DataError(
            f"{source}: all {len(rows)} labels are {table.labels[0]:g}; the {rules.loss} loss "
            "learns from pairs of rows with different labels, so it is 0 at every step"
        )
    if rules.query_groups:
        warnings += _check_groups(table, source, rules)
    return [w for w in warnings if w]


def _check_in_batch(table: PairTable, source: Any, rules: DataRules) -> list[str | None]:
    column = 1 if len(table.columns) > 1 else 0
    positives = [row[column] for row in table.rows]
    counts = Counter(positives)
    if len(counts) < 2:
        raise DataError(
            f"{source}: all {len(positives)} rows have the same {table.columns[column]!r} text; "
            f"the {rules.loss} loss uses the other rows' as negatives, each then equal to the "
            "positive: nothing is learned"
        )
    seen: set[str] = set()
    repeats = []
    for i, text in enumerate(positives):
        if text in seen:
            repeats.append(i)
        seen.add(text)
    if not repeats:
        return []
    return [
        _refuse_or_warn(
            f"{source}: {len(repeats)} of {len(positives)} rows repeat an earlier row's "
            f"{table.columns[column]!r} text (first: {_where(table, source, repeats[0])}); "
            f"in a batch holding both, the {rules.loss} loss gets a negative equal to the "
            "positive",
            refuse=False,
        )
    ]


def _check_groups(table: PairTable, source: Any, rules: DataRules) -> list[str | None]:
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(table.rows):
        groups.setdefault(row[0], []).append(i)
    single = [g[0] for g in groups.values() if len(g) == 1]
    if not single:
        return []
    return [
        _refuse_or_warn(
            f"{source}: {len(single)} of {len(groups)} queries have one passage (first: "
            f"{_where(table, source, single[0])}); the {rules.loss} loss ranks each query's "
            "passages against each other, so a query with one adds 0 to the loss",
            refuse=len(single) == len(groups),
        )
    ]
