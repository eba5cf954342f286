"""`bertfamily finetune` and `bertfamily predict`: thin wrappers of `recipes.finetune`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    """Add the finetune and predict commands to the CLI."""
    from .cli import _fail, console

    task_help = "classify | pair | ner | qa | choice"

    def _opts(text_column, text_pair_column, label_column, max_length, regression,
              null_threshold):
        from .tasks.encode import TaskOptions

        return TaskOptions(text_column=text_column, text_pair_column=text_pair_column,
                           label_column=label_column, max_length=max_length,
                           regression=regression, null_threshold=null_threshold)

    @app.command()
    def finetune(task: str = typer.Option(..., help=task_help),
                 model: Optional[str] = typer.Option(None, help="Pretrained model directory or "
                                                     "resource (default all-MiniLM-L6-v2)."),
                 train: Path = typer.Option(..., help="Training file (CSV/TSV/JSONL, CoNLL, "
                                            "SQuAD JSON)."),
                 eval: Optional[Path] = typer.Option(None, help="Evaluation file: best "
                                                     "checkpoint, early stopping, metrics."),
                 output: Path = typer.Option(Path("runs/finetune"), "--output", "-o"),
                 text_column: str = "text", text_pair_column: Optional[str] = None,
                 label_column: str = "label",
                 max_length: int = typer.Option(128, min=8),
                 batch_size: int = typer.Option(32, min=1),
                 epochs: float = typer.Option(3.0, min=0.01),
                 max_steps: Optional[int] = typer.Option(None, min=1),
                 learning_rate: float = 5e-5,
                 eval_every: Optional[int] = typer.Option(None, min=1),
                 patience: Optional[int] = typer.Option(None, min=1,
                                                        help="Early-stopping patience (evals)."),
                 max_time: Optional[float] = typer.Option(None, help="Wall-clock cap (s)."),
                 regression: bool = False,
                 null_threshold: Optional[float] = None,
                 resume: bool = False):
        """Fine-tune an encoder on a task; writes metrics.jsonl, best/, model/, confusion PNG."""
        from .fetch import resolve_model
        from .recipes.finetune import FINETUNE_TRAIN_DEFAULTS, FinetuneConfig, finetune as run
        from .train.loop import TrainConfig

        extra = {k: v for k, v in dict(max_steps=max_steps, eval_every=eval_every,
                                       early_stopping_patience=patience, max_time_s=max_time,
                                       resume=resume or None).items() if v is not None}
        try:
            res = run(FinetuneConfig(task, resolve_model(model), train, eval,
                                     _opts(text_column, text_pair_column, label_column,
                                           max_length, regression, null_threshold),
                                     epochs=None if max_steps else epochs),
                      TrainConfig(output_dir=output, **{**FINETUNE_TRAIN_DEFAULTS,
                                                        "learning_rate": learning_rate,
                                                        "batch_size": batch_size,
                                                        "log_every": 0, **extra}))
        except (ValueError, OSError, RuntimeError) as e:
            _fail(e)
        console.print_json(json.dumps({k: res.get(k) for k in ("eval", "labels", "seconds")}))
        console.print(f"model: {output / ('best' if eval else 'model')}")

    @app.command()
    def predict(task: str = typer.Option(..., help=task_help),
                model: Path = typer.Option(..., help="A fine-tuned model directory."),
                input: Path = typer.Option(..., "--input", "-i", help="Data file."),
                output: Optional[Path] = typer.Option(None, "--output", "-o",
                                                      help="Write predictions as JSONL."),
                labelled: bool = typer.Option(False, help="The file has labels: also print "
                                              "metrics."),
                text_column: str = "text", text_pair_column: Optional[str] = None,
                label_column: str = "label", max_length: int = typer.Option(128, min=8),
                null_threshold: Optional[float] = None):
        """Predictions of a fine-tuned model on a file (JSONL to --output or the screen)."""
        from .files import atomic_write
        from .recipes.finetune import predict as run

        try:
            preds, metrics = run(task, model, input,
                                 _opts(text_column, text_pair_column, label_column, max_length,
                                       False, null_threshold),
                                 labelled=labelled or task in ("ner", "qa", "choice"))
        except (ValueError, OSError, RuntimeError) as e:
            _fail(e)
        body = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds)
        if output is not None:
            atomic_write(output, lambda tmp: tmp.write_text(body, encoding="utf-8"))
            console.print(f"wrote {len(preds)} predictions to {output}")
        else:
            console.print(body, end="", markup=False, highlight=False)
        if metrics:
            console.print_json(json.dumps(metrics))
