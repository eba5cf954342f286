"""CLI commands of the distillation area: `distill` (train) and `distill init`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .cli import _fail, console

distill_app = typer.Typer(help="Knowledge distillation (DistilBERT, TinyBERT).",
                          invoke_without_command=True)


@distill_app.callback()
def distill(
        ctx: typer.Context,
        method: Optional[str] = typer.Option(None, help="distilbert | tinybert | tinybert-task"),
        teacher: Optional[str] = typer.Option(None, help="Teacher model directory or resource."),
        student: str = typer.Option("tinybert-4l", help="Student preset name or directory."),
        corpus: Optional[list[Path]] = typer.Option(None, help="Corpus file(s); repeatable."),
        output: Optional[Path] = typer.Option(None, "--output", "-o"),
        layers: Optional[int] = typer.Option(None, help="Preset student: num_hidden_layers."),
        hidden: Optional[int] = typer.Option(None, help="Preset student: hidden_size (FFN 4H)."),
        heads: Optional[int] = typer.Option(None, help="Preset student: attention heads."),
        projection: bool = typer.Option(False, help="Learn a student→teacher projection."),
        temperature: Optional[float] = typer.Option(
            None, help="Soft-target temperature (default: distilbert 2, tinybert-task 1)."),
        alpha_ce: float = typer.Option(5.0),
        alpha_mlm: float = typer.Option(2.0),
        alpha_cos: float = typer.Option(1.0),
        max_length: int = typer.Option(128, min=5),
        batch_size: int = typer.Option(32, min=1, help="Per process."),
        grad_accum: int = typer.Option(1, min=1),
        max_steps: int = typer.Option(10000, min=1),
        max_time: Optional[float] = typer.Option(None, help="Wall-clock budget, seconds."),
        lr: float = typer.Option(5e-4),
        warmup: float = typer.Option(0.05, help="Warm-up ratio."),
        schedule: str = typer.Option("linear"),
        eval_every: int = typer.Option(500),
        save_every: int = typer.Option(500),
        log_every: int = typer.Option(50),
        seed: int = typer.Option(0),
        resume: bool = typer.Option(False, help="Continue from OUTPUT/checkpoint.pt."),
        device: str = typer.Option("auto"),
        no_progress: bool = typer.Option(False),
        train: Optional[Path] = typer.Option(
            None, help="tinybert-task: classification CSV/TSV/JSONL."),
        text_column: str = typer.Option("text", help="tinybert-task: text column."),
        label_column: str = typer.Option("label", help="tinybert-task: label column."),
        intermediate_steps: int = typer.Option(100, min=0, help="tinybert-task: stage 1."),
        prediction_steps: int = typer.Option(100, min=0, help="tinybert-task: stage 2.")):
    """Distil a teacher into a student (DistilBERT or TinyBERT general distillation).
    Runs under torchrun; `distill init` builds a layer-copied student."""
    if ctx.invoked_subcommand is not None:
        return
    if method == "tinybert-task":
        if not (teacher and train and output):
            _fail(ValueError("tinybert-task needs --teacher, --train and --output"))
        from .recipes.distill import TaskDistillConfig, distill_task
        from .fetch import resolve_model
        from .train.loop import TrainConfig

        try:
            # --student: a directory, a preset, or teacher layers to copy ("1,3").
            chosen = ([int(x) for x in student.split(",")]
                      if student.replace(",", "").isdigit() else student)
            overrides = {k: v for k, v in (("num_hidden_layers", layers),
                                           ("num_attention_heads", heads)) if v}
            if hidden:
                overrides.update(hidden_size=hidden, intermediate_size=4 * hidden)
            res = distill_task(
                TaskDistillConfig(
                    resolve_model(teacher), train, student=chosen,
                    student_overrides=overrides, intermediate_steps=intermediate_steps,
                    prediction_steps=prediction_steps, text_column=text_column,
                    label_column=label_column, max_length=max_length,
                    temperature=1.0 if temperature is None else temperature,
                    projection=projection),
                TrainConfig(output_dir=output, batch_size=batch_size, learning_rate=lr,
                            warmup_ratio=warmup, schedule=schedule, log_every=log_every,
                            seed=seed, device=device, progress=not no_progress))
        except (ValueError, OSError, KeyError) as e:
            _fail(e)
        console.print_json(data={k: res[k] for k in ("labels", "parameters")})
        return
    if not (method and teacher and corpus and output):
        _fail(ValueError("distill needs --method, --teacher, --corpus and --output"))
    from .recipes.distill import DistillConfig, distill as run
    from .fetch import resolve_model
    from .train.distributed import cleanup_distributed, init_distributed
    from .train.loop import TrainConfig

    try:
        overrides = {}
        if layers:
            overrides["num_hidden_layers"] = layers
        if hidden:
            overrides.update(hidden_size=hidden, intermediate_size=4 * hidden)
        if heads:
            overrides["num_attention_heads"] = heads
        cfg = DistillConfig(teacher=resolve_model(teacher), method=method, corpus=corpus,
                            student=student, student_overrides=overrides,
                            projection=projection,
                            temperature=2.0 if temperature is None else temperature, alpha_ce=alpha_ce,
                            alpha_mlm=alpha_mlm, alpha_cos=alpha_cos, max_length=max_length)
        tc = TrainConfig(output_dir=output, max_steps=max_steps, max_time_s=max_time,
                         batch_size=batch_size, grad_accum_steps=grad_accum, learning_rate=lr,
                         warmup_ratio=warmup, schedule=schedule, eval_every=eval_every,
                         save_every=save_every, log_every=log_every, seed=seed, resume=resume,
                         device=device, progress=not no_progress)
        summary = run(cfg, tc)
    except (ValueError, OSError, KeyError) as e:
        _fail(e)
    if init_distributed(device).is_main:
        console.print_json(data={k: summary[k] for k in ("step", "stopped", "elapsed_s",
                                                         "train", "eval")})
    cleanup_distributed()


@distill_app.command("init")
def init(teacher: str = typer.Option(..., help="Teacher model directory or resource."),
         layers: str = typer.Option(..., help="Teacher layers to copy, 0-based: e.g. 0,2,4."),
         output: Path = typer.Option(..., "--output", "-o"),
         student_preset: Optional[str] = typer.Option(
             None, help="Structure (token types, pooler, model type) from this preset."),
         fold_token_types: bool = typer.Option(
             True, help="Fold the teacher's segment row 0 into positions when dropped.")):
    """A student initialised from chosen teacher layers (DistilBERT-style)."""
    from .pretrained import from_pretrained
    from .recipes.distill import init_student
    from .fetch import resolve_model
    from .tokenization import load_tokenizer

    try:
        path = resolve_model(teacher)
        chosen = [int(x) for x in layers.split(",") if x.strip()]
        student = init_student(from_pretrained(path), chosen, preset=student_preset,
                               fold_token_types=fold_token_types)
        student.save_pretrained(output)
        load_tokenizer(path).save_pretrained(output)
    except (ValueError, OSError, KeyError) as e:
        _fail(e)
    console.print(f"{student.config.num_hidden_layers}-layer student from teacher layers "
                  f"{chosen} ({student.num_parameters():,} parameters) -> {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(distill_app, name="distill")
