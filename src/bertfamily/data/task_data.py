"""Encoded task data: `TaskData` reads a task's file (`data`, `qa`), encodes it into rows of
token ids and labels, and evaluates a model on them (`metrics`); `pad_batch` makes a batch of
rows, `forward_rows` runs a model over rows in length-sorted batches.

Tasks: "classify" (one text), "pair" (two texts; the same head), "ner" (CoNLL), "qa" (SQuAD
JSON), "choice" (JSONL with a list of choices).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..config import PROBLEM_TYPES
from ..errors import InputError
from ..evaluation.metrics import (
    classification_metrics,
    entity_metrics,
    multilabel_metrics,
    regression_metrics,
    squad_metrics,
)
from .batching import IGNORE_INDEX, TokenRows, run_batches
from .squad import postprocess, prepare_windows, read_squad
from .tables import (
    DataError,
    align_labels,
    encode_words,
    label_list,
    read_conll,
    read_table,
    read_text,
    repair_bio,
    tag_scheme,
    text_lines,
    word_predictions,
)
from .validate import check_texts

__all__ = [
    "TASKS",
    "HEAD_OF_TASK",
    "BEST_METRIC",
    "MODEL_INPUTS",
    "TaskOptions",
    "TaskData",
    "best_metric",
    "infer_problem_type",
    "model_problem_type",
    "pad_batch",
    "forward_rows",
]

TASKS = ("classify", "pair", "ner", "qa", "choice")
HEAD_OF_TASK = {
    "classify": "classify",
    "pair": "classify",
    "ner": "tokens",
    "qa": "qa",
    "choice": "choice",
}
BEST_METRIC = {
    "classify": "accuracy",
    "pair": "accuracy",
    "ner": "f1",
    "qa": "f1",
    "choice": "accuracy",
}
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids")

log = logging.getLogger(__name__)


@dataclass
class TaskOptions:
    """How to read and encode a task's data, and evaluate on it.

    Attributes:
        text_column / text_pair_column / label_column / choices_column: table and JSONL
            fields (``text_pair_column`` is required by the "pair" task).
        problem_type: for "classify"/"pair": "single_label_classification" (one label per
            row; cross-entropy, softmax), "multi_label_classification" (a set of labels per
            row: a JSON list, or names joined by ``label_separator``; binary cross-entropy,
            sigmoid, labels over ``threshold``) or "regression" (one float per row; mean
            squared error). None: inferred from the training labels (`infer_problem_type`).
        regression: the same as ``problem_type="regression"`` (kept for older callers).
        label_separator: joins the labels of a multi-label row in a CSV/TSV cell or a string.
        threshold: a multi-label prediction holds every label whose sigmoid score is over it.
        max_length: tokens per row (per window for QA), special tokens included.
        doc_stride / max_question_length / max_answer_length / null_threshold: QA windows
            and answer selection (see `bertfamily.tasks.qa`); ``doc_stride`` None: a third
            of ``max_length`` (128 of 384, the reference scripts' ratio), see `stride`.
        eval_batch_size: rows per evaluation batch.
        knowledge: "classify" only: a `data.knowledge.KnowledgeGraph` whose triples are
            injected into every text as K-BERT does (Liu et al. 2020 §3): rows then carry soft
            ``position_ids`` and a (T, T) visible matrix as ``attention_mask``; None: none.
        position_start: the model's first position index for those soft positions (its
            ``EncoderConfig.position_offset``: RoBERTa pad_token_id + 1, else 0).
        format: the file format of classify/pair/choice data ("csv", "tsv", "jsonl", "text";
            None: from the suffix, see `data.tables.table_format`).
    """

    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    choices_column: str = "choices"
    problem_type: str | None = None
    regression: bool = False
    label_separator: str = "|"
    threshold: float = 0.5
    max_length: int = 128
    doc_stride: int | None = None
    max_question_length: int = 64
    max_answer_length: int = 30
    null_threshold: float | None = None
    eval_batch_size: int = 64
    knowledge: Any = None
    position_start: int = 0
    format: str | None = None

    @property
    def stride(self) -> int:
        """The QA window overlap in tokens: ``doc_stride``, or a third of ``max_length``."""
        return self.doc_stride if self.doc_stride is not None else self.max_length // 3

    def __post_init__(self) -> None:
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise InputError(
                f"problem_type must be None or one of {PROBLEM_TYPES}, got {self.problem_type!r}"
            )
        if self.regression:
            if self.problem_type not in (None, "regression"):
                raise InputError(f"regression=True contradicts problem_type={self.problem_type!r}")
            self.problem_type = "regression"
        if not 0.0 <= self.threshold <= 1.0:
            raise InputError(f"threshold must lie in [0, 1], got {self.threshold}")
        if not self.label_separator:
            raise InputError("label_separator must be a non-empty string")


def infer_problem_type(labels: list[Any], separator: str = "|") -> str:
    """The problem type a column of table labels implies: multi-label when any label is a list
    or a string holding ``separator``; regression when every label is a number (a JSON number
    or a numeric string) and some is not a whole number (integers are class ids: ``0``/``1``
    stay classes); single-label otherwise."""
    if any(isinstance(v, list) or (isinstance(v, str) and separator in v) for v in labels):
        return "multi_label_classification"
    values = []
    for v in labels:
        try:
            values.append(float(v))
        except (TypeError, ValueError):
            return "single_label_classification"
    if values and all(math.isfinite(x) for x in values) and any(x != int(x) for x in values):
        return "regression"
    return "single_label_classification"


def model_problem_type(config) -> str:
    """The problem type of a classification model's config: its own ``problem_type``, else
    regression for one label and single-label for more (as the loss infers it for class ids)."""
    if config.problem_type is not None:
        return config.problem_type
    return "regression" if config.num_labels == 1 else "single_label_classification"


def best_metric(task: str, problem_type: str | None) -> tuple[str, bool]:
    """(metric name, greater is better) that picks the best checkpoint of a task."""
    if task in ("classify", "pair") and problem_type == "regression":
        return "mse", False
    if task in ("classify", "pair") and problem_type == "multi_label_classification":
        return "micro_f1", True
    return BEST_METRIC[task], True


def _label_items(value: Any, separator: str) -> list[str]:
    """The label names of one multi-label cell: a list, or a string split at ``separator``
    (blank items dropped; an empty string or list is a row without labels)."""
    items = value if isinstance(value, list) else str(value).split(separator)
    return [s for s in (str(v).strip() for v in items) if s]


def pad_batch(rows: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad lists to the longest row: input_ids with ``pad_id``, labels lists with -100,
    masks/types/positions with 0, (T, T) tensors (K-BERT visible matrices) with 0 to
    (T_max, T_max); scalars are stacked.

    Returns:
        int64 tensors (B, T) for lists, (B, K, T) for rows of (K, T) lists (choices, padded in
        T), (B,) for scalars (float for regression labels).
    """
    out: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        if isinstance(values[0], torch.Tensor) and values[0].dim() == 2:  # (T, T) matrices
            T = max(v.shape[0] for v in values)
            padded = torch.zeros(len(values), T, T, dtype=values[0].dtype)
            for i, v in enumerate(values):
                padded[i, : v.shape[0], : v.shape[1]] = v
            out[key] = padded  # (B, T, T), 0 / False outside each row's own tokens
            continue
        if not isinstance(values[0], list):
            out[key] = torch.as_tensor(values)
            continue
        fill = pad_id if key == "input_ids" else IGNORE_INDEX if key == "labels" else 0
        if isinstance(values[0][0], list):  # (K, T)
            T = max(len(x) for v in values for x in v)
            out[key] = torch.tensor([[x + [fill] * (T - len(x)) for x in v] for v in values])
        else:
            T = max(len(v) for v in values)
            out[key] = torch.tensor([v + [fill] * (T - len(v)) for v in values])
    return out


def forward_rows(model, rows: list[dict], size: int, pad_id: int) -> list[SimpleNamespace]:
    """Forward every row (no grad), in length-sorted batches of ``size`` (little padding): the
    engine's one batch loop (`data.batching.run_batches`, what `inference.batches` re-exports).

    Args:
        model: a `Model` with a task head (put it in eval mode first).
        rows: encoded rows (lists of ids, as `TaskData.load` gives them).
        size: rows per batch; pad_id: the padding id.

    Returns:
        One output per row, in the rows' order: ``logits`` ((1, C), (1, T, C) or (1, K)) or
        ``start_logits``/``end_logits`` (1, T), as the model gives them (and ``exit_layers``
        (1,) from an early-exit runner).

    Raises:
        ValueError: size < 1.
    """
    per_row: list = [None] * len(rows)
    keys = [k for k in MODEL_INPUTS if rows and k in rows[0]]
    tokens = TokenRows({k: [r[k] for r in rows] for k in keys}, [False] * len(rows))
    if not rows:
        return per_row

    def pad(fields: dict[str, list], target: int) -> dict[str, torch.Tensor]:
        n = len(fields["input_ids"])
        return pad_batch([{k: fields[k][i] for k in fields} for i in range(n)], pad_id)

    with torch.no_grad():
        for idx, out in run_batches(tokens, lambda batch: model(**batch), pad=pad, batch_size=size):
            for j, i in enumerate(idx):
                per_row[i] = SimpleNamespace(
                    **{
                        name: getattr(out, name)[j : j + 1]
                        for name in ("logits", "start_logits", "end_logits", "exit_layers")
                        if getattr(out, name, None) is not None
                    }
                )
    return per_row


RARE_LABEL_ROWS = 1_000  # in a table of this many rows or more, a label seen once is reported


def label_report(
    seen: list[tuple[str, int | None]], rows: int, path: Path
) -> tuple[dict[str, int], list[str]]:
    """The rows per training label, and what looks like a mistake in them: a label seen once
    in a table of `RARE_LABEL_ROWS` rows or more (a typo, a stray class), and labels that
    differ only in letter case. Labels were stripped when read (``" pos"`` is ``"pos"``).

    Args:
        seen: ``(label, line)`` for every label of every row.

    Returns:
        ``({label: rows}, notes)``: each note names the file, the label(s) and their line;
        each is also logged as a warning.
    """
    counts: dict[str, int] = {}
    first: dict[str, int | None] = {}
    for name, line in seen:
        counts[name] = counts.get(name, 0) + 1
        first.setdefault(name, line)
    notes = []
    if rows >= RARE_LABEL_ROWS:
        for name in sorted(n for n, c in counts.items() if c == 1):
            notes.append(
                f"{path}:{first[name]}: label {name!r} is seen once among {rows:,} rows "
                "(a typo, or a stray class?)"
            )
    by_case: dict[str, list[str]] = {}
    for name in sorted(counts):
        by_case.setdefault(name.casefold(), []).append(name)
    for names in by_case.values():
        if len(names) > 1:
            where = ", ".join(f"{n!r} ({counts[n]:,} rows, first {path}:{first[n]})" for n in names)
            notes.append(f"labels that differ only in case are separate classes: {where}")
    for note in notes:
        log.warning("%s", note)
    return dict(sorted(counts.items())), notes


class TaskData:
    """Encoded rows of one task (lists of ids, labels), plus what evaluation needs.

    Raises:
        ValueError: an unknown task.
    """

    def __init__(
        self,
        task: str,
        tokenizer,
        opts: TaskOptions,
        label_names: tuple[str, ...] | None = None,
        problem_type: str | None = None,
    ) -> None:
        if task not in TASKS:
            raise InputError(f"unknown task {task!r}; valid: {TASKS}")
        self.task, self.tok, self.opts = task, tokenizer, opts
        self.label_names = label_names
        # the training labels (name -> rows) and what looks wrong in them, once the first
        # labelled load fixed the label set (`label_report`)
        self.label_counts: dict[str, int] | None = None
        self.label_notes: list[str] = []
        # classify/pair: given (the training data's, the model's), the option, or inferred by
        # the first `load` of labelled rows.
        self.problem_type = problem_type or opts.problem_type

    # classification / pair --------------------------------------------------------------------
    def load(self, path: str | Path, labelled: bool = True) -> list[dict]:
        """Read and encode a file; on the first (training) call the label set is fixed.

        Raises:
            DataError: unreadable or binary file; a row without its text, pair, label or
                choices; a label not seen in training, a regression label that is not a finite
                number, a choice label outside [0, number of choices). Messages name the file
                and the line.
        """
        t, o = self.task, self.opts
        if t in ("classify", "pair"):
            if t == "pair" and not o.text_pair_column:
                raise DataError("the pair task needs --text-pair-column")
            self.examples = read_table(
                path,
                text_column=o.text_column,
                label_column=o.label_column if labelled else None,
                text_pair_column=o.text_pair_column,
                format=o.format,
            )
            if labelled:  # training or evaluation data: a blank text is warned about
                lines = [e.line for e in self.examples]
                check_texts(
                    [(e.text, e.text_pair) for e in self.examples],
                    path,
                    lines if all(lines) else None,
                    refuse=False,
                )
            return self._encode_table(labelled, Path(path))
        if t == "ner":
            self.sentences = read_conll(path)
            for s in self.sentences:
                if tag_scheme(s.tags) == "BIO":
                    s.tags = repair_bio(s.tags)
            self.scheme = (
                "BIOES" if any(tag_scheme(s.tags) == "BIOES" for s in self.sentences) else "BIO"
            )
            if self.label_names is None:
                self.label_names = label_list([s.tags for s in self.sentences])
            ids = {n: i for i, n in enumerate(self.label_names)}
            unknown = {t for s in self.sentences for t in s.tags} - set(ids)
            if unknown:
                raise DataError(f"{path}: tags not seen in training: {sorted(unknown)}")
            self.encodings = encode_words(self.tok, [s.words for s in self.sentences], o.max_length)
            return [
                {
                    **self._inputs(e.input_ids, e.token_type_ids),
                    "labels": align_labels(e.word_ids, [ids[t] for t in s.tags]),
                }
                for e, s in zip(self.encodings, self.sentences)
            ]
        if t == "qa":
            self.examples = read_squad(path)
            self.features = prepare_windows(
                self.tok,
                self.examples,
                max_length=o.max_length,
                doc_stride=o.stride,
                max_question_length=o.max_question_length,
            )
            if self.label_names is None:
                self.label_names = ("start", "end")
            return [
                {
                    **self._inputs(f.input_ids, f.token_type_ids),
                    "start_positions": f.start_position,
                    "end_positions": f.end_position,
                }
                for f in self.features
            ]
        # choice: JSONL {text, choices: [...], label: index}
        rows = self._read_choices(Path(path), labelled)
        self.label_names = self.label_names or ("score",)
        out = []
        for r in rows:
            enc = self.tok(
                [r[o.text_column]] * len(r[o.choices_column]),
                r[o.choices_column],
                max_length=o.max_length,
                padding=False,
                return_tensors=None,
            )
            row = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
            if "token_type_ids" in enc:
                row["token_type_ids"] = enc["token_type_ids"]
            if labelled:
                row["labels"] = r[o.label_column]
            out.append(row)
        self.choice_rows = rows
        return out

    def _read_choices(self, path: Path, labelled: bool) -> list[dict]:
        """The rows of a choice JSONL file, checked: a string text, a non-empty list of string
        choices, and (``labelled``) an integer label in [0, number of choices).

        Raises:
            DataError: naming the file, the line and the offending value.
        """
        o = self.opts
        if o.format == "text" or (o.format is None and path.suffix.lower() == ".txt"):
            return self._text_choices(path, labelled)
        rows = []
        for n, line in enumerate(text_lines(read_text(path)), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except (ValueError, RecursionError) as e:  # bad JSON, too-long ints, too deep
                raise DataError(f"{path}:{n}: not valid JSON: {e}") from e
            if not isinstance(r, dict):
                raise DataError(f"{path}:{n}: expected a JSON object, got {line[:80]!r}")
            text = r.get(o.text_column)
            if not isinstance(text, str):
                raise DataError(
                    f"{path}:{n}: no text (key {o.text_column!r} must hold a string, got {text!r})"
                )
            choices = r.get(o.choices_column)
            if (
                not isinstance(choices, list)
                or not choices
                or not all(isinstance(c, str) for c in choices)
            ):
                raise DataError(
                    f"{path}:{n}: no list of choices (key {o.choices_column!r} must hold a "
                    f"non-empty list of strings, got {choices!r})"
                )
            if labelled:
                label = r.get(o.label_column)
                if label is None:
                    raise DataError(f"{path}:{n}: no label (key {o.label_column!r})")
                if isinstance(label, str) and label.strip().lstrip("-").isdigit():
                    label = int(label)
                if isinstance(label, bool) or not isinstance(label, int):
                    raise DataError(
                        f"{path}:{n}: label {r.get(o.label_column)!r} is not the index of a "
                        "choice (an integer)"
                    )
                if not 0 <= label < len(choices):
                    raise DataError(
                        f"{path}:{n}: label {label} is out of range: {len(choices)} choices, "
                        f"so it must lie in [0, {len(choices) - 1}]"
                    )
                r[o.label_column] = label
            r.setdefault("line", n)
            rows.append(r)
        if not rows:
            raise DataError(f"{path} holds no rows")
        return rows

    def _text_choices(self, path: Path, labelled: bool) -> list[dict]:
        """The rows of a plain-text choice file: per non-blank line the context, then each
        choice, separated by tabs.

        Raises:
            DataError: ``labelled`` (a text file holds no labels) or a line with no choice.
        """
        if labelled:
            raise DataError(f"{path}: a plain text file holds no labels; give choice data as JSONL")
        o, rows = self.opts, []
        for n, line in enumerate(text_lines(read_text(path)), 1):
            if not line.strip():
                continue
            text, *choices = (c.strip() for c in line.split("\t"))
            if not choices:
                raise DataError(f"{path}:{n}: expected the context and its choices, tab-separated")
            rows.append({o.text_column: text, o.choices_column: choices, "line": n})
        if not rows:
            raise DataError(f"{path} holds no rows (every line is blank)")
        return rows

    def _inputs(self, ids: list[int], types: list[int] | None) -> dict:
        row = {"input_ids": list(ids), "attention_mask": [1] * len(ids)}
        if types is not None and self.tok.has_token_type_ids:
            row["token_type_ids"] = list(types)
        return row

    def _encode_table(self, labelled: bool, path: Path) -> list[dict]:
        ex, o = self.examples, self.opts
        if o.knowledge is not None:
            rows = self._encode_knowledge(path)
            return self._label_rows(rows, labelled, path)
        enc = self.tok(
            [e.text for e in ex],
            [e.text_pair or "" for e in ex] if o.text_pair_column else None,
            max_length=o.max_length,
            padding=False,
            return_tensors=None,
        )
        rows = [
            self._inputs(ids, enc["token_type_ids"][i] if "token_type_ids" in enc else None)
            for i, ids in enumerate(enc["input_ids"])
        ]
        return self._label_rows(rows, labelled, path)

    def _encode_knowledge(self, path: Path) -> list[dict]:
        """K-BERT rows (`data.knowledge.knowledge_row`) of single texts."""
        from .knowledge import knowledge_row

        if self.task != "classify" or self.opts.text_pair_column:
            raise InputError("knowledge injection (K-BERT) is for single-text classification")
        o = self.opts
        rows = [
            knowledge_row(self.tok, e.text, o.knowledge, o.max_length, o.position_start)
            for e in self.examples
        ]
        injected = sum(len(r["input_ids"]) for r in rows)
        log.info("%s: knowledge injected, %d tokens in %d rows", path, injected, len(rows))
        return rows

    def _label_rows(self, rows: list[dict], labelled: bool, path: Path) -> list[dict]:
        """``rows`` with their ``labels`` (per the problem type) when ``labelled``."""
        ex, o = self.examples, self.opts
        if not labelled:
            return rows
        if self.problem_type is None:
            self.problem_type = infer_problem_type([e.label for e in ex], o.label_separator)
            log.info("%s: problem type %s (inferred from the labels)", path, self.problem_type)
        if self.problem_type == "regression":
            self.label_names = self.label_names or ("score",)
            for r, e in zip(rows, ex):
                try:
                    value = float(e.label)
                except (TypeError, ValueError):
                    value = math.nan
                if not math.isfinite(value):
                    raise DataError(
                        f"{path}:{e.line}: regression label {e.label!r} is not a finite number"
                    )
                r["labels"] = value
            return rows
        if self.problem_type == "multi_label_classification":
            sets = [_label_items(e.label, o.label_separator) for e in ex]
            if self.label_names is None:
                self.label_names = tuple(sorted({n for s in sets for n in s}))
                if not self.label_names:
                    raise DataError(f"{path}: no row holds a label")
                seen = [(n, e.line) for e, names in zip(ex, sets) for n in names]
                self.label_counts, self.label_notes = label_report(seen, len(ex), path)
            ids = {n: i for i, n in enumerate(self.label_names)}
            for r, e, names in zip(rows, ex, sets):
                unknown = [n for n in names if n not in ids]
                if unknown:
                    raise DataError(
                        f"{path}:{e.line}: labels {unknown} were not seen in training "
                        f"(known: {list(self.label_names)})"
                    )
                r["labels"] = [0.0] * len(ids)
                for n in names:
                    r["labels"][ids[n]] = 1.0
            return rows
        for e in ex:
            if isinstance(e.label, list):
                raise DataError(
                    f"{path}:{e.line}: a list of labels in a {self.problem_type} task; use "
                    "problem_type='multi_label_classification'"
                )
        if self.label_names is None:
            self.label_names = tuple(sorted({str(e.label) for e in ex}))
            seen = [(str(e.label), e.line) for e in ex]
            self.label_counts, self.label_notes = label_report(seen, len(ex), path)
        ids = {n: i for i, n in enumerate(self.label_names)}
        for e in ex:
            if str(e.label) not in ids:
                unknown = sorted({str(x.label) for x in ex} - set(ids))
                raise DataError(
                    f"{path}:{e.line}: label {str(e.label)!r} was not seen in training "
                    f"(known: {list(self.label_names)}); labels not seen: {unknown}"
                )
        for r, e in zip(rows, ex):
            r["labels"] = ids[str(e.label)]
        return rows

    # evaluation -------------------------------------------------------------------------------
    def evaluate(
        self, model, rows: list[dict], outs: list | None = None
    ) -> tuple[dict[str, float], list[dict]]:
        """Metrics and per-example predictions of ``model`` on encoded ``rows`` of this data
        (or of ``outs``, the model's `forward_rows` outputs on them, when already computed)."""
        pad = self.tok.pad_token_id or 0
        if outs is None:
            outs = forward_rows(model, rows, self.opts.eval_batch_size, pad)
        t = self.task
        if t in ("classify", "pair", "choice"):
            if not rows:
                raise InputError("cannot evaluate on an empty set of rows")
            logits = torch.cat([o.logits for o in outs]).float()
            gold = [r["labels"] for r in rows]
            kind = self.problem_type if t != "choice" else None
            # each prediction names its example by the line it starts on (and its text)
            if t == "choice":
                where = [{"line": r["line"]} if "line" in r else {} for r in self.choice_rows]
            else:
                where = [{"line": e.line, "text": e.text} for e in self.examples]
            if len(where) != len(rows):  # rows not read by `load` (a caller's own)
                where = [{}] * len(rows)
            if kind == "regression" or (kind is None and t != "choice" and logits.shape[-1] == 1):
                pred = logits[:, 0].tolist()
                return regression_metrics(gold, pred), [
                    {**w, "prediction": p, "gold": g} for w, p, g in zip(where, pred, gold)
                ]
            if kind == "multi_label_classification":
                probs = logits.sigmoid()
                hits = (probs > self.opts.threshold).int().tolist()
                names = self.label_names
                preds = [
                    {
                        **w,
                        "labels": [names[j] for j, h in enumerate(row) if h],
                        "scores": {n: float(s) for n, s in zip(names, p)},
                        "gold": [names[j] for j, v in enumerate(g) if v],
                    }
                    for w, row, p, g in zip(where, hits, probs, gold)
                ]
                return multilabel_metrics([[int(v) for v in g] for g in gold], hits), preds
            probs = logits.softmax(-1)
            pred = probs.argmax(-1).tolist()
            names = self.label_names if t != "choice" else None
            metrics = classification_metrics(gold, pred, labels=list(range(logits.shape[-1])))
            preds = [
                {
                    **where[i],
                    "label": names[p] if names else p,
                    "score": float(probs[i, p]),
                    "gold": names[g] if names else g,
                }
                for i, (p, g) in enumerate(zip(pred, gold))
            ]
            self.last_confusion = (gold, pred)
            return metrics, preds
        if t == "ner":
            true: list[list[str]] = []
            predicted = [row for o in outs for row in o.logits.argmax(-1).tolist()]  # (T,) each
            words_pred = []
            for e, s, p in zip(self.encodings, self.sentences, predicted):
                wp = word_predictions(e.word_ids, p, len(s.words), default=0)
                words_pred.append([self.label_names[i] for i in wp])
                true.append(s.tags)
            words_pred = [repair_bio(p) if self.scheme == "BIO" else p for p in words_pred]
            return (
                entity_metrics(true, words_pred, self.scheme),
                [
                    {
                        **({"line": s.line} if s.line is not None else {}),
                        "words": s.words,
                        "tags": p,
                        "gold": s.tags,
                    }
                    for s, p in zip(self.sentences, words_pred)
                ],
            )
        # qa
        starts = [row for o in outs for row in o.start_logits.float().numpy()]
        ends = [row for o in outs for row in o.end_logits.float().numpy()]
        preds = postprocess(
            self.examples,
            self.features,
            starts,
            ends,
            max_answer_length=self.opts.max_answer_length,
            null_threshold=self.opts.null_threshold,
        )
        answers = {ex.id: [a for a, _ in ex.answers] or [""] for ex in self.examples}
        metrics = squad_metrics(
            {ex.id: p.answer.text for ex, p in zip(self.examples, preds)}, answers
        )
        return metrics, [
            {
                "id": ex.id,
                "answer": p.answer.text,
                "start": p.answer.start,
                "end": p.answer.end,
                "score": p.answer.probability,
            }
            for ex, p in zip(self.examples, preds)
        ]
