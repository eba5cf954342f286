"""`finetune()` and `predict()`: task data → batches → the shared `Trainer` → metrics.

Tasks: "classify" (one text), "pair" (two texts; the same head), "ner" (CoNLL), "qa" (SQuAD
JSON), "choice" (JSONL with a list of choices); data reading, encoding and evaluation live in
`bertfamily.tasks`. Outputs in ``TrainConfig.output_dir``: the trainer's ``metrics.jsonl``,
``checkpoint.pt``, ``model/`` and ``best/`` (each a Hugging Face directory with the tokenizer),
plus ``eval_predictions.jsonl``, ``final_metrics.json`` and, for classification,
``confusion_matrix.png``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..checkpoints.io import config_from_hf, read_hf_config
from ..data.batching import IndexedBatches
from ..data.tables import DataError, read_table
from ..data.task_data import (
    HEAD_OF_TASK,
    MODEL_INPUTS,
    TaskData,
    TaskOptions,
    best_metric,
    forward_rows,
    model_problem_type,
    pad_batch,
)
from ..files import atomic_write, write_text_atomic
from ..heads.losses import task_counts, task_loss
from ..pipelines.batching import input_limit
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from ..train.loop import TrainConfig, Trainer
from .common import finish_run, save_pretrained

__all__ = ["FINETUNE_TRAIN_DEFAULTS", "FinetuneConfig", "finetune", "predict", "confusion_png"]

log = logging.getLogger(__name__)

# The `TrainConfig` values fine-tuning is usually run with (the CLI's defaults): BERT's
# fine-tuning learning rate range (Devlin et al. 2019 §A.3) and 10 % warm-up.
FINETUNE_TRAIN_DEFAULTS: dict[str, Any] = {"learning_rate": 5e-5, "warmup_ratio": 0.1}


@dataclass
class FinetuneConfig:
    """What to fine-tune on (the optimisation lives in `TrainConfig`).

    Attributes:
        task: "classify", "pair", "ner", "qa" or "choice".
        model: a Hugging Face model directory with a tokenizer (a base or a task model).
        train_file / eval_file: data files (see `TaskData.load`); with an eval file the best
            evaluation is kept in ``output_dir/best`` and early stopping can apply.
        data: reading, encoding and evaluation options (`TaskOptions`), among them the
            classification problem type (single-label, multi-label, regression; inferred from
            the training labels when None), which the model's config.json then records.
        epochs: passes over the training data; sets ``max_steps`` (None: the TrainConfig's
            ``max_steps``).
        patience: stop after this many evaluations without improvement of the task metric
            (needs ``eval_file``); None: never.
    """

    task: str
    model: str | Path
    train_file: str | Path
    eval_file: str | Path | None = None
    data: TaskOptions = field(default_factory=TaskOptions)
    epochs: float | None = 3.0
    patience: int | None = None


def fit_max_length(opts: TaskOptions, config, tokenizer) -> TaskOptions:
    """``opts`` with ``max_length`` cut to the model's input limit (`pipelines.batching.
    input_limit`: the tokenizer's ``model_max_length`` capped by the position table), with a
    warning when it was longer; every task then runs on a model of any size."""
    limit = input_limit(config, tokenizer)
    if opts.max_length <= limit:
        return opts
    log.warning(
        "max_length %d is over the model's limit of %d tokens; using %d",
        opts.max_length,
        limit,
        limit,
    )
    return dataclasses.replace(opts, max_length=limit)


def finetune(cfg: FinetuneConfig, train: TrainConfig) -> dict[str, Any]:
    """Fine-tune a pretrained encoder on one task with the shared `Trainer`.

    ``train`` is used as given except for what depends on the data size: ``batch_size`` is
    capped at the number of training rows; ``max_steps`` comes from ``cfg.epochs`` when set;
    ``log_every`` 0 means max(1, min(50, steps // 10)); with an eval file, ``eval_every`` 0
    means once per epoch and, when ``metric_for_best`` is None, the best checkpoint is chosen
    by the task's metric (accuracy, F1; micro F1 for multi-label, mean squared error for
    regression) and loaded at the end. `FINETUNE_TRAIN_DEFAULTS` are the usual learning rate
    and warm-up.

    Returns:
        {"train": trainer summary, "eval": final metrics on the eval file (best model),
         "labels": label names, "problem_type": classify/pair only, "seconds": wall-clock}.

    Raises:
        ValueError (DataError, CheckpointError, ...): bad task, data or model directory.
    """
    t0 = time.time()
    out = Path(train.output_dir)
    tok = load_tokenizer(cfg.model)
    opts = fit_max_length(cfg.data, config_from_hf(read_hf_config(cfg.model)), tok)
    data = TaskData(cfg.task, tok, opts)
    train_rows = data.load(cfg.train_file)
    eval_data = eval_rows = None
    if cfg.eval_file is not None:
        eval_data = TaskData(
            cfg.task, tok, opts, label_names=data.label_names, problem_type=data.problem_type
        )
        eval_data.scheme = getattr(data, "scheme", "BIO")
        eval_rows = eval_data.load(cfg.eval_file)
    head = HEAD_OF_TASK[cfg.task]
    problem_type = data.problem_type if head == "classify" else None
    overrides: dict[str, Any] = {"label_names": data.label_names}
    if head == "classify":
        overrides["problem_type"] = problem_type
    model = from_pretrained(cfg.model, heads=[head], new_heads=True, **overrides)
    new_head = f"{head} head, {len(data.label_names or []) or 1} output(s)"
    log.info("new task head: initialised %s (normal for fine-tuning)", new_head)
    model.train()
    pad = tok.pad_token_id or 0
    batch_size = min(train.batch_size, len(train_rows))
    source = IndexedBatches(train_rows, batch_size, lambda rows, rng: pad_batch(rows, pad))
    left_out = len(train_rows) - len(source) * batch_size
    if left_out:  # every step sees a full batch; the data is reshuffled every epoch
        log.info(
            "each epoch trains on %d of %d examples: the last partial batch (%d) is left out "
            "(other examples every epoch, the data is reshuffled)",
            len(train_rows) - left_out,
            len(train_rows),
            left_out,
        )
    steps = max(1, int(cfg.epochs * len(source))) if cfg.epochs is not None else train.max_steps

    def loss_fn(m, batch, denominators):
        out_ = m(**{k: v for k, v in batch.items() if k in MODEL_INPUTS})
        loss = task_loss(head, out_, batch, problem_type, denominators)
        return loss, {}

    def count_fn(batch):  # the loss is normalised over the whole accumulated step
        return task_counts(head, batch)

    def eval_fn(m):
        metrics, _ = eval_data.evaluate(m, eval_rows)
        return metrics

    derived: dict[str, Any] = dict(max_steps=steps, batch_size=batch_size)
    if not train.log_every:
        derived["log_every"] = max(1, min(50, steps // 10))
    if cfg.patience is not None:
        if eval_data is None:
            raise ValueError("early stopping (patience) needs an evaluation file")
        derived["early_stopping_patience"] = cfg.patience
    if eval_data is not None:
        if not train.eval_every:
            derived["eval_every"] = max(1, len(source))
        if train.metric_for_best is None:
            metric, greater = best_metric(cfg.task, problem_type)
            derived.update(metric_for_best=metric, greater_is_better=greater, load_best_at_end=True)
    config = dataclasses.replace(train, **derived)
    summary = Trainer(
        model,
        loss_fn,
        source,
        config,
        eval_fn if eval_data is not None else None,
        save_fn=save_pretrained,
        count_fn=count_fn,
    ).train()
    result: dict[str, Any] = {"train": summary, "labels": list(data.label_names)}
    notes = list(summary.get("notes", []))  # e.g. stopped in warm-up
    if problem_type is not None:
        result["problem_type"] = problem_type
    if eval_data is not None:
        model.eval()
        metrics, preds = eval_data.evaluate(model, eval_rows)
        result["eval"] = metrics
        write_text_atomic(
            out / "eval_predictions.jsonl",
            "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds),
        )
        if problem_type == "single_label_classification" and hasattr(eval_data, "last_confusion"):
            confusion_png(*eval_data.last_confusion, data.label_names, out / "confusion_matrix.png")
            note = majority_note(*eval_data.last_confusion, data.label_names)
            if note:
                log.warning(note)
                notes.append(note)
    result["notes"] = notes
    result["seconds"] = time.time() - t0
    result["new_head"] = new_head
    result["left_out_per_epoch"] = left_out
    finish_run(out, tok, result, file="final_metrics.json")
    return result


def majority_note(gold: list[int], pred: list[int], names) -> str | None:
    """A warning when the predictions are no more accurate than always predicting the most
    frequent gold class (a model that learnt nothing, e.g. after too few steps), else None."""
    if not gold:
        return None
    top = max(set(gold), key=gold.count)
    baseline = gold.count(top) / len(gold)
    accuracy = sum(g == p for g, p in zip(gold, pred)) / len(gold)
    if accuracy > baseline:
        return None
    return (
        f"the model is no better than always predicting the majority class {names[top]!r} on "
        f"the eval file (accuracy {accuracy:.3f}, majority class {baseline:.3f}); train longer "
        "or check the data"
    )


def confusion_png(gold: list[int], pred: list[int], names, path: Path) -> Path:
    """Write the confusion matrix (rows: gold, columns: predicted) as a PNG, atomically.

    Args:
        gold / pred: class ids, one per example; names: the C class names.

    Raises:
        ImportError: matplotlib or scikit-learn is not installed.
    """
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
            ax.text(
                j,
                i,
                str(cm[i, j]),
                ha="center",
                va="center",
                color="white" if cm[i, j] > cm.max() / 2 else "black",
            )
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return path


def _is_text(file: str | Path, opts: TaskOptions) -> bool:
    """Whether ``file`` is read as plain text (``opts.format`` "text", or a .txt file)."""
    return opts.format == "text" or (opts.format is None and Path(file).suffix.lower() == ".txt")


def predict(
    task: str,
    model_dir: str | Path,
    file: str | Path,
    opts: TaskOptions | None = None,
    labelled: bool = False,
) -> tuple[list[dict], dict[str, float] | None]:
    """Predictions of a fine-tuned model directory on a data file (and metrics when the file
    has labels and ``labelled``).

    Every task reads plain text (a .txt file or ``opts.format == "text"``): one example a
    line, blank lines skipped; classify: the text; pair: text TAB second text; ner: the raw
    sentence; qa: question TAB context; choice: context TAB choice TAB choice... Rows carry
    ``"line"``, the example's 1-based line in the file (CSV/TSV/JSONL and text files).

    Classification ("classify", "pair") follows the model's ``problem_type`` (config.json;
    None: regression for one label, else single-label): single-label rows are
    ``{"text", "label", "score"}`` (softmax probability of the best class); multi-label rows
    ``{"text", "labels": [{"label", "score"}, ...]}`` with every label whose sigmoid score is
    over ``opts.threshold``, best first (possibly none); regression rows
    ``{"text", "value", "score"}`` (the predicted value, twice). NER on text: ``{"text",
    "entities": [{"type", "text", "start", "end", "score"}]}`` with character offsets into
    the line (as `EntityTagger`); on CoNLL: ``{"words", "tags", "gold"}``. QA on text:
    ``{"question", "answer", "start", "end", "score"}`` (offsets into the context). Choice:
    ``{"label": index of the best choice, "score"}``.

    Returns:
        (one dict per example, metrics or None; metrics only when ``labelled``).

    Raises:
        ValueError: the model's head does not fit ``task``, bad data (DataError), or
            ``labelled`` with a plain text file (which holds no labels).
    """
    opts = opts or TaskOptions()
    model = from_pretrained(model_dir).eval()
    if model.task != HEAD_OF_TASK[task]:
        raise ValueError(
            f"{model_dir} holds a {model.task!r} head; task {task!r} needs {HEAD_OF_TASK[task]!r}"
        )
    tok = load_tokenizer(model_dir)
    opts = fit_max_length(opts, model.config, tok)
    if task in ("ner", "qa") and _is_text(file, opts):
        if labelled:
            raise DataError(
                f"{file}: a plain text file holds no labels; --labelled needs "
                f"{'CoNLL' if task == 'ner' else 'SQuAD JSON'} data"
            )
        return _predict_raw_text(task, model_dir, file, opts), None
    kind = model_problem_type(model.config) if task in ("classify", "pair") else None
    data = TaskData(task, tok, opts, label_names=model.config.label_names, problem_type=kind)
    if task == "ner":
        data.scheme = "BIOES" if any(n[:2] in ("S-", "E-") for n in data.label_names) else "BIO"
    if task == "choice" and not labelled:
        rows = data.load(file, labelled=False)
        outs = forward_rows(model, rows, opts.eval_batch_size, tok.pad_token_id or 0)
        preds = []
        scores = (row for out in outs for row in out.logits.float())
        for r, logit in zip(data.choice_rows, scores):
            p = logit.softmax(-1)
            preds.append(
                {
                    **({"line": r["line"]} if "line" in r else {}),
                    "label": int(p.argmax()),
                    "score": float(p.max()),
                }
            )
        return preds, None
    if task in ("classify", "pair") and not labelled:
        rows = data.load(file, labelled=False)
        outs = forward_rows(model, rows, opts.eval_batch_size, tok.pad_token_id or 0)
        logits = torch.cat([o.logits for o in outs]).float()
        names = data.label_names
        if kind == "regression":
            return [
                {"line": e.line, "text": e.text, "value": float(v), "score": float(v)}
                for e, v in zip(data.examples, logits[:, 0])
            ], None
        if kind == "multi_label_classification":
            out = []
            for e, p in zip(data.examples, logits.sigmoid().tolist()):
                over = sorted(
                    ((s, j) for j, s in enumerate(p) if s > opts.threshold), key=lambda x: -x[0]
                )
                out.append(
                    {
                        "line": e.line,
                        "text": e.text,
                        "labels": [{"label": names[j], "score": s} for s, j in over],
                    }
                )
            return out, None
        probs = logits.softmax(-1)
        return [
            {
                "line": e.line,
                "text": e.text,
                "label": names[int(p.argmax())],
                "score": float(p.max()),
            }
            for e, p in zip(data.examples, probs)
        ], None
    rows = data.load(file)  # CoNLL / SQuAD hold their labels; metrics only when asked for
    metrics, preds = data.evaluate(model, rows)
    return preds, metrics if labelled else None


def _predict_raw_text(task: str, model_dir, file, opts: TaskOptions) -> list[dict]:
    """NER or QA predictions on a plain text file (see `predict`), through the pipelines."""
    from ..pipelines.ner import EntityTagger
    from ..pipelines.qa import QuestionAnswerer

    examples = read_table(
        file,
        label_column=None,
        text_pair_column="context" if task == "qa" else None,
        format="text",
    )
    if task == "ner":
        tagger = EntityTagger(model_dir, max_length=opts.max_length)
        found = tagger([e.text for e in examples], batch_size=opts.eval_batch_size)
        return [
            {"line": e.line, "text": e.text, "entities": [dataclasses.asdict(x) for x in ents]}
            for e, ents in zip(examples, found)
        ]
    qa = QuestionAnswerer(
        model_dir,
        max_length=opts.max_length,
        doc_stride=opts.stride,
        max_question_length=opts.max_question_length,
    )
    out = []
    for e in examples:
        (a,) = qa(
            e.text,
            e.text_pair,
            max_answer_length=opts.max_answer_length,
            null_threshold=opts.null_threshold,
        )
        out.append(
            {
                "line": e.line,
                "question": e.text,
                "answer": a.text,
                "start": a.start,
                "end": a.end,
                "score": a.probability,
            }
        )
    return out
