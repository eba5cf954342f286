"""`bertfamily finetune` and `bertfamily predict`: task fine-tuning and prediction."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .common import (
    App,
    console,
    handle_errors,
    training_threads,
)
from .options import TrainOptions, training_options

commands = App()


TASK_HELP = "Task: classify | pair | ner | qa | choice | embedding | rerank."


TEXT_HELP = "Column of the text (CSV/TSV/JSONL)."


PAIR_HELP = "Column of the second text (pair tasks)."


LABEL_HELP = "Column of the label."


LENGTH_HELP = "Tokens per example (longer inputs are truncated; qa: windows)."


NULL_HELP = (
    "qa: answer nothing when the no-answer score beats the best span by this margin "
    "(default: always answer)."
)


@commands.command()
@handle_errors
@training_options(
    max_steps=None, lr=5e-5, warmup=0.1, eval_every=None, save_every=0, log_every=None
)
def finetune(
    task: str = typer.Option(..., help=TASK_HELP),
    model: str | None = typer.Option(
        None,
        help="Pretrained model: directory, resource or cached org/name (default all-MiniLM-L6-v2).",
    ),
    train: Path = typer.Option(..., help="Training file (CSV/TSV/JSONL, CoNLL, SQuAD JSON)."),
    eval: Path | None = typer.Option(
        None, help="Evaluation file: best checkpoint, early stopping, metrics."
    ),
    output: Path = typer.Option(
        Path("runs/finetune"),
        "--output",
        "-o",
        help="Run directory: metrics.jsonl, loss.png, model/ (and best/ with --eval).",
    ),
    text_column: str = typer.Option("text", help=TEXT_HELP),
    text_pair_column: str | None = typer.Option(None, help=PAIR_HELP),
    label_column: str = typer.Option("label", help=LABEL_HELP),
    max_length: int = typer.Option(128, min=8, help=LENGTH_HELP),
    epochs: float = typer.Option(
        3.0, min=0.01, help="Passes over the data (when --max-steps is not given)."
    ),
    training: TrainOptions = None,
    patience: int | None = typer.Option(None, min=1, help="Early-stopping patience (evals)."),
    regression: bool = typer.Option(False, help="Same as --problem-type regression."),
    problem_type: str | None = typer.Option(
        None,
        help="classify/pair: single_label_classification, multi_label_classification (labels "
        "as a JSON list or joined by --label-separator) or regression; default: inferred "
        "from the labels.",
    ),
    label_separator: str = typer.Option("|", help="Joins the labels of a multi-label cell."),
    threshold: float = typer.Option(
        0.5, min=0.0, max=1.0, help="Multi-label: a label is predicted over this sigmoid score."
    ),
    null_threshold: float | None = typer.Option(None, help=NULL_HELP),
    loss: str | None = typer.Option(
        None,
        help="embedding: mnrl | mnrl_symmetric | cached_mnrl | cosent | cosine | simcse "
        "(default mnrl); rerank: bce.",
    ),
    matryoshka_dims: str | None = typer.Option(
        None, help="embedding: wrap the loss in Matryoshka over these dims, e.g. 384,256,128,64."
    ),
    min_score: float | None = typer.Option(
        None, help="embedding: keep only rows with a label >= this (e.g. STS pairs as positives)."
    ),
    max_seq_length: int | None = typer.Option(
        None, min=8, help="embedding/rerank: tokens per text (default: the model's)."
    ),
    mini_batch_size: int = typer.Option(32, min=1, help="cached_mnrl: rows per mini-batch."),
    scale: float = typer.Option(20.0, min=1e-6, help="MNRL/CoSENT similarity scale."),
    train_format: str | None = typer.Option(
        None, help="embedding/rerank: 'sts' for STS Benchmark TSV files (stsb:SPLIT implies it)."
    ),
):
    """Fine-tune an encoder on a task; writes metrics.jsonl, best/, model/, confusion PNG.

    --task embedding trains a sentence-embedding model (sentence-transformers directories in
    model/ and best/); --task rerank a cross-encoder. --train/--eval also take stsb:train,
    stsb:dev, stsb:test (the fetched STS Benchmark)."""
    if task in ("embedding", "rerank"):
        return _pair_task(
            task, model, str(train), None if eval is None else str(eval), output, training,
            epochs, loss, matryoshka_dims, min_score, max_seq_length, mini_batch_size, scale,
            train_format,
        )  # fmt: skip
    from ..data.task_data import TaskOptions
    from ..recipes.finetune import FinetuneConfig
    from ..recipes.finetune import finetune as run
    from ..resources.cache import resolve_model
    from ..train.config import TrainConfig

    # log_every 0: a tenth of the run (see `recipes.finetune.finetune`)
    fields = {"log_every": 0, **training.train_config_fields()}
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
    )
    cfg = FinetuneConfig(
        task,
        resolve_model(model),
        train,
        eval,
        data,
        epochs=None if "max_steps" in fields else epochs,
        patience=patience,
    )
    with training_threads(training.threads):
        res = run(cfg, TrainConfig(output_dir=output, **fields))
    if res.get("new_head"):
        console.print(f"new task head: initialised {res['new_head']} (normal for fine-tuning)")
    if res.get("left_out_per_epoch"):
        console.print(
            f"each epoch left out the last partial batch ({res['left_out_per_epoch']} examples, "
            "other ones every epoch: the data is reshuffled)"
        )
    console.print_json(json.dumps({k: res.get(k) for k in ("eval", "labels", "seconds")}))
    console.print(f"model: {output / ('best' if eval else 'model')}")


def _pair_task(
    task, model, train, eval, output, training, epochs, loss, dims, min_score, max_len,
    mini_batch_size, scale, train_format,
):  # fmt: skip
    from ..resources.cache import resolve_model
    from ..train.config import TrainConfig

    fields = {"log_every": 0, **training.train_config_fields()}
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
            resolve_model(model), train, loss or "mnrl", eval, scale=scale,
            mini_batch_size=mini_batch_size, matryoshka_dims=parsed, min_score=min_score,
            max_seq_length=max_len, epochs=epochs_, train_format=train_format,
        )  # fmt: skip
        with training_threads(training.threads):
            res = train_embedding(cfg, TrainConfig(output_dir=output, **fields))
    else:
        from ..recipes.rerank import RerankConfig, train_reranker

        cfg = RerankConfig(
            resolve_model(model), train, loss or "bce", eval, max_length=max_len or 256,
            epochs=epochs_, train_format=train_format,
        )  # fmt: skip
        with training_threads(training.threads):
            res = train_reranker(cfg, TrainConfig(output_dir=output, **fields))
    console.print_json(json.dumps({k: res.get(k) for k in ("eval", "loss", "rows", "seconds")}))
    console.print(f"model: {output / ('best' if eval else 'model')}")


@commands.command()
@handle_errors
def predict(
    task: str = typer.Option(..., help=TASK_HELP),
    model: Path = typer.Option(..., help="A fine-tuned model directory."),
    input: Path = typer.Option(..., "--input", "-i", help="Data file."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write predictions as JSONL."),
    labelled: bool = typer.Option(False, help="The file has labels: also print metrics."),
    text_column: str = typer.Option("text", help=TEXT_HELP),
    text_pair_column: str | None = typer.Option(None, help=PAIR_HELP),
    label_column: str = typer.Option("label", help=LABEL_HELP),
    max_length: int = typer.Option(128, min=8, help=LENGTH_HELP),
    label_separator: str = typer.Option("|", help="Joins the labels of a multi-label cell."),
    threshold: float = typer.Option(
        0.5, min=0.0, max=1.0, help="Multi-label: emit every label over this sigmoid score."
    ),
    null_threshold: float | None = typer.Option(None, help=NULL_HELP),
):
    """Predictions of a fine-tuned model on a file (JSONL to --output or the screen)."""
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
    )
    preds, metrics = run(
        task, model, input, opts, labelled=labelled or task in ("ner", "qa", "choice")
    )
    body = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds)
    if output is not None:
        atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
        console.print(f"wrote {len(preds)} predictions to {output}")
    else:
        console.print(body, end="", markup=False, highlight=False)
    if metrics:
        console.print_json(json.dumps(metrics))
