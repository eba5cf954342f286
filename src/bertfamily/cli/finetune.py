"""`bertfamily finetune` and `bertfamily predict`: task fine-tuning and prediction."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from ..errors import InputError
from .common import (
    THREADS_HELP,
    App,
    compute_threads,
    err,
    handle_errors,
    print_json,
    training_threads,
    write_jsonl,
)
from .options import TrainOptions, training_options

commands = App()

KNOWLEDGE_HELP = (
    "classify: inject knowledge-graph triples as K-BERT does: 'wordnet' (the fetched "
    "WordNet 3.0) or a TSV file head<TAB>relation<TAB>tail; predict with the same."
)


TASK_HELP = "Task: classify | pair | ner | qa | choice | embedding | rerank | colbert."


TEXT_HELP = "Column of the text (CSV/TSV/JSONL)."


PAIR_HELP = "Column of the second text (pair tasks)."


LABEL_HELP = "Column of the label."


LENGTH_HELP = "Tokens per example (longer inputs are truncated; qa: windows)."


FORMAT_HELP = (
    "Data format: csv, tsv, jsonl or text (one text a line; pair: text TAB text; ner: raw "
    "sentences; qa: question TAB context; choice: context TAB choices); default: from the "
    "suffix (.csv .tsv .jsonl/.json .txt); ner and qa: .txt is text, any other name by its "
    "content (ner: CoNLL or raw sentences; qa: SQuAD JSON or question TAB context)."
)


NULL_HELP = (
    "qa: answer nothing when the no-answer score beats the best span by this margin "
    "(default: always answer)."
)


# finetune's options that take more than a line, declared once here to keep its signature short
MODEL_OPTION = typer.Option(
    None,
    help="Pretrained model: directory, resource or cached org/name (default all-MiniLM-L6-v2).",
)
EVAL_OPTION = typer.Option(None, help="Evaluation file: best checkpoint, early stopping, metrics.")
OUTPUT_OPTION = typer.Option(
    Path("runs/finetune"),
    "--output",
    "-o",
    help="Run directory: metrics.jsonl, loss.png, model/ (and best/ with --eval).",
)
EPOCHS_OPTION = typer.Option(
    3.0, min=0.01, help="Passes over the data (when --max-steps is not given)."
)
PROBLEM_TYPE_OPTION = typer.Option(
    None,
    help="classify/pair: single_label_classification, multi_label_classification (labels "
    "as a JSON list or joined by --label-separator) or regression; default: inferred "
    "from the labels.",
)
THRESHOLD_OPTION = typer.Option(
    0.5, min=0.0, max=1.0, help="Multi-label: a label is predicted over this sigmoid score."
)
SELF_DISTILL_OPTION = typer.Option(
    False,
    help="classify/pair: then train FastBERT's per-layer students by KL to the fine-tuned "
    "head on unlabeled text (for predict --speed).",
)
DISTILL_FILE_OPTION = typer.Option(
    None, help="--self-distill: unlabeled texts (default: the training texts)."
)
DISTILL_STEPS_OPTION = typer.Option(
    None, min=1, help="--self-distill: optimizer steps (default: as many as fine-tuning)."
)
LOSS_OPTION = typer.Option(
    None,
    help="embedding: mnrl | mnrl_symmetric | cached_mnrl | cosent | cosine | simcse "
    "(default mnrl); rerank: bce (default) | listnet (listwise, rows grouped by query) | "
    "mnrl (in-batch negatives); colbert: contrastive (default) | distillation.",
)
MATRYOSHKA_OPTION = typer.Option(
    None, help="embedding: wrap the loss in Matryoshka over these dims, e.g. 384,256,128,64."
)
MIN_SCORE_OPTION = typer.Option(
    None, help="embedding: keep only rows with a label >= this (e.g. STS pairs as positives)."
)
MAX_SEQ_LENGTH_OPTION = typer.Option(
    None, min=8, help="embedding/rerank: tokens per text (default: the model's)."
)
SCALE_OPTION = typer.Option(
    None,
    min=1e-6,
    help="embedding MNRL/CoSENT similarity scale (default 20); rerank mnrl: the scale of "
    "the sigmoid scores (default 10).",
)
NUM_NEGATIVES_OPTION = typer.Option(
    4,
    min=1,
    help="rerank mnrl: in-batch negatives sampled per query (all of them when the batch "
    "has no more).",
)
SHUFFLE_OPTION = typer.Option(
    True,
    help="embedding/rerank: reshuffle the rows every epoch (--no-shuffle: the file's order).",
)
TRAIN_FORMAT_OPTION = typer.Option(
    None, help="embedding/rerank: 'sts' for STS Benchmark TSV files (stsb:SPLIT implies it)."
)

LORA_OPTION = typer.Option(
    False,
    help="embedding: train a LoRA adapter only (the encoder frozen); model/ and best/ are PEFT "
    "adapter directories (load with --adapter, or peft.PeftModel.from_pretrained).",
)
LORA_R_OPTION = typer.Option(8, "--lora-r", min=1, help="--lora: the rank r.")
LORA_ALPHA_OPTION = typer.Option(16.0, min=1e-6, help="--lora: alpha (updates scaled by alpha/r).")
LORA_DROPOUT_OPTION = typer.Option(
    0.0, min=0.0, max=0.99, help="--lora: dropout on the adapted layers' inputs."
)
LORA_TARGETS_OPTION = typer.Option(
    "query,value",
    help="--lora: Hugging Face module names to adapt, joined by ',' (a module matches when its "
    "name ends with one, as in PEFT), e.g. query,key,value,dense.",
)
LORA_MERGE_OPTION = typer.Option(
    False, help="--lora: save whole models with the update merged in, not adapters."
)

QUERY_LENGTH_OPTION = typer.Option(
    32, min=3, help="colbert: tokens per query ([Q] and the [MASK] expansion included)."
)
DOCUMENT_LENGTH_OPTION = typer.Option(
    180, min=3, help="colbert: at most this many tokens a document."
)
COLBERT_DIM_OPTION = typer.Option(128, min=1, help="colbert: the size of each token vector.")
TEMPERATURE_OPTION = typer.Option(
    1.0, min=1e-6, help="colbert contrastive: the MaxSim scores are divided by it."
)


@commands.command()
@handle_errors
# weight decay None: the recipe's (finetune 0.01; embedding/rerank 0, as sentence-transformers)
@training_options("finetune", max_steps=None, eval_every=None, log_every=None, weight_decay=None)
def finetune(
    task: str = typer.Option(..., help=TASK_HELP),
    model: str | None = MODEL_OPTION,
    train: Path = typer.Option(..., help="Training file (CSV/TSV/JSONL, CoNLL, SQuAD JSON)."),
    eval: Path | None = EVAL_OPTION,
    output: Path = OUTPUT_OPTION,
    text_column: str = typer.Option("text", help=TEXT_HELP),
    text_pair_column: str | None = typer.Option(None, help=PAIR_HELP),
    label_column: str = typer.Option("label", help=LABEL_HELP),
    max_length: int = typer.Option(128, min=8, help=LENGTH_HELP),
    epochs: float = EPOCHS_OPTION,
    training: TrainOptions = None,
    patience: int | None = typer.Option(None, min=1, help="Early-stopping patience (evals)."),
    regression: bool = typer.Option(False, help="Same as --problem-type regression."),
    problem_type: str | None = PROBLEM_TYPE_OPTION,
    label_separator: str = typer.Option("|", help="Joins the labels of a multi-label cell."),
    threshold: float = THRESHOLD_OPTION,
    null_threshold: float | None = typer.Option(None, help=NULL_HELP),
    self_distill: bool = SELF_DISTILL_OPTION,
    distill_file: Path | None = DISTILL_FILE_OPTION,
    distill_steps: int | None = DISTILL_STEPS_OPTION,
    knowledge: str | None = typer.Option(None, help=KNOWLEDGE_HELP),
    fmt: str | None = typer.Option(None, "--format", help=FORMAT_HELP),
    loss: str | None = LOSS_OPTION,
    matryoshka_dims: str | None = MATRYOSHKA_OPTION,
    min_score: float | None = MIN_SCORE_OPTION,
    max_seq_length: int | None = MAX_SEQ_LENGTH_OPTION,
    mini_batch_size: int = typer.Option(32, min=1, help="cached_mnrl: rows per mini-batch."),
    scale: float | None = SCALE_OPTION,
    num_negatives: int = NUM_NEGATIVES_OPTION,
    shuffle: bool = SHUFFLE_OPTION,
    train_format: str | None = TRAIN_FORMAT_OPTION,
    lora: bool = LORA_OPTION,
    lora_r: int = LORA_R_OPTION,
    lora_alpha: float = LORA_ALPHA_OPTION,
    lora_dropout: float = LORA_DROPOUT_OPTION,
    lora_targets: str = LORA_TARGETS_OPTION,
    lora_merge: bool = LORA_MERGE_OPTION,
    query_length: int = QUERY_LENGTH_OPTION,
    document_length: int = DOCUMENT_LENGTH_OPTION,
    colbert_dim: int = COLBERT_DIM_OPTION,
    temperature: float = TEMPERATURE_OPTION,
):
    """Fine-tune an encoder on a task; writes metrics.jsonl, best/, model/, confusion PNG.

    --task embedding trains a sentence-embedding model (sentence-transformers directories in
    model/ and best/); --task rerank a cross-encoder. --train/--eval also take stsb:train,
    stsb:dev, stsb:test (the fetched STS Benchmark); with --lora, a LoRA adapter only."""
    spec = _lora_spec(task, lora, lora_r, lora_alpha, lora_dropout, lora_targets, lora_merge)
    if task == "colbert":  # late interaction (recipes/colbert.py)
        return _colbert_task(
            model, str(train), output, training, epochs, loss, min_score, train_format, shuffle,
            query_length, document_length, colbert_dim, temperature,
        )  # fmt: skip
    if task in ("embedding", "rerank"):
        return _pair_task(
            task, model, str(train), None if eval is None else str(eval), output, training,
            epochs, loss, matryoshka_dims, min_score, max_seq_length, mini_batch_size, scale,
            train_format, num_negatives, shuffle, spec, lora_merge,
        )  # fmt: skip
    from ..data.task_data import TaskOptions
    from ..recipes.finetune import FinetuneConfig
    from ..recipes.finetune import finetune as run
    from .common import model_path

    # log_every 0: a tenth of the run (see `recipes.finetune.finetune`)
    fields = training.train_config_fields()
    data = TaskOptions(
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        max_length=max_length,
        regression=regression,
        problem_type=problem_type,
        label_separator=label_separator,
        threshold=threshold,
        null_threshold=null_threshold,
        format=fmt,
    )
    cfg = FinetuneConfig(
        task,
        model_path(model),
        train,
        eval,
        data,
        epochs=None if "max_steps" in fields else epochs,
        patience=patience,
        self_distill=self_distill,
        distill_file=distill_file,
        distill_steps=distill_steps,
        knowledge=knowledge,
    )
    with training_threads(training.threads):
        res = run(cfg, output_dir=output, on_labels=_show_labels, **fields)
    _report_finetune(res, output, eval)


def _lora_spec(task, lora, r, alpha, dropout, targets, merge):
    """The `LoraSpec` of --lora (None without it); --lora-* options without --lora, and
    --lora on a task other than embedding, are refused."""
    if not lora:
        if merge or r != 8 or alpha != 16.0 or dropout != 0.0 or targets != "query,value":
            raise InputError("the --lora-* options apply with --lora")
        return None
    if task != "embedding":
        raise InputError(f"--lora trains --task embedding adapters (not {task!r}) for now")
    from ..checkpoints.adapters import LoraSpec

    names = tuple(t.strip() for t in targets.split(",") if t.strip())
    return LoraSpec(r=r, alpha=alpha, dropout=dropout, targets=names)


def _show_labels(counts: dict[str, int], notes: list[str]) -> None:
    """The label set, before training starts (the notes are logged as warnings)."""
    listed = ", ".join(f"{name} ({n:,})" for name, n in counts.items())
    err.print(f"labels ({len(counts)}): {listed}", markup=False, highlight=False)


def _report_finetune(res: dict, output: Path, eval: Path | None) -> None:
    """A finished fine-tuning run: its notes on stderr, its summary as JSON on stdout."""
    if res.get("new_head"):
        err.print(f"new task head: initialised {res['new_head']} (normal for fine-tuning)")
    if res.get("left_out_per_epoch"):
        err.print(
            f"each epoch left out the last partial batch ({res['left_out_per_epoch']} examples, "
            "other ones every epoch: the data is reshuffled)"
        )
    # res["notes"] were logged as warnings where they arose (stderr): not printed twice
    summary = {k: res.get(k) for k in ("eval", "labels", "seconds", "notes")}
    if res.get("label_notes"):
        summary["label_notes"] = res["label_notes"]
    summary["planned_steps"] = res["train"].get("planned_steps")
    summary["steps"], summary["stopped"] = res["train"].get("step"), res["train"].get("stopped")
    summary["model"] = str(output / ("best" if eval else "model"))
    if res.get("self_distill"):
        sd = res["self_distill"]
        summary["self_distill"] = sd
        err.print(f"self-distilled students ({sd['steps']} steps) in {sd['saved_in']}")
    print_json(summary)  # stdout holds only this JSON (notes above went to stderr)


def _colbert_task(
    model, train, output, training, epochs, loss, min_score, train_format, shuffle, query_length,
    document_length, dim, temperature,
):  # fmt: skip
    """``--task colbert``: `recipes.colbert.train_colbert`; the JSON summary on stdout."""
    from ..recipes.colbert import ColBERTConfig, train_colbert
    from .common import model_path

    fields = training.train_config_fields()
    cfg = ColBERTConfig(
        model_path(model), train, loss or "contrastive", dim=dim, query_length=query_length,
        document_length=document_length, temperature=temperature, min_score=min_score,
        epochs=None if "max_steps" in fields else epochs, train_format=train_format,
        shuffle=shuffle,
    )  # fmt: skip
    with training_threads(training.threads):
        res = train_colbert(cfg, output_dir=output, **fields)
    print_json({k: res.get(k) for k in ("loss", "rows", "seconds", "model")})


def _pair_task(
    task, model, train, eval, output, training, epochs, loss, dims, min_score, max_len,
    mini_batch_size, scale, train_format, num_negatives, shuffle, lora=None, lora_merge=False,
):  # fmt: skip
    from .common import model_path

    fields = training.train_config_fields()
    epochs_ = None if "max_steps" in fields else epochs
    if task == "embedding":
        from ..recipes.embedding import EmbeddingConfig, train_embedding

        try:
            parsed = tuple(int(d) for d in dims.split(",")) if dims else ()
        except ValueError:
            raise typer.BadParameter(
                f"--matryoshka-dims {dims!r}: give integers joined by ','"
            ) from None
        cfg = EmbeddingConfig(
            model_path(model), train, loss or "mnrl", eval, scale=20.0 if scale is None else scale,
            mini_batch_size=mini_batch_size, matryoshka_dims=parsed, min_score=min_score,
            max_seq_length=max_len, epochs=epochs_, train_format=train_format, shuffle=shuffle,
            lora=lora, lora_merge=lora_merge,
        )  # fmt: skip
        with training_threads(training.threads):
            res = train_embedding(cfg, output_dir=output, **fields)
    else:
        from ..recipes.rerank import RerankConfig, train_reranker

        cfg = RerankConfig(
            model_path(model), train, loss or "bce", eval, max_length=max_len or 256,
            epochs=epochs_, train_format=train_format, shuffle=shuffle,
            num_negatives=num_negatives, scale=10.0 if scale is None else scale,
        )  # fmt: skip
        with training_threads(training.threads):
            res = train_reranker(cfg, output_dir=output, **fields)
    summary = {k: res.get(k) for k in ("eval", "loss", "rows", "seconds")}
    summary["model"] = str(output / ("best" if eval else "model"))
    print_json(summary)  # stdout holds only this JSON


@commands.command()
@handle_errors
def predict(
    task: str = typer.Option(..., help=TASK_HELP),
    model: Path = typer.Option(..., help="A fine-tuned model directory."),
    input: Path = typer.Option(
        ..., "--input", "-i", help="Data file (- for standard input, with --format)."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write predictions as JSONL."),
    labelled: bool = typer.Option(
        False, help="The file has labels (CSV/TSV/JSONL, CoNLL, SQuAD): also print metrics."
    ),
    fmt: str | None = typer.Option(None, "--format", help=FORMAT_HELP),
    text_column: str = typer.Option("text", help=TEXT_HELP),
    text_pair_column: str | None = typer.Option(None, help=PAIR_HELP),
    label_column: str = typer.Option("label", help=LABEL_HELP),
    max_length: int = typer.Option(128, min=8, help=LENGTH_HELP),
    label_separator: str = typer.Option("|", help="Joins the labels of a multi-label cell."),
    threshold: float = typer.Option(
        0.5, min=0.0, max=1.0, help="Multi-label: emit every label over this sigmoid score."
    ),
    null_threshold: float | None = typer.Option(None, help=NULL_HELP),
    speed: float | None = typer.Option(
        None,
        min=0.0,
        max=1.0,
        help="Early exit (a --self-distill model): leave at the first layer whose student's "
        "normalised entropy is below this (0: the full model; 1: layer 1).",
    ),
    knowledge: str | None = typer.Option(None, help=KNOWLEDGE_HELP),
    threads: int = typer.Option(0, min=0, help=THREADS_HELP),
):
    """Predictions of a fine-tuned model on a file (JSONL to --output or the screen)."""
    compute_threads(threads)
    from ..data.task_data import TaskOptions
    from ..files import atomic_write
    from ..recipes.finetune import predict as run

    opts = TaskOptions(
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        max_length=max_length,
        label_separator=label_separator,
        threshold=threshold,
        null_threshold=null_threshold,
        format=fmt,
    )
    preds, metrics = run(
        task, model, input, opts, labelled=labelled, speed=speed, knowledge=knowledge
    )
    if output is not None:
        body = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds)
        atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
        err.print(f"wrote {len(preds)} predictions to {output}")
        if metrics:
            print_json(metrics)
        return
    write_jsonl(preds)  # stdout: only the prediction lines (one JSON object each)
    if metrics:
        err.print("metrics: " + json.dumps(metrics), markup=False, highlight=False)
