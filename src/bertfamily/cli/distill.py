"""`bertfamily distill` (DistilBERT, TinyBERT) and `bertfamily distill init`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .common import (
    App,
    err,
    handle_errors,
    model_overrides,
    print_json,
    print_summary_on_main_rank,
    training_threads,
)
from .options import TrainOptions, training_options

commands = App()


distill_group = App(
    help="Knowledge distillation (DistilBERT, TinyBERT).", invoke_without_command=True
)


commands.add_typer(distill_group, name="distill")


# distill's options that take more than a line, declared once here to keep its signature short
TEACHER_OPTION = typer.Option(None, help="Teacher model: directory, resource or cached org/name.")
STUDENT_OPTION = typer.Option(
    "tinybert-4l",
    help="Student preset name or directory (tinybert-task: also teacher layers to copy, e.g. 1,3).",
)
CORPUS_OPTION = typer.Option(None, metavar="PATH", help="Corpus file(s); repeatable.")
OUTPUT_OPTION = typer.Option(
    None, "--output", "-o", help="Run directory (checkpoint, metrics, student model/)."
)
TEMPERATURE_OPTION = typer.Option(
    None, help="Soft-target temperature (default: distilbert 2, tinybert-task 1)."
)
ALPHA_COS_OPTION = typer.Option(1.0, help="distilbert: weight of the hidden-state cosine loss.")
TASK_OPTION = typer.Option(
    "classify", help="tinybert-task: classify (a table) | ner (CoNLL, per-token logits)."
)
AUGMENT_SAMPLES_OPTION = typer.Option(
    0, min=0, help="tinybert-task: TinyBERT data augmentation, N_a samples per example (0: off)."
)
AUGMENT_PROB_OPTION = typer.Option(
    0.4, min=0.0, max=1.0, help="tinybert-task augmentation: p_t, word replacement probability."
)
AUGMENT_CANDIDATES_OPTION = typer.Option(
    15, min=1, help="tinybert-task augmentation: K candidates per word."
)
AUGMENT_MODEL_OPTION = typer.Option(
    None,
    help="tinybert-task augmentation: model with an MLM head for single-piece words "
    "(default: none, embedding neighbours of the teacher for every word).",
)


@distill_group.callback()
@handle_errors
@training_options("distill")
def distill(
    ctx: typer.Context,
    method: str | None = typer.Option(None, help="distilbert | tinybert | tinybert-task"),
    teacher: str | None = TEACHER_OPTION,
    student: str = STUDENT_OPTION,
    corpus: list[Path] | None = CORPUS_OPTION,
    output: Path | None = OUTPUT_OPTION,
    layers: int | None = typer.Option(None, help="Preset student: num_hidden_layers."),
    hidden: int | None = typer.Option(None, help="Preset student: hidden_size (FFN 4H)."),
    heads: int | None = typer.Option(None, help="Preset student: attention heads."),
    projection: bool = typer.Option(False, help="Learn a student→teacher projection."),
    temperature: float | None = TEMPERATURE_OPTION,
    alpha_ce: float = typer.Option(5.0, help="distilbert: weight of the soft-target loss."),
    alpha_mlm: float = typer.Option(2.0, help="distilbert: weight of the masked-LM loss."),
    alpha_cos: float = ALPHA_COS_OPTION,
    max_length: int = typer.Option(128, min=5, help="Tokens per training sequence."),
    training: TrainOptions = None,
    train: Path | None = typer.Option(None, help="tinybert-task: classification CSV/TSV/JSONL."),
    text_column: str = typer.Option("text", help="tinybert-task: text column."),
    label_column: str = typer.Option("label", help="tinybert-task: label column."),
    intermediate_steps: int = typer.Option(100, min=0, help="tinybert-task: stage 1."),
    prediction_steps: int = typer.Option(100, min=0, help="tinybert-task: stage 2."),
    task: str = TASK_OPTION,
    augment_samples: int = AUGMENT_SAMPLES_OPTION,
    augment_prob: float = AUGMENT_PROB_OPTION,
    augment_candidates: int = AUGMENT_CANDIDATES_OPTION,
    augment_model: str | None = AUGMENT_MODEL_OPTION,
):
    """Distil a teacher into a student (DistilBERT or TinyBERT general distillation).
    Runs under torchrun; `distill init` builds a layer-copied student."""
    if ctx.invoked_subcommand is not None:
        return
    from .common import model_path

    overrides = model_overrides(layers, hidden, heads)
    if method == "tinybert-task":
        if not (teacher and train and output):
            raise InputError("tinybert-task needs --teacher, --train and --output")
        from ..data.augment import AugmentConfig
        from ..recipes.distill import TaskDistillConfig

        augment = (
            AugmentConfig(
                replace_prob=augment_prob,
                samples=augment_samples,
                candidates=augment_candidates,
                mlm=augment_model is not None,
            )
            if augment_samples
            else None
        )
        cfg = TaskDistillConfig(
            model_path(teacher),
            train,
            student=_student_layers(student),
            student_overrides=overrides,
            task=task,
            intermediate_steps=intermediate_steps,
            prediction_steps=prediction_steps,
            text_column=text_column,
            label_column=label_column,
            max_length=max_length,
            temperature=1.0 if temperature is None else temperature,
            projection=projection,
            augment=augment,
            augment_model=model_path(augment_model) if augment_model else None,
        )
        return _distill_task(cfg, output, training)
    if not (method and teacher and corpus and output):
        raise InputError("distill needs --method, --teacher, --corpus and --output")
    from ..recipes.distill import DistillConfig

    cfg = DistillConfig(
        teacher=model_path(teacher),
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
    _distill_general(cfg, output, training)


def _student_layers(student: str) -> list[int] | str:
    """tinybert-task's --student: teacher layers to copy ("1,3" -> [1, 3]), or a preset name
    or directory as given."""
    return [int(x) for x in student.split(",")] if student.replace(",", "").isdigit() else student


def _distill_task(cfg, output: Path, training: TrainOptions) -> None:
    """`recipes.distill.distill_task` (TinyBERT's two task stages, whose steps the config
    gives: the shared --max-steps, --eval-every and --save-every are not passed); prints the
    labels and parameter count as JSON."""
    from ..recipes.distill import distill_task
    from ..train.config import TrainConfig

    fields = training.train_config_fields()
    stage_fields = {
        k: v for k, v in fields.items() if k not in ("max_steps", "eval_every", "save_every")
    }
    with training_threads(training.threads):
        res = distill_task(cfg, TrainConfig(output_dir=output, **stage_fields))
    print_json({k: res[k] for k in ("labels", "parameters")})


def _distill_general(cfg, output: Path, training: TrainOptions) -> None:
    """`recipes.distill.distill` (DistilBERT or TinyBERT general distillation); the main rank
    prints the run's summary as JSON."""
    from ..recipes.distill import distill as run

    with training_threads(training.threads):
        summary = run(cfg, output_dir=output, **training.train_config_fields())
    print_summary_on_main_rank(
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
    from ..pretrained import from_pretrained
    from ..recipes.distill import init_student
    from ..tokenization.tokenizer import load_tokenizer
    from .common import model_path

    path = model_path(teacher)
    chosen = [int(x) for x in layers.split(",") if x.strip()]
    student = init_student(
        from_pretrained(path), chosen, preset=student_preset, fold_token_types=fold_token_types
    )
    student.save_pretrained(output)
    load_tokenizer(path).save_pretrained(output)
    err.print(
        f"{student.config.num_hidden_layers}-layer student from teacher layers "
        f"{chosen} ({student.num_parameters():,} parameters) -> {output}"
    )


@distill_group.command("static")
@handle_errors
def distill_static_command(
    model: str = typer.Argument(..., help="Sentence model: directory, resource or org/name."),
    output: Path = typer.Argument(..., help="Directory for the static model (replaced)."),
    dims: int = typer.Option(256, min=0, help="PCA dimensions (0: no PCA)."),
    sif: float = typer.Option(1e-4, min=0.0, help="SIF coefficient of the Zipf weights (0: none)."),
    remove_pattern: str = typer.Option(
        r"\[unused\d+\]", help="Regex of tokens to leave out ('' keeps every token)."
    ),
    batch_size: int = typer.Option(256, min=1, help="Tokens per forward pass."),
    normalize: bool = typer.Option(True, help="The static model L2-normalises its vectors."),
    threads: int = typer.Option(0, min=0, help="Torch threads (0: the engine's policy)."),
):
    """A Model2Vec-style static model (vocabulary forward pass, PCA, Zipf/SIF weights), in
    model2vec's layout (loads in model2vec, sentence-transformers and bertfamily); prints a
    JSON summary."""
    from ..recipes.static import distill_static
    from .common import model_path

    summary = distill_static(
        model_path(model),
        output,
        dims=dims or None,
        sif_coefficient=sif or None,
        remove_pattern=remove_pattern or None,
        batch_size=batch_size,
        normalize=normalize,
        threads=threads,
    )
    print_json(summary)
