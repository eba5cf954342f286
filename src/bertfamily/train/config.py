"""The training run's configuration (`TrainConfig`), its saved counters (`TrainState`), the
names of the files a run directory holds, and `budget_total` (the step a time budget stops at).
`bertfamily.train.loop.Trainer` runs a `TrainConfig`."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from .distributed import (
    PARALLEL_KINDS,
)
from .mixed_precision import PRECISIONS
from .schedules import SCHEDULES

CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.jsonl"
MODEL_STATE_FILE = "model_state.pt"
PLOT_FILE = "loss.png"
MODEL_DIRS = ("model", "best")
#: Version of ``checkpoint.pt``. 2: every value a tensor, number, string, list, tuple or dict
#: (RNG states included), so it loads with ``torch.load(weights_only=True)``. 3: the optimizer
#: state is keyed by parameter name (torch.distributed.checkpoint's full state dict, the same
#: for one process, DDP and FSDP), plus the gradient scaler's state.
CHECKPOINT_FORMAT = 3
_CHECKPOINT_KEYS = ("model", "optimizer", "scheduler", "state", "rng")


@dataclass
class TrainConfig:
    """Everything the loop needs besides the model, the loss and the data.

    Attributes:
        output_dir: where metrics, checkpoints and the final model go.
        max_steps: optimizer steps to train for (also the length of the "linear" schedule).
        max_time_s: wall-clock budget in seconds of the whole run (None: no limit), counted
            from ``budget_start`` (default: when `Trainer.train` is called) and including
            the final evaluation and saving: the loop stops when the time left is what those
            need (`Trainer.reserve_s`: the last evaluation's duration, measured, and the
            model's and optimizer's bytes at `SAVE_BYTES_PER_S`), then saves a checkpoint.
            The learning-rate schedule (its length, and warm-up from ``warmup_ratio``) is
            then planned for the steps that fit: measured over steps 2-3 of the run, when
            fewer than ``max_steps`` fit (`Trainer`); a run that stops in warm-up says so.
        batch_size: examples per process per micro-batch. The trainer takes batches as given;
            this field is for the code that builds the batch source (and the record).
        grad_accum_steps: micro-batches per optimizer step (weighed by their units when the
            `Trainer` has a ``count_fn``, else equally; see the module docstring).
        learning_rate / weight_decay / adam_betas / adam_eps: AdamW (`optim.build_optimizer`).
        warmup_steps: linear warm-up length; when 0, ``warmup_ratio * max_steps`` is used.
        schedule: "linear" | "inverse_sqrt" | "constant" (`schedules.lr_factor`).
        transformers_warmup: transformers' warm-up convention, which sentence-transformers'
            trainers follow: ``warmup_ratio`` rounds up (ceil) instead of down, and step s of
            the warm-up trains at s / warmup (the first update at rate 0) instead of
            (s + 1) / warmup (`schedules.lr_factor` ``from_zero``).
        max_grad_norm: clip the global gradient L2 norm to this (None or 0: no clipping).
        precision: "fp32" | "bf16" | "fp16" (`precision`): autocast of forward passes; fp16
            adds a gradient scaler and needs CUDA; bf16 on a CPU without native bf16 warns.
        checkpoint_activations: recompute each encoder layer's activations in backward instead
            of storing them (`torch.utils.checkpoint`, non-reentrant; Chen et al. 2016,
            "Training Deep Nets with Sublinear Memory Cost"): less memory, one more forward
            per layer. Sets ``Encoder.checkpoint_activations`` on every encoder of the model.
        parallel: "ddp" (DistributedDataParallel: every rank holds all weights) or "fsdp"
            (FSDP2 ``fully_shard`` per encoder layer and at the root: parameters, gradients
            and optimizer state sharded over ranks; Zhao et al. 2023, "PyTorch FSDP"). Only
            matters under torchrun; checkpoints hold full (gathered) states either way, so a
            run resumes under the other kind or another number of processes.
        eval_every / save_every / log_every: in optimizer steps (0: only at the end; logging
            at least at the end).
        seed: seeds python, numpy and torch (plus the rank) at the start of a fresh run.
        resume: continue from ``output_dir/checkpoint.pt`` when it exists (else start fresh).
        metric_for_best: an ``eval_fn`` key (with or without the ``eval_`` prefix) that selects
            the best checkpoint (``output_dir/best``); None: no selection.
        greater_is_better: whether a larger ``metric_for_best`` is better.
        early_stopping_patience: stop after this many evaluations without improvement of
            ``metric_for_best`` (None: never).
        load_best_at_end: load the best weights into the model before returning.
        device: "auto" | "cpu" | "cuda".
        progress: show a progress bar (rank 0 only).
        find_unused_parameters: passed to DistributedDataParallel.
        budget_start: the `time.monotonic` at which ``max_time_s`` began (a recipe passes
            its own start, so reading the data and loading the model count too).
        eval_at_start: evaluate the starting model once at step 0 (a fresh run with an
            evaluation and ``metric_for_best``): it is the first ``best``, so a run that only
            makes the model worse keeps the starting one (and `Trainer.train` says so).
        evals_after: evaluations the caller runs after `Trainer.train` returns (finetune's
            predictions file), kept out of ``max_time_s`` like the loop's own last one.
    """

    output_dir: str | Path
    max_steps: int = 1000
    max_time_s: float | None = None
    batch_size: int = 32
    grad_accum_steps: int = 1
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-6
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    schedule: str = "linear"
    transformers_warmup: bool = False
    max_grad_norm: float | None = 1.0
    precision: str = "fp32"
    checkpoint_activations: bool = False
    parallel: str = "ddp"
    eval_every: int = 0
    save_every: int = 0
    log_every: int = 10
    seed: int = 0
    resume: bool = False
    metric_for_best: str | None = None
    greater_is_better: bool = False
    early_stopping_patience: int | None = None
    load_best_at_end: bool = False
    device: str = "auto"
    progress: bool = True
    find_unused_parameters: bool = False
    budget_start: float | None = None
    eval_at_start: bool = False
    evals_after: int = 0

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir)
        for name in ("max_steps", "grad_accum_steps", "batch_size"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "save_every", "log_every", "warmup_steps"):
            if getattr(self, name) < 0:
                raise InputError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise InputError(f"warmup_ratio must lie in [0, 1), got {self.warmup_ratio}")
        if self.precision not in PRECISIONS:
            raise InputError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.parallel not in PARALLEL_KINDS:
            raise InputError(f"parallel must be one of {PARALLEL_KINDS}, got {self.parallel!r}")
        if self.schedule not in SCHEDULES:
            raise InputError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.max_time_s is not None and self.max_time_s <= 0:
            raise InputError(f"max_time_s must be > 0 or None, got {self.max_time_s}")
        if self.early_stopping_patience is not None and self.metric_for_best is None:
            raise InputError("early_stopping_patience needs metric_for_best")
        if self.load_best_at_end and self.metric_for_best is None:
            raise InputError("load_best_at_end needs metric_for_best")

    @property
    def num_warmup_steps(self) -> int:
        """``warmup_steps``, or if 0 ``warmup_ratio`` × ``max_steps`` (rounded down; up with
        ``transformers_warmup``)."""
        return self.warmup_steps or warmup_of(self.warmup_ratio, self.max_steps, self)

    def to_dict(self) -> dict[str, Any]:
        """The config as a dict, ``output_dir`` as a string."""
        d = dataclasses.asdict(self)
        d["output_dir"] = str(self.output_dir)
        return d


def warmup_of(ratio: float, total: int, config: TrainConfig) -> int:
    """``ratio`` × ``total`` steps, rounded down (up with ``config.transformers_warmup``)."""
    steps = ratio * total
    return math.ceil(steps) if config.transformers_warmup else int(steps)


@dataclass
class TrainState:
    """Counters saved in the checkpoint. ``epoch``/``batch_in_epoch``: the data position (the
    next batch to read); ``best_*``/``bad_evals``: best-checkpoint and early-stopping state."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    last_eval: dict[str, float] = field(default_factory=dict)
    #: the schedule's length when a time budget re-planned it (`Trainer`), else None
    planned_steps: int | None = None


def budget_total(
    step: int, max_steps: int, elapsed_s: float, max_time_s: float | None, step0: int = 0
) -> int:
    """The step a run is expected to stop at: ``max_steps``, or sooner when the time budget
    ``max_time_s`` runs out first at the speed so far (``step0``: the step this call began at).
    The progress bar's total, so its ETA respects both budgets."""
    if max_time_s is None or step <= step0 or elapsed_s <= 0:
        return max_steps
    rate = (step - step0) / elapsed_s
    by_time = step + int(rate * max(0.0, max_time_s - elapsed_s))
    return max(step, min(max_steps, by_time))
