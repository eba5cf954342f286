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
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..checkpoints.io import config_from_hf, read_hf_config
from ..data.batching import IndexedBatches
from ..data.tables import DataError, read_table, read_text, text_lines
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
from ..data.text_input import check_input_file, is_stdin
from ..errors import InputError
from ..files import atomic_write, write_text_atomic
from ..heads.losses import task_counts, task_loss
from ..inference.limits import input_limit
from ..notices import waiting
from ..pretrained import from_pretrained
from ..tokenization.tokenizer import load_tokenizer
from ..train.loop import TrainConfig, Trainer
from ..train.rundir import locks_run_directory, seed_all
from .common import finish_run, save_pretrained, train_config
from .defaults import TRAIN_DEFAULTS

__all__ = ["FINETUNE_TRAIN_DEFAULTS", "FinetuneConfig", "finetune", "predict", "confusion_png"]

log = logging.getLogger(__name__)

# The `TrainConfig` values fine-tuning is run with by default (`recipes.defaults`).
FINETUNE_TRAIN_DEFAULTS: dict[str, Any] = TRAIN_DEFAULTS["finetune"]


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
        self_distill: classify only: after fine-tuning, freeze the model and train FastBERT's
            student classifiers (Liu et al. 2020 §3.2) by KL divergence to the fine-tuned
            head on unlabeled text; they are saved beside the weights (``early_exit.*`` in
            ``best/``, or ``model/`` without an eval file) for ``predict --speed``.
        distill_file: the unlabeled texts for self-distillation (the ``text_column`` of a
            table, or a plain text file, one text per line); None: the training texts (their
            labels unread).
        distill_steps: self-distillation optimizer steps; None: as many as fine-tuning took.
        distill_learning_rate: the students' peak learning rate (they start from scratch).
        speeds: the speed thresholds the students are evaluated at on the eval file.
        knowledge: "classify" only: ``"wordnet"`` or a TSV triple file
            (`data.knowledge.load_knowledge`) injected into every text as K-BERT does (Liu et
            al. 2020 §3); predict with the same ``knowledge``. None: none.
    """

    task: str
    model: str | Path
    train_file: str | Path
    eval_file: str | Path | None = None
    data: TaskOptions = field(default_factory=TaskOptions)
    epochs: float | None = 3.0
    patience: int | None = None
    self_distill: bool = False
    distill_file: str | Path | None = None
    distill_steps: int | None = None
    distill_learning_rate: float = 1e-3
    speeds: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 0.8)
    knowledge: str | Path | None = None


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


def finetune(
    cfg: FinetuneConfig,
    train: TrainConfig | None = None,
    *,
    on_labels: Callable[[dict[str, int], list[str]], None] | None = None,
    **train_fields: Any,
) -> dict[str, Any]:
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

    The run directory is locked while the run writes it (`run_lock`); the task head is built
    after ``train.seed`` is applied, so two fresh runs with one seed give the same weights.

    Raises:
        ValueError (DataError, CheckpointError, ...): bad task, data or model directory;
            RunDirectoryError: another run is writing ``train.output_dir``.

    ``train``: the run's `TrainConfig`; or pass its fields as keywords instead
    (``output_dir=..., max_steps=...``): they start from ``TRAIN_DEFAULTS["finetune"]``, the
    command line's defaults, so the same arguments make the same run.

    ``on_labels``: called before training with the training labels (name → rows, for
    classify and pair) and the notes on them (`data.task_data.label_report`: a label seen once
    among thousands, labels differing only in case); the command line prints them. The label
    set is also logged (the notes as warnings) and in the result (``"label_counts"``,
    ``"label_notes"``).
    """
    return _finetune(cfg, train_config("finetune", train, **train_fields), on_labels)


@locks_run_directory
def _finetune(cfg: FinetuneConfig, train: TrainConfig, on_labels=None) -> dict[str, Any]:
    """`finetune` with its `TrainConfig` resolved, under the run directory's lock."""
    t0, began = time.time(), time.monotonic()  # --max-time counts from here
    opts = cfg.data
    if cfg.self_distill and HEAD_OF_TASK[cfg.task] != "classify":
        raise InputError(f"--self-distill is for classification tasks, not {cfg.task!r}")
    model_config = config_from_hf(read_hf_config(cfg.model))
    if cfg.knowledge is not None:
        opts = with_knowledge(opts, cfg.knowledge, model_config)
    out = Path(train.output_dir)
    tok = load_tokenizer(cfg.model)
    opts = fit_max_length(opts, model_config, tok)
    data = TaskData(cfg.task, tok, opts)
    with waiting(f"reading and tokenizing {Path(cfg.train_file).name}"):
        train_rows = data.load(cfg.train_file)
    if data.label_counts is not None:
        log.info(
            "labels (%d): %s",
            len(data.label_counts),
            ", ".join(f"{k} {v}" for k, v in data.label_counts.items()),
        )
        if on_labels is not None:
            on_labels(data.label_counts, data.label_notes)
    eval_data = eval_rows = None
    if cfg.eval_file is not None:
        eval_data = TaskData(
            cfg.task, tok, opts, label_names=data.label_names, problem_type=data.problem_type
        )
        eval_data.scheme = getattr(data, "scheme", "BIO")
        with waiting(f"reading and tokenizing {Path(cfg.eval_file).name}"):
            eval_rows = eval_data.load(cfg.eval_file)
    head = HEAD_OF_TASK[cfg.task]
    problem_type = data.problem_type if head == "classify" else None
    if eval_data is not None:
        _require_eval_packages(cfg.task, problem_type)
    overrides: dict[str, Any] = {"label_names": data.label_names}
    if head == "classify":
        overrides["problem_type"] = problem_type
    seed_all(train.seed)  # the new head's weights depend on the seed alone
    with waiting(f"loading {Path(cfg.model).name}"):
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
    if train.budget_start is None:  # the whole command's budget: data and model load count
        derived["budget_start"] = began
    if not train.log_every:
        derived["log_every"] = max(1, min(50, steps // 10))
    if cfg.patience is not None:
        if eval_data is None:
            raise InputError("early stopping (patience) needs an evaluation file")
        derived["early_stopping_patience"] = cfg.patience
    if eval_data is not None:
        # the starting model is evaluated once: a run that makes it worse keeps it as best;
        # the predictions' evaluation after training is planned into --max-time
        derived.update(eval_at_start=True, evals_after=1)
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
        note = no_entity_note(metrics) if cfg.task == "ner" else None
        if note:
            log.warning(note)
            notes.append(note)
    if cfg.self_distill:
        texts = train_rows
        if cfg.distill_file is not None:
            texts = TaskData(cfg.task, tok, opts, label_names=data.label_names).load(
                cfg.distill_file, labelled=False
            )
        result["self_distill"] = self_distill(
            model, texts, config, out, cfg, pad, eval_data=eval_data, eval_rows=eval_rows
        )
    result["notes"] = notes
    if data.label_counts is not None:
        result["label_counts"] = data.label_counts
        result["label_notes"] = data.label_notes
    result["seconds"] = time.time() - t0
    result["new_head"] = new_head
    result["left_out_per_epoch"] = left_out
    finish_run(out, tok, result, file="final_metrics.json")
    return result


def with_knowledge(opts: TaskOptions, knowledge, config) -> TaskOptions:
    """``opts`` with the knowledge graph of ``knowledge`` ("wordnet", a TSV file or a loaded
    `KnowledgeGraph`) and ``config``'s first position (see `TaskOptions`)."""
    from ..data.knowledge import KnowledgeGraph, load_knowledge

    graph = knowledge if isinstance(knowledge, KnowledgeGraph) else load_knowledge(knowledge)
    log.info("knowledge: %d entities", len(graph))
    return dataclasses.replace(opts, knowledge=graph, position_start=config.position_offset)


def self_distill(
    model,
    rows: list[dict],
    train: TrainConfig,
    out: Path,
    cfg: FinetuneConfig,
    pad: int,
    *,
    eval_data: TaskData | None = None,
    eval_rows: list[dict] | None = None,
) -> dict[str, Any]:
    """FastBERT's self-distillation stage (Liu et al. 2020 §3.2) of a fine-tuned ``model``:
    students for its layers 1 … L-1 trained by `SelfDistillation` on ``rows`` (labels, if
    any, unread) with the shared `Trainer` in ``out/self_distill``, then saved beside the
    weights (``out/best`` when it exists, else ``out/model``).

    Returns:
        {"trainer": summary, "saved_in": directory, "steps": n, "eval": [per speed:
        {"speed", accuracy/metrics, "mean_exit_layer", "layer_fraction"}] with an eval set}.
    """
    from ..heads.early_exit import StudentClassifiers, save_students
    from ..objectives.self_distillation import SelfDistillation
    from ..pipelines.tasks.early_exit import EarlyExitModel

    L = len(model.encoder.schedule)
    students = StudentClassifiers(L, model.config.hidden_size, model.config.num_labels)
    objective = SelfDistillation(model, students)
    inputs = [{k: v for k, v in r.items() if k in MODEL_INPUTS} for r in rows]
    batch_size = min(train.batch_size, len(inputs))
    source = IndexedBatches(inputs, batch_size, lambda rs, rng: pad_batch(rs, pad))
    steps = cfg.distill_steps or train.max_steps
    config = dataclasses.replace(
        train,
        output_dir=out / "self_distill",
        max_steps=steps,
        batch_size=batch_size,
        learning_rate=cfg.distill_learning_rate,
        eval_every=0,
        metric_for_best=None,
        load_best_at_end=False,
        early_stopping_patience=None,
    )
    log.info("self-distillation: %d students, %d steps on %d texts", L - 1, steps, len(inputs))
    summary = Trainer(objective, lambda m, b, *_: m(**b), source, config).train()
    students.eval()
    target = out / "best" if (out / "best").is_dir() else out / "model"
    save_students(students, target)
    result: dict[str, Any] = {"trainer": summary, "saved_in": str(target), "steps": steps}
    if eval_data is not None:
        model.eval()
        result["eval"] = []
        for speed in cfg.speeds:
            runner = EarlyExitModel(model, students, speed)
            metrics, _ = eval_data.evaluate(runner, eval_rows)
            mean = runner.mean_exit_layer()
            result["eval"].append(
                {"speed": speed, **metrics, "mean_exit_layer": mean, "layer_fraction": mean / L}
            )
    return result


def no_entity_note(metrics: dict[str, Any]) -> str | None:
    """The warning for a NER model that found no entity of the eval file (entity F1 0: no
    better than tagging every word O), or None."""
    if metrics.get("f1") != 0.0:
        return None
    return (
        "the model tagged no entity of the eval file right (entity F1 0.0): it is no better "
        "than tagging every word O; train longer (--max-time, --epochs) or with a larger "
        "learning rate"
    )


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


def _require_eval_packages(task: str, problem_type: str | None) -> None:
    """Fail before training, not at the first evaluation, when a package that the task's eval
    metrics or its confusion-matrix plot import is missing.

    Raises:
        MissingDependency: scikit-learn, seqeval or matplotlib (the ``train`` extra).
    """
    from ..runtime import require

    feature = f"evaluating --task {task} (--eval)"
    if task == "ner":
        require("seqeval.metrics", "train", feature)
    elif task == "choice" or problem_type == "single_label_classification":
        require("sklearn.metrics", "train", feature)
        if task != "choice":  # confusion_matrix.png
            require("matplotlib", "train", feature)


def confusion_png(gold: list[int], pred: list[int], names, path: Path) -> Path:
    """Write the confusion matrix (rows: gold, columns: predicted) as a PNG, atomically.

    Args:
        gold / pred: class ids, one per example; names: the C class names.

    Raises:
        MissingDependency: matplotlib or scikit-learn is not installed (the ``train`` extra;
            an `ImportError`).
    """
    from ..runtime import require

    feature = "the confusion-matrix plot"
    confusion_matrix = require("sklearn.metrics", "train", feature).confusion_matrix
    require("matplotlib", "train", feature).use("Agg")
    plt = require("matplotlib.pyplot", "train", feature)

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


# What `predict` reads for NER and QA, for the message that refuses anything else.
_RAW_FORMATS = {
    "qa": 'SQuAD JSON ({"data": [{"paragraphs": ...}]}) or plain text, one question TAB '
    "context a line",
    "ner": "CoNLL (one word and its tag a line, a blank line between sentences) or plain "
    "text, one raw sentence a line",
}
_CONLL_TAG = re.compile(r"^(O|[BIESLU]-\S+|[BIESLU]|-X-)$")
_SNIFF_BYTES = 1 << 16


def _is_text(file: str | Path, opts: TaskOptions, task: str = "qa") -> bool:
    """Whether NER/QA ``file`` is plain text rather than CoNLL / SQuAD JSON: ``opts.format``
    "text", a .txt name, else by its content, whatever its name (.tsv, .text, none): QA
    text when it does not start with ``{``; NER text when some line of its first 64 KiB is
    not ``word ... TAG`` with a BIO/BIOES tag as its last field. Standard input follows
    the name rule (it is read once).

    Raises:
        DataError: QA text without a TAB on its first line: neither format (both named).
    """
    if opts.format is not None or is_stdin(file):
        return opts.format == "text"
    if Path(file).suffix.lower() == ".txt":
        return True
    check_input_file(file)
    with open(file, "rb") as fh:
        head = fh.read(_SNIFF_BYTES).decode("utf-8", errors="replace").lstrip("\ufeff")
    lines = [line for line in head.splitlines()[:-1] or head.splitlines() if line.strip()]
    if task == "ner":
        return not all(
            len(line.split()) >= 2 and _CONLL_TAG.match(line.split()[-1]) for line in lines
        )
    if head.lstrip().startswith("{"):
        return False
    if not lines or "\t" not in lines[0]:
        raise DataError(
            f"{file}: qa reads {_RAW_FORMATS['qa']} (any file name); this is neither: its "
            "first line has no TAB"
        )
    return True


def predict(
    task: str,
    model_dir: str | Path,
    file: str | Path,
    opts: TaskOptions | None = None,
    labelled: bool = False,
    *,
    speed: float | None = None,
    knowledge=None,
) -> tuple[list[dict], dict[str, float] | None]:
    """Predictions of a fine-tuned model directory on a data file (and metrics when the file
    has labels and ``labelled``).

    Every task reads plain text (a .txt file, ``opts.format == "text"``, or for NER and QA
    a file whose content is not CoNLL / SQuAD JSON, whatever its name): one example a
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

    ``speed`` (classify/pair, a self-distilled directory): FastBERT's adaptive early exit at
    this threshold in [0, 1] (`pipelines.early_exit`); every row then also carries
    ``exit_layer``, and the metrics ``mean_exit_layer``. ``knowledge`` (classify): the
    knowledge graph the model was fine-tuned with (see `FinetuneConfig.knowledge`).

    Returns:
        (one dict per example, metrics or None; metrics only when ``labelled``).

    Raises:
        ValueError: the model's head does not fit ``task``, bad data (DataError), or
            ``labelled`` with a plain text file (which holds no labels); ``speed`` for a
            directory without students (ModelDirectoryError) or another task.
    """
    opts = opts or TaskOptions()
    model = from_pretrained(model_dir).eval()
    if knowledge is not None:
        opts = with_knowledge(opts, knowledge, model.config)
    runner = model
    if speed is not None:
        from ..heads.early_exit import load_students
        from ..pipelines.tasks.early_exit import EarlyExitModel

        if task not in ("classify", "pair"):
            raise InputError(f"--speed (early exit) is for classify/pair, not {task!r}")
        runner = EarlyExitModel(model, load_students(model_dir), speed)
    if model.task != HEAD_OF_TASK[task]:
        raise InputError(
            f"{model_dir} holds a {model.task!r} head; task {task!r} needs {HEAD_OF_TASK[task]!r}"
        )
    tok = load_tokenizer(model_dir)
    opts = fit_max_length(opts, model.config, tok)
    if task in ("ner", "qa") and _is_text(file, opts, task):
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
        outs = forward_rows(runner, rows, opts.eval_batch_size, tok.pad_token_id or 0)
        logits = torch.cat([o.logits for o in outs]).float()
        if speed is not None:
            preds, _ = _classify_rows(data, logits, kind, opts)
            return [{**p, "exit_layer": int(o.exit_layers)} for p, o in zip(preds, outs)], None
        return _classify_rows(data, logits, kind, opts)
    rows = data.load(file)  # CoNLL / SQuAD hold their labels; metrics only when asked for
    if speed is None:
        metrics, preds = data.evaluate(model, rows)
        return preds, metrics if labelled else None
    outs = forward_rows(runner, rows, opts.eval_batch_size, tok.pad_token_id or 0)
    metrics, preds = data.evaluate(runner, rows, outs=outs)
    metrics["mean_exit_layer"] = runner.mean_exit_layer()
    rows_out = [{**p, "exit_layer": int(o.exit_layers)} for p, o in zip(preds, outs)]
    return rows_out, metrics if labelled else None


def _classify_rows(data: TaskData, logits: torch.Tensor, kind: str | None, opts: TaskOptions):
    """Unlabelled classification predictions (see `predict`) of (N, C) ``logits``."""
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
        {"line": e.line, "text": e.text, "label": names[int(p.argmax())], "score": float(p.max())}
        for e, p in zip(data.examples, probs)
    ], None


def _predict_raw_text(task: str, model_dir, file, opts: TaskOptions) -> list[dict]:
    """NER or QA predictions on a plain text file (see `predict`), through the pipelines."""
    from ..pipelines.tasks.ner import EntityTagger
    from ..pipelines.tasks.qa import QuestionAnswerer

    examples = read_table(
        file,
        label_column=None,
        text_pair_column="context" if task == "qa" else None,
        format="text",
    )
    if task == "ner":
        # each line as it is in the file (leading spaces kept), so the offsets index the line
        lines = text_lines(read_text(file))
        texts = [lines[e.line - 1] for e in examples]
        tagger = EntityTagger(model_dir, max_length=opts.max_length)
        found = tagger(texts, batch_size=opts.eval_batch_size)
        return [
            {"line": e.line, "text": t, "entities": [dataclasses.asdict(x) for x in ents]}
            for e, t, ents in zip(examples, texts, found)
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
