"""Training: `pretrain`, `distill` (and `distill init`), `finetune`, `predict`.

The three training commands take the shared training options (`options.TrainOptions`).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .common import (
    App,
    console,
    handle_errors,
    model_overrides,
    training_threads,
)
from .options import TrainOptions, training_options

commands = App()
distill_group = App(
    help="Knowledge distillation (DistilBERT, TinyBERT).", invoke_without_command=True
)
commands.add_typer(distill_group, name="distill")

TASK_HELP = "Task: classify | pair | ner | qa | choice."
TEXT_HELP = "Column of the text (CSV/TSV/JSONL)."
PAIR_HELP = "Column of the second text (pair tasks)."
LABEL_HELP = "Column of the label."
LENGTH_HELP = "Tokens per example (longer inputs are truncated; qa: windows)."
NULL_HELP = (
    "qa: answer nothing when the no-answer score beats the best span by this margin "
    "(default: always answer)."
)


def _print_summary_on_main_rank(summary: dict, keys: tuple[str, ...], device: str) -> None:
    from ..train.distributed import cleanup_distributed, init_distributed

    if init_distributed(device).is_main:
        console.print_json(data={k: summary[k] for k in keys})
    cleanup_distributed()


@commands.command()
@handle_errors
@training_options()
def pretrain(
    corpus: list[Path] = typer.Argument(
        ..., metavar="CORPUS", help="Corpus files (.txt / .jsonl / dataset dir)."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Run directory: checkpoint, metrics.jsonl, loss.png, model/."
    ),
    tokenizer: Path | None = typer.Option(None, help="Tokenizer directory."),
    preset: str = typer.Option("bert-tiny", help="Preset for a model from scratch."),
    init_from: str | None = typer.Option(
        None,
        help="Continue pretraining this model (directory, resource or cached org/name; fresh "
        "heads if absent).",
    ),
    objectives: str | None = typer.Option(
        None,
        help="e.g. mlm,nsp | mlm,sop | mlm | mlm,sbo | rtd (ELECTRA replaced-token detection, "
        "ELECTRA models; saves the discriminator) (default: the preset's).",
    ),
    generator_size: float = typer.Option(
        0.25,
        min=0.0,
        max=1.0,
        help="rtd: the generator's width as a fraction of the discriminator's (ELECTRA §3.2).",
    ),
    masking: str | None = typer.Option(
        None, help="token | whole_word | ngram | entity | span (default: the preset's, else token)"
    ),
    mlm_probability: float = typer.Option(
        0.15, min=0.0, max=1.0, help="Share of the tokens chosen for masked-LM prediction."
    ),
    max_predictions: int | None = typer.Option(None, help="Cap per sequence."),
    static_copies: int = typer.Option(0, help="0: dynamic masking; k: k static maskings."),
    packing: str = typer.Option(
        "full_sentences",
        help="MLM-only inputs: full_sentences (may cross documents) | doc_sentences (one "
        "document each; the batch grows to keep the tokens per batch), RoBERTa §4.2.",
    ),
    max_length: int = typer.Option(128, min=5, help="Tokens per training sequence."),
    layers: int | None = typer.Option(None, help="Override num_hidden_layers."),
    hidden: int | None = typer.Option(None, help="Override hidden_size (FFN = 4H)."),
    heads: int | None = typer.Option(None, help="Override num_attention_heads."),
    dropout: float | None = typer.Option(None, help="Override hidden and attention dropout."),
    training: TrainOptions = None,
    split_sentences: bool = typer.Option(False, help="Split lines with pysbd."),
    chinese_words: bool = typer.Option(False, help="Whole words from jieba."),
    phrases: str | None = typer.Option(
        None,
        help="english | chinese: ERNIE phrase masking, chunker phrases masked as units "
        "(masking entity).",
    ),
    eval_corpus: list[Path] | None = typer.Option(
        None,
        metavar="FILE",
        help="Held-out corpus file (repeatable): evaluate on its documents and train on every "
        "document of CORPUS (default: hold out 20 documents of CORPUS).",
    ),
    eval_batches: int = typer.Option(20, min=1, help="Held-out batches per evaluation."),
):
    """Pretrain (or continue pretraining) with MLM (+ NSP / SOP / SBO). Runs under torchrun."""
    from ..fetch import resolve_model
    from ..objectives.masking import MaskingConfig
    from ..recipes.pretrain import PretrainConfig
    from ..recipes.pretrain import pretrain as run
    from ..train.loop import TrainConfig

    custom_masking = masking or mlm_probability != 0.15 or max_predictions
    cfg = PretrainConfig(
        corpus=corpus,
        tokenizer=tokenizer,
        preset=preset,
        overrides=model_overrides(layers, hidden, heads, dropout),
        init_from=resolve_model(init_from) if init_from else None,
        objectives=objectives.split(",") if objectives else None,
        generator_size=generator_size,
        masking=MaskingConfig(
            strategy=masking or "token",
            mlm_probability=mlm_probability,
            max_predictions=max_predictions,
        )
        if custom_masking
        else None,
        static_copies=static_copies,
        packing=packing,
        max_length=max_length,
        split_sentences=split_sentences,
        chinese_words=chinese_words,
        phrases=phrases,
        eval_corpus=eval_corpus or (),
        eval_batches=eval_batches,
    )
    with training_threads(training.threads):
        summary = run(
            cfg,
            TrainConfig(
                output_dir=output, metric_for_best="loss", **training.train_config_fields()
            ),
        )
    _print_summary_on_main_rank(summary, ("step", "stopped", "elapsed_s", "eval"), training.device)


@distill_group.callback()
@handle_errors
@training_options(lr=5e-4)
def distill(
    ctx: typer.Context,
    method: str | None = typer.Option(None, help="distilbert | tinybert | tinybert-task"),
    teacher: str | None = typer.Option(
        None, help="Teacher model: directory, resource or cached org/name."
    ),
    student: str = typer.Option(
        "tinybert-4l",
        help="Student preset name or directory "
        "(tinybert-task: also teacher layers to copy, e.g. 1,3).",
    ),
    corpus: list[Path] | None = typer.Option(
        None, metavar="PATH", help="Corpus file(s); repeatable."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Run directory (checkpoint, metrics, student model/)."
    ),
    layers: int | None = typer.Option(None, help="Preset student: num_hidden_layers."),
    hidden: int | None = typer.Option(None, help="Preset student: hidden_size (FFN 4H)."),
    heads: int | None = typer.Option(None, help="Preset student: attention heads."),
    projection: bool = typer.Option(False, help="Learn a student→teacher projection."),
    temperature: float | None = typer.Option(
        None, help="Soft-target temperature (default: distilbert 2, tinybert-task 1)."
    ),
    alpha_ce: float = typer.Option(5.0, help="distilbert: weight of the soft-target loss."),
    alpha_mlm: float = typer.Option(2.0, help="distilbert: weight of the masked-LM loss."),
    alpha_cos: float = typer.Option(
        1.0, help="distilbert: weight of the hidden-state cosine loss."
    ),
    max_length: int = typer.Option(128, min=5, help="Tokens per training sequence."),
    training: TrainOptions = None,
    train: Path | None = typer.Option(None, help="tinybert-task: classification CSV/TSV/JSONL."),
    text_column: str = typer.Option("text", help="tinybert-task: text column."),
    label_column: str = typer.Option("label", help="tinybert-task: label column."),
    intermediate_steps: int = typer.Option(100, min=0, help="tinybert-task: stage 1."),
    prediction_steps: int = typer.Option(100, min=0, help="tinybert-task: stage 2."),
    task: str = typer.Option(
        "classify", help="tinybert-task: classify (a table) | ner (CoNLL, per-token logits)."
    ),
    augment_samples: int = typer.Option(
        0,
        min=0,
        help="tinybert-task: TinyBERT data augmentation, N_a samples per example (0: off).",
    ),
    augment_prob: float = typer.Option(
        0.4, min=0.0, max=1.0, help="tinybert-task augmentation: p_t, word replacement probability."
    ),
    augment_candidates: int = typer.Option(
        15, min=1, help="tinybert-task augmentation: K candidates per word."
    ),
    augment_model: str | None = typer.Option(
        None,
        help="tinybert-task augmentation: model with an MLM head for single-piece words "
        "(default: none, embedding neighbours of the teacher for every word).",
    ),
):
    """Distil a teacher into a student (DistilBERT or TinyBERT general distillation).
    Runs under torchrun; `distill init` builds a layer-copied student."""
    if ctx.invoked_subcommand is not None:
        return
    from ..fetch import resolve_model

    overrides = model_overrides(layers, hidden, heads)
    fields = training.train_config_fields()
    if method == "tinybert-task":
        if not (teacher and train and output):
            raise ValueError("tinybert-task needs --teacher, --train and --output")
        from ..recipes.distill import TaskDistillConfig, distill_task
        from ..tasks.augment import AugmentConfig
        from ..train.loop import TrainConfig

        stage_fields = {
            k: v for k, v in fields.items() if k not in ("max_steps", "eval_every", "save_every")
        }
        cfg = TaskDistillConfig(
            resolve_model(teacher),
            train,
            student=[int(x) for x in student.split(",")]
            if student.replace(",", "").isdigit()
            else student,
            student_overrides=overrides,
            task=task,
            intermediate_steps=intermediate_steps,
            prediction_steps=prediction_steps,
            text_column=text_column,
            label_column=label_column,
            max_length=max_length,
            temperature=1.0 if temperature is None else temperature,
            projection=projection,
            augment=AugmentConfig(
                replace_prob=augment_prob,
                samples=augment_samples,
                candidates=augment_candidates,
                mlm=augment_model is not None,
            )
            if augment_samples
            else None,
            augment_model=resolve_model(augment_model) if augment_model else None,
        )
        with training_threads(training.threads):
            res = distill_task(cfg, TrainConfig(output_dir=output, **stage_fields))
        console.print_json(data={k: res[k] for k in ("labels", "parameters")})
        return
    if not (method and teacher and corpus and output):
        raise ValueError("distill needs --method, --teacher, --corpus and --output")
    from ..recipes.distill import DistillConfig
    from ..recipes.distill import distill as run
    from ..train.loop import TrainConfig

    cfg = DistillConfig(
        teacher=resolve_model(teacher),
        method=method,
        corpus=corpus,
        student=student,
        student_overrides=overrides,
        projection=projection,
        temperature=2.0 if temperature is None else temperature,
        alpha_ce=alpha_ce,
        alpha_mlm=alpha_mlm,
        alpha_cos=alpha_cos,
        max_length=max_length,
    )
    with training_threads(training.threads):
        summary = run(cfg, TrainConfig(output_dir=output, **fields))
    _print_summary_on_main_rank(
        summary, ("step", "stopped", "elapsed_s", "train", "eval"), training.device
    )


@distill_group.command("init")
@handle_errors
def distill_init(
    teacher: str = typer.Option(..., help="Teacher model: directory, resource or cached org/name."),
    layers: str = typer.Option(..., help="Teacher layers to copy, 0-based: e.g. 0,2,4."),
    output: Path = typer.Option(..., "--output", "-o", help="Directory for the student."),
    student_preset: str | None = typer.Option(
        None, help="Structure (token types, pooler, model type) from this preset."
    ),
    fold_token_types: bool = typer.Option(
        True, help="Fold the teacher's segment row 0 into positions when dropped."
    ),
):
    """A student initialised from chosen teacher layers (DistilBERT-style)."""
    from ..fetch import resolve_model
    from ..pretrained import from_pretrained
    from ..recipes.distill import init_student
    from ..tokenization import load_tokenizer

    path = resolve_model(teacher)
    chosen = [int(x) for x in layers.split(",") if x.strip()]
    student = init_student(
        from_pretrained(path), chosen, preset=student_preset, fold_token_types=fold_token_types
    )
    student.save_pretrained(output)
    load_tokenizer(path).save_pretrained(output)
    console.print(
        f"{student.config.num_hidden_layers}-layer student from teacher layers "
        f"{chosen} ({student.num_parameters():,} parameters) -> {output}"
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
):
    """Fine-tune an encoder on a task; writes metrics.jsonl, best/, model/, confusion PNG."""
    from ..fetch import resolve_model
    from ..recipes.finetune import FinetuneConfig
    from ..recipes.finetune import finetune as run
    from ..tasks.encode import TaskOptions
    from ..train.loop import TrainConfig

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
    from ..files import atomic_write
    from ..recipes.finetune import predict as run
    from ..tasks.encode import TaskOptions

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
