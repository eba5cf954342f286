"""The training options shared by `pretrain`, `distill` and `finetune`, defined once, with
`TrainConfig`'s field names (``--learning-rate``, ``--grad-accum-steps``, ``--warmup-ratio``,
``--max-time-s``; the short forms ``--lr``, ``--grad-accum``, ``--warmup``, ``--max-time`` are
kept) and each recipe's defaults read from `bertfamily.recipes.common.TRAIN_DEFAULTS`, the same
data the Python recipes read: the same arguments are the same run.

A command takes them as one ``training: TrainOptions`` parameter and is decorated with
`training_options(**its_defaults)`; the decorator puts the options into the command's signature
in that parameter's place (typer reads signatures) and hands the command one `TrainOptions`.
`TrainOptions.train_config_fields` turns them into the engine's `TrainConfig` fields.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

import typer

from ..errors import ArgumentTypeError


@dataclass(frozen=True)
class TrainOptions:
    """The shared training options; the defaults are `pretrain`'s. None: the recipe's default."""

    batch_size: int = 32
    grad_accum_steps: int = 1
    max_steps: int | None = 10000
    max_time_s: float | None = None
    learning_rate: float = 1e-3
    warmup_ratio: float | None = 0.05
    schedule: str = "linear"
    weight_decay: float | None = 0.01
    eval_every: int | None = 500
    save_every: int = 500
    log_every: int | None = 50
    precision: str = "fp32"
    checkpoint_activations: bool = False
    parallel: str = "ddp"
    seed: int = 0
    resume: bool = False
    device: str = "auto"
    progress: bool = True
    threads: int = 0

    def train_config_fields(self) -> dict[str, Any]:
        """The `train.config.TrainConfig` fields these options set (None values left out)."""
        fields = dict(
            batch_size=self.batch_size,
            grad_accum_steps=self.grad_accum_steps,
            max_steps=self.max_steps,
            max_time_s=self.max_time_s,
            learning_rate=self.learning_rate,
            warmup_ratio=self.warmup_ratio,
            schedule=self.schedule,
            weight_decay=self.weight_decay,
            eval_every=self.eval_every,
            save_every=self.save_every,
            log_every=self.log_every,
            precision=self.precision,
            checkpoint_activations=self.checkpoint_activations,
            parallel=self.parallel,
            seed=self.seed,
            resume=self.resume,
            device=self.device,
            progress=self.progress,
        )
        return {k: v for k, v in fields.items() if v is not None}


# name -> (extra option names, typer.Option keywords); the type is the dataclass field's.
_OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "batch_size": ((), dict(min=1, help="Examples per batch, per process.")),
    "grad_accum_steps": (
        ("--grad-accum-steps", "--grad-accum"),
        dict(min=1, help="Micro-batches per optimizer step."),
    ),
    "max_steps": (
        (),
        dict(min=1, help="Optimizer steps (finetune: default --epochs passes over the data)."),
    ),
    "max_time_s": (
        ("--max-time-s", "--max-time"),
        dict(
            min=0.001,
            help="Wall-clock budget in seconds; training stops at whichever of --max-steps and "
            "--max-time comes first (the progress bar's ETA respects both).",
        ),
    ),
    "learning_rate": (("--learning-rate", "--lr"), dict(help="Peak learning rate.")),
    "warmup_ratio": (
        ("--warmup-ratio", "--warmup"),
        dict(help="Warm-up, as a fraction of the steps."),
    ),
    "schedule": (
        (),
        dict(help="Learning-rate schedule: linear | inverse_sqrt | constant."),
    ),
    "weight_decay": (
        (),
        dict(help="AdamW weight decay (finetune: 0.01; 0 with --task embedding or rerank)."),
    ),
    "eval_every": (
        (),
        dict(
            help="Evaluate every N steps (0: only at the end; finetune: "
            "default once per epoch with --eval)."
        ),
    ),
    "save_every": ((), dict(help="Checkpoint every N steps (0: at the end).")),
    "log_every": ((), dict(help="Log every N steps (finetune: default a tenth of the run).")),
    "precision": (
        (),
        dict(
            help="fp32 | bf16 (autocast; slow on CPUs without bf16 units) | fp16 (autocast + "
            "gradient scaler; CUDA only)."
        ),
    ),
    "checkpoint_activations": (
        (),
        dict(help="Recompute each encoder layer in backward instead of storing activations."),
    ),
    "parallel": (
        (),
        dict(help="Under torchrun: ddp (replicated) | fsdp (FSDP2, sharded weights)."),
    ),
    "seed": ((), dict(help="Seed of a fresh run (plus the rank).")),
    "resume": ((), dict(help="Continue from OUTPUT/checkpoint.pt.")),
    "device": ((), dict(help="auto | cpu | cuda")),
    "progress": (("--progress/--no-progress",), dict(help="Show a progress bar.")),
    "threads": (
        (),
        dict(
            min=0,
            help="torch intra-op threads per process (0: OMP_NUM_THREADS when set, else the "
            "physical cores / processes on this node).",
        ),
    ),
}
_TYPES = get_type_hints(TrainOptions)
if set(_OPTIONS) != {f.name for f in dataclasses.fields(TrainOptions)}:
    raise RuntimeError("_OPTIONS must describe every TrainOptions field")


def training_options(
    recipe: str, **defaults: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the shared training options, with the defaults of ``recipe`` (a key of
    `TRAIN_DEFAULTS`; only the `TrainOptions` fields of it) and ``defaults`` on top (options the
    command plans itself, e.g. finetune's ``max_steps=None`` for "from --epochs").

    The command declares a ``training: TrainOptions`` parameter; its command line gets every
    `TrainOptions` field as an option there instead (same names in every command).
    """
    from ..recipes.defaults import TRAIN_DEFAULTS

    names = {f.name for f in dataclasses.fields(TrainOptions)}
    recipe_defaults = {k: v for k, v in TRAIN_DEFAULTS[recipe].items() if k in names}
    base = TrainOptions(**{**recipe_defaults, **defaults})

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func, eval_str=True)
        if "training" not in signature.parameters:
            raise ArgumentTypeError(f"{func.__name__} has no `training: TrainOptions` parameter")
        shared = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=_TYPES[name],
                default=typer.Option(getattr(base, name), *decls, **kw),
            )
            for name, (decls, kw) in _OPTIONS.items()
        ]
        params: list[inspect.Parameter] = []
        for p in signature.parameters.values():
            if p.name == "training":
                params.extend(shared)
            else:
                params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(func)
        def wrapper(**kwargs: Any) -> Any:
            training = TrainOptions(**{name: kwargs.pop(name) for name in _OPTIONS})
            return func(training=training, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate
