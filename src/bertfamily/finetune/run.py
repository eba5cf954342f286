"""`finetune()` and `predict()`: task data → batches → the shared `Trainer` → metrics.

Tasks: "classify" (one text), "pair" (two texts; the same head), "ner" (CoNLL), "qa" (SQuAD
JSON), "choice" (JSONL with a list of choices). Outputs in ``output_dir``: the trainer's
``metrics.jsonl``, ``checkpoint.pt``, ``model/`` and ``best/`` (each a Hugging Face directory
with the tokenizer), plus ``eval_predictions.jsonl``, ``final_metrics.json`` and, for
classification, ``confusion_matrix.png``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..files import atomic_write
from ..pretrained import from_pretrained
from ..heads.tasks import IGNORE_INDEX, task_loss
from ..tokenization import load_tokenizer
from .data import (DataError, align_labels, encode_words, label_list, read_conll, read_table,
                   repair_bio, tag_scheme, word_predictions)
from .metrics import classification_metrics, entity_metrics, regression_metrics, squad_metrics
from .qa import postprocess, prepare_windows, read_squad

log = logging.getLogger(__name__)

TASKS = ("classify", "pair", "ner", "qa", "choice")
HEAD_OF_TASK = {"classify": "classify", "pair": "classify", "ner": "tokens", "qa": "qa",
                "choice": "choice"}
BEST_METRIC = {"classify": "accuracy", "pair": "accuracy", "ner": "f1", "qa": "f1",
               "choice": "accuracy"}
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class FinetuneOptions:
    """Data and optimisation options of `finetune` (besides the trainer's own)."""

    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    choices_column: str = "choices"
    regression: bool = False
    max_length: int = 128
    doc_stride: int = 128
    max_question_length: int = 64
    max_answer_length: int = 30
    null_threshold: float | None = None
    batch_size: int = 32
    eval_batch_size: int = 64
    epochs: float = 3.0


# --- padding ----------------------------------------------------------------------------------
def pad_batch(rows: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad lists to the longest row: input_ids with ``pad_id``, labels lists with -100,
    masks/types with 0; scalars are stacked. Rows of (K, T) lists (choices) are padded in T."""
    out: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
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


def _run(model, rows: list[dict], size: int, pad_id: int) -> list:
    """Forward every row in eval mode, in length-sorted batches (little padding), and return
    one output per row, in the rows' order, each with a batch dimension of 1 (``logits``,
    ``start_logits``, ``end_logits`` as the model gives them)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]["input_ids"]))
    per_row: list = [None] * len(rows)
    with torch.no_grad():
        for start in range(0, len(order), size):
            idx = order[start:start + size]
            batch = pad_batch([rows[i] for i in idx], pad_id)
            out = model(**{k: v for k, v in batch.items() if k in MODEL_INPUTS})
            for j, i in enumerate(idx):
                per_row[i] = SimpleNamespace(**{
                    name: getattr(out, name)[j:j + 1] for name in
                    ("logits", "start_logits", "end_logits") if getattr(out, name) is not None})
    return per_row


# --- task data --------------------------------------------------------------------------------
class TaskData:
    """Encoded rows of one task (lists of ids, labels), plus what evaluation needs."""

    def __init__(self, task: str, tokenizer, opts: FinetuneOptions,
                 label_names: tuple[str, ...] | None = None) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; valid: {TASKS}")
        self.task, self.tok, self.opts = task, tokenizer, opts
        self.label_names = label_names

    # classification / pair --------------------------------------------------------------------
    def load(self, path: str | Path, labelled: bool = True) -> list[dict]:
        """Read and encode a file; on the first (training) call the label set is fixed.

        Raises:
            DataError: unreadable file or columns; a label not seen in training.
        """
        t, o = self.task, self.opts
        if t in ("classify", "pair"):
            if t == "pair" and not o.text_pair_column:
                raise DataError("the pair task needs --text-pair-column")
            self.examples = read_table(path, text_column=o.text_column,
                                       label_column=o.label_column if labelled else None,
                                       text_pair_column=o.text_pair_column)
            return self._encode_table(labelled)
        if t == "ner":
            self.sentences = read_conll(path)
            for s in self.sentences:
                if tag_scheme(s.tags) == "BIO":
                    s.tags = repair_bio(s.tags)
            self.scheme = "BIOES" if any(tag_scheme(s.tags) == "BIOES"
                                         for s in self.sentences) else "BIO"
            if self.label_names is None:
                self.label_names = label_list([s.tags for s in self.sentences])
            ids = {n: i for i, n in enumerate(self.label_names)}
            unknown = {t for s in self.sentences for t in s.tags} - set(ids)
            if unknown:
                raise DataError(f"{path}: tags not seen in training: {sorted(unknown)}")
            self.encodings = encode_words(self.tok, [s.words for s in self.sentences],
                                          o.max_length)
            return [{**self._inputs(e.input_ids, e.token_type_ids),
                     "labels": align_labels(e.word_ids, [ids[t] for t in s.tags])}
                    for e, s in zip(self.encodings, self.sentences)]
        if t == "qa":
            self.examples = read_squad(path)
            self.features = prepare_windows(self.tok, self.examples, max_length=o.max_length,
                                            doc_stride=o.doc_stride,
                                            max_question_length=o.max_question_length)
            if self.label_names is None:
                self.label_names = ("start", "end")
            return [{**self._inputs(f.input_ids, f.token_type_ids),
                     "start_positions": f.start_position, "end_positions": f.end_position}
                    for f in self.features]
        # choice: JSONL {text, choices: [...], label: index}
        rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
                if line.strip()]
        self.label_names = self.label_names or ("score",)
        out = []
        for n, r in enumerate(rows, 1):
            if o.choices_column not in r or not r[o.choices_column]:
                raise DataError(f"{path}:{n}: no list of choices in {o.choices_column!r}")
            enc = self.tok([r[o.text_column]] * len(r[o.choices_column]), r[o.choices_column],
                           max_length=o.max_length, padding=False, return_tensors=None)
            row = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
            if "token_type_ids" in enc:
                row["token_type_ids"] = enc["token_type_ids"]
            if labelled:
                row["labels"] = int(r[o.label_column])
            out.append(row)
        self.choice_rows = rows
        return out

    def _inputs(self, ids: list[int], types: list[int] | None) -> dict:
        row = {"input_ids": list(ids), "attention_mask": [1] * len(ids)}
        if types is not None and self.tok.has_token_type_ids:
            row["token_type_ids"] = list(types)
        return row

    def _encode_table(self, labelled: bool) -> list[dict]:
        ex, o = self.examples, self.opts
        enc = self.tok([e.text for e in ex],
                       [e.text_pair or "" for e in ex] if o.text_pair_column else None,
                       max_length=o.max_length, padding=False, return_tensors=None)
        rows = [self._inputs(ids, enc["token_type_ids"][i] if "token_type_ids" in enc else None)
                for i, ids in enumerate(enc["input_ids"])]
        if not labelled:
            return rows
        if o.regression:
            self.label_names = ("score",)
            for r, e in zip(rows, ex):
                r["labels"] = float(e.label)
            return rows
        if self.label_names is None:
            self.label_names = tuple(sorted({str(e.label) for e in ex}))
        ids = {n: i for i, n in enumerate(self.label_names)}
        unknown = {str(e.label) for e in ex} - set(ids)
        if unknown:
            raise DataError(f"labels not seen in training: {sorted(unknown)}")
        for r, e in zip(rows, ex):
            r["labels"] = ids[str(e.label)]
        return rows

    # evaluation -------------------------------------------------------------------------------
    def evaluate(self, model, rows: list[dict]) -> tuple[dict[str, float], list[dict]]:
        """Metrics and per-example predictions of ``model`` on encoded ``rows`` of this data."""
        pad = self.tok.pad_token_id or 0
        outs = _run(model, rows, self.opts.eval_batch_size, pad)
        t = self.task
        if t in ("classify", "pair", "choice"):
            logits = torch.cat([o.logits for o in outs]).float()
            gold = [r["labels"] for r in rows]
            if logits.shape[-1] == 1 and t != "choice":
                pred = logits.squeeze(-1).tolist()
                return regression_metrics(gold, pred), [{"prediction": p} for p in pred]
            probs = logits.softmax(-1)
            pred = probs.argmax(-1).tolist()
            names = self.label_names if t != "choice" else None
            metrics = classification_metrics(gold, pred, labels=list(range(logits.shape[-1])))
            preds = [{"label": names[p] if names else p, "score": float(probs[i, p]),
                      "gold": names[g] if names else g}
                     for i, (p, g) in enumerate(zip(pred, gold))]
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
            return (entity_metrics(true, words_pred, self.scheme),
                    [{"words": s.words, "tags": p, "gold": s.tags}
                     for s, p in zip(self.sentences, words_pred)])
        # qa
        starts = [row for o in outs for row in o.start_logits.float().numpy()]
        ends = [row for o in outs for row in o.end_logits.float().numpy()]
        preds = postprocess(self.examples, self.features, starts, ends,
                            max_answer_length=self.opts.max_answer_length,
                            null_threshold=self.opts.null_threshold)
        answers = {ex.id: [a for a, _ in ex.answers] or [""] for ex in self.examples}
        metrics = squad_metrics({ex.id: p.answer.text for ex, p in zip(self.examples, preds)},
                                answers)
        return metrics, [{"id": ex.id, "answer": p.answer.text, "start": p.answer.start,
                          "end": p.answer.end, "score": p.answer.probability}
                         for ex, p in zip(self.examples, preds)]


# --- the driver ---------------------------------------------------------------------------------
def finetune(task: str, model_dir: str | Path, train_file: str | Path,
             eval_file: str | Path | None, output_dir: str | Path,
             opts: FinetuneOptions | None = None, **train_config: Any) -> dict[str, Any]:
    """Fine-tune a pretrained encoder on one task with the shared `Trainer`.

    Args:
        task: "classify", "pair", "ner", "qa" or "choice".
        model_dir: a Hugging Face model directory with a tokenizer (a base or a task model).
        train_file, eval_file: data files (see `TaskData.load`); with an eval file the best
            evaluation is kept in ``output_dir/best`` and early stopping can apply.
        output_dir: where everything is written.
        opts: data options (columns, lengths, batch size, epochs).
        train_config: `TrainConfig` fields (learning_rate, max_time_s, eval_every,
            early_stopping_patience, ...); ``max_steps`` defaults to ``epochs`` passes.

    Returns:
        {"train": trainer summary, "eval": final metrics on the eval file (best model),
         "labels": label names, "seconds": wall-clock}.

    Raises:
        ValueError (DataError, CheckpointError, ...): bad task, data or model directory.
    """
    from ..train import IndexedBatches, TrainConfig, Trainer

    t0 = time.time()
    opts = opts or FinetuneOptions()
    out = Path(output_dir)
    tok = load_tokenizer(model_dir)
    data = TaskData(task, tok, opts)
    train_rows = data.load(train_file)
    eval_data = eval_rows = None
    if eval_file is not None:
        eval_data = TaskData(task, tok, opts, label_names=data.label_names)
        eval_data.scheme = getattr(data, "scheme", "BIO")
        eval_rows = eval_data.load(eval_file)
    head = HEAD_OF_TASK[task]
    model = from_pretrained(model_dir, heads=[head], new_heads=True,
                            label_names=data.label_names)
    model.train()
    pad = tok.pad_token_id or 0
    batch_size = min(opts.batch_size, len(train_rows))
    source = IndexedBatches(train_rows, batch_size, lambda rows, rng: pad_batch(rows, pad))
    steps = int(train_config.get("max_steps") or max(1, int(opts.epochs * len(source))))

    def loss_fn(m, batch):
        out_ = m(**{k: v for k, v in batch.items() if k in MODEL_INPUTS})
        loss = task_loss(head, out_, batch)
        return loss, {}

    def eval_fn(m):
        metrics, _ = eval_data.evaluate(m, eval_rows)
        return metrics

    defaults = dict(max_steps=steps, learning_rate=5e-5, warmup_ratio=0.1,
                    batch_size=batch_size, log_every=max(1, min(50, steps // 10)))
    if eval_data is not None:
        defaults.update(metric_for_best=BEST_METRIC[task] if not opts.regression else "mse",
                        greater_is_better=not opts.regression, load_best_at_end=True,
                        eval_every=max(1, len(source)))
    config = TrainConfig(output_dir=out, **{**defaults, **train_config})
    summary = Trainer(model, loss_fn, source, config,
                      eval_fn if eval_data is not None else None).train()
    for d in ("model", "best"):
        if (out / d).is_dir():
            tok.save_pretrained(out / d)
    result: dict[str, Any] = {"train": summary, "labels": list(data.label_names)}
    if eval_data is not None:
        model.eval()
        metrics, preds = eval_data.evaluate(model, eval_rows)
        result["eval"] = metrics
        body = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds)
        atomic_write(out / "eval_predictions.jsonl", lambda tmp: tmp.write_text(body, "utf-8"))
        if task in ("classify", "pair") and hasattr(eval_data, "last_confusion"):
            confusion_png(*eval_data.last_confusion, data.label_names, out / "confusion_matrix.png")
    result["seconds"] = time.time() - t0
    text = json.dumps(result, indent=2, default=str)
    atomic_write(out / "final_metrics.json", lambda tmp: tmp.write_text(text))
    return result


def confusion_png(gold: list[int], pred: list[int], names, path: Path) -> Path:
    """Write the confusion matrix (rows: gold, columns: predicted) as a PNG, atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import confusion_matrix

    cm = confusion_matrix(gold, pred, labels=list(range(len(names))))
    fig, ax = plt.subplots(figsize=(1.2 * len(names) + 2, 1.2 * len(names) + 1.5))
    ax.imshow(cm, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    for i in range(len(names)):
        for j in range(len(names)):
            ax.text(j, i, str(cm[i, j]), ha="center", va="center",
                    color="white" if cm[i, j] > cm.max() / 2 else "black")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return path


def predict(task: str, model_dir: str | Path, file: str | Path,
            opts: FinetuneOptions | None = None, labelled: bool = False
            ) -> tuple[list[dict], dict[str, float] | None]:
    """Predictions of a fine-tuned model directory on a data file (and metrics when the file
    has labels and ``labelled``).

    Raises:
        ValueError: the model's head does not fit ``task``, or bad data.
    """
    opts = opts or FinetuneOptions()
    model = from_pretrained(model_dir).eval()
    if model.task != HEAD_OF_TASK[task]:
        raise ValueError(f"{model_dir} holds a {model.task!r} head; task {task!r} needs "
                         f"{HEAD_OF_TASK[task]!r}")
    tok = load_tokenizer(model_dir)
    data = TaskData(task, tok, opts, label_names=model.config.label_names)
    if task == "ner":
        data.scheme = "BIOES" if any(n[:2] in ("S-", "E-") for n in data.label_names) else "BIO"
    if task in ("classify", "pair") and not labelled:
        rows = data.load(file, labelled=False)
        outs = _run(model, rows, opts.eval_batch_size, tok.pad_token_id or 0)
        logits = torch.cat([o.logits for o in outs]).float()
        if logits.shape[-1] == 1:
            return [{"text": e.text, "score": float(v)} for e, v in
                    zip(data.examples, logits.squeeze(-1))], None
        probs = logits.softmax(-1)
        return [{"text": e.text, "label": data.label_names[int(p.argmax())],
                 "score": float(p.max())} for e, p in zip(data.examples, probs)], None
    rows = data.load(file)
    metrics, preds = data.evaluate(model, rows)
    return preds, metrics
