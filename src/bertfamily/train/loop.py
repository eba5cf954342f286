"""`Trainer`: one small, resumable training loop shared by pretraining, fine-tuning and
distillation.

The loop knows nothing about the task. It gets

- ``model``: an ``nn.Module`` (moved to the device; under ``torchrun`` wrapped in
  DistributedDataParallel, or sharded in place with FSDP2 when ``parallel="fsdp"``);
- ``loss_fn(model, batch) -> (loss, {name: float})``: the scalar loss to minimise and named
  components to log. ``model`` is the DDP wrapper when distributed: call it
  (``model(**inputs)``) rather than its submodules, and use `unwrap` for attributes;
- ``count_fn(batch) -> {term: units}`` (optional; default the model's own ``counts``, which
  every objective has): how many units each loss term has in a
  micro-batch (masked tokens, sequences, ...). With it the loss is normalised over the whole
  optimizer step (see "Gradient accumulation" below) and ``loss_fn`` takes a third argument;
- ``train_batches``: a positionable batch source (see `bertfamily.train.data`): the data
  position ``(epoch, batches consumed)`` is stored in checkpoints so ``resume`` continues with the
  very next batch;
- ``eval_fn(model) -> {name: float}`` (optional): run on rank 0 under ``torch.no_grad`` in eval
  mode, every ``eval_every`` steps and at the end; names are logged with an ``eval_`` prefix.

What it does per optimizer step: ``grad_accum_steps`` forward/backward passes (gradient sync only
on the last under DDP), gradient clipping at ``max_grad_norm``, AdamW (no decay on biases and
norms, `optim.param_groups`), a learning-rate schedule (`schedules`).

Gradient accumulation. Without ``count_fn`` each micro-batch's loss is divided by
``grad_accum_steps`` (and DDP averages over ranks): every micro-batch weighs the same, however
many units it holds, so a step over a micro-batch of 1 masked token and one of 8 is not the
step over the merged batch. With ``count_fn`` each step first reads its ``grad_accum_steps``
micro-batches (the same batches, in the same order), sums their units per term, sums those
over ranks, and calls ``loss_fn(model, batch, denominators)`` with ``denominators[term]`` = the
step's total units of ``term`` (at least 1) ÷ the number of ranks. The loss must then be
Σ over terms of (the term's loss summed over its units in ``batch``) / ``denominators[term]``
(weights allowed), and every logged component the same kind of share (e.g. correct predictions
/ ``denominators[term]``): the trainer backpropagates each micro-batch's loss as it is, sums
loss and components over the micro-batches, and DDP's mean over ranks turns the ÷ ranks back
into the sum, so the gradient is that of Σ unit losses / Σ units over everything the step
saw, on any number of ranks (transformers' ``num_items_in_batch``). The logged values are the
step's per-unit means over all ranks. Outputs in ``output_dir``:

- ``metrics.jsonl``: one JSON object per log/eval event (``step``, ``split``, values);
- ``checkpoint.pt``: model + optimizer (full, unsharded, keyed by parameter name) + scheduler
  + gradient scaler + RNG states of every rank + data position + counters, replaced
  atomically every ``save_every`` steps, at the end, and on Ctrl-C/SIGTERM (not under FSDP,
  where gathering the shards would need every rank);
- ``model/``: the final weights (``model_state.pt``, plus whatever ``save_fn(model,
  directory)`` writes, e.g. the Hugging Face layout); ``best/``: the same for the best
  evaluation when ``metric_for_best`` is set;
- ``loss.png``: the loss curve (when matplotlib is installed).

Nothing on disk is trusted (see `rundir`). ``checkpoint.pt`` holds only tensors and plain values
and is read with ``torch.load(weights_only=True)``, so a doctored file cannot run code; an
unusable one (empty, truncated, a directory, another model's) raises `RunDirectoryError` naming
it. Files are replaced atomically and ``model/``/``best/`` are swapped in whole, so a kill leaves
the old version or the new one; stale temporaries are removed when a run starts. At the start
``metrics.jsonl`` loses a line torn by a kill and the records of steps after the checkpoint (the
start step: 0 for a fresh run), which are trained again, so the log never repeats a step.

Example::

    cfg = TrainConfig(output_dir="runs/x", max_steps=1000, learning_rate=1e-4, warmup_ratio=0.1)
    Trainer(model, loss_fn, IndexedBatches(dataset, 32, collate), cfg, eval_fn).train()
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.batching import as_batch_source
from ..errors import ArgumentTypeError, InputError
from ..modules.encoder import Encoder
from ..notices import waiting
from ..objectives.units import denominators_of_step
from ..runtime import adapt_threads
from .checkpoint import CheckpointMixin, _rng_state, _set_rng_state
from .config import (
    CHECKPOINT_FILE,
    CHECKPOINT_FORMAT,
    METRICS_FILE,
    MODEL_DIRS,
    MODEL_STATE_FILE,
    PLOT_FILE,
    TrainConfig,
    TrainState,
    budget_total,
    warmup_of,
)
from .distributed import (
    DistInfo,
    all_gather_objects,
    all_reduce_mean,
    all_reduce_sum,
    broadcast_object,
    init_distributed,
    set_gradient_sync,
    shard_model,
)
from .mixed_precision import autocast, check_precision, grad_scaler
from .optim import build_optimizer
from .plot import plot_metrics
from .progress import ProgressMixin
from .rundir import (
    RunDirectoryError,
    clean_run_directory,
    load_tensor_file,
    run_lock,
    trim_metrics,
)
from .schedules import build_scheduler, lr_factor

__all__ = [
    "TrainConfig",
    "TrainState",
    "Trainer",
    "unwrap",
    "CHECKPOINT_FILE",
    "METRICS_FILE",
    "CHECKPOINT_FORMAT",
]

logger = logging.getLogger(__name__)


LossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]
CountFn = Callable[[Any], dict[str, int]]
EvalFn = Callable[[nn.Module], dict[str, float]]
SaveFn = Callable[[nn.Module, Path], Any]


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DistributedDataParallel wrapper (or ``model`` itself)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _positional_arity(fn: Callable) -> int:
    """How many positional arguments ``fn`` takes (a large number for ``*args``; 2 when its
    signature cannot be read)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 99
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


#: With a time budget the schedule is planned after this many steps of a run (`Trainer`).
PLAN_AFTER = 3
# Bytes a second assumed for writing the checkpoint and the model (a slow disk), in `reserve_s`.
SAVE_BYTES_PER_S = 100e6
# Seconds kept for drawing loss.png at the end (matplotlib's first import is most of it).
PLOT_S = 1.0


class _Stop(Exception):
    """Raised by the SIGTERM handler; handled like Ctrl-C."""


class Trainer(CheckpointMixin, ProgressMixin):
    """The training loop; see the module docstring.

    Args:
        model: the module to train (its parameters are optimised; tied weights once).
        loss_fn: ``(model, batch) -> (loss, components)``; ``loss`` a scalar float tensor,
            ``components`` floats (or 0-d tensors) logged as ``train`` metrics. With
            ``count_fn``: ``(model, batch, denominators) -> (loss, components)``, normalised by
            ``denominators`` (see the module docstring).
        train_batches: a batch source ``(epoch, start) -> iterator`` (e.g. `IndexedBatches`),
            a factory ``(epoch) -> iterable`` or a re-iterable such as a DataLoader.
        config: `TrainConfig`.
        eval_fn: ``(model) -> {name: float}``; optional.
        dist: the process's `DistInfo`; None = `init_distributed(config.device)`.
        save_fn: ``(model, directory) -> None``, called on rank 0 for ``model/`` and ``best/``
            after ``model_state.pt`` is written (the unwrapped model, under FSDP a plain copy
            holding the gathered weights; e.g.
            ``lambda m, d: m.save_pretrained(d)``); None: ``model_state.pt`` only.
            ``directory`` is a fresh temporary sibling that replaces ``model/``/``best/`` whole
            once ``save_fn`` returns (files of the previous version are not kept).
        save_fn_holds_weights: ``save_fn`` writes the weights (e.g. model.safetensors), so
            ``model/`` gets no ``model_state.pt`` (one copy of the weights per directory) and
            ``best/`` keeps it only until `train` has loaded it back (``load_best_at_end``).
        count_fn: ``(batch) -> {term: units}`` on the micro-batch as the source yields it
            (before it moves to the device); the same keys for every batch and every rank.
            None (default): the model's own ``counts`` when it has one (every objective of
            `bertfamily.objectives`: `PretrainingModel`, ELECTRA, the distillation
            objectives), so the Python API takes the same step as the recipes; a ``loss_fn``
            of two arguments (``lambda m, b: m(b)``) still gets the step's denominators (the
            objective reads them, `objectives.units`). ``False``, or None with a model
            without ``counts``: every micro-batch weighs the same (see the module docstring).
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: LossFn,
        train_batches: Any,
        config: TrainConfig,
        eval_fn: EvalFn | None = None,
        dist: DistInfo | None = None,
        save_fn: SaveFn | None = None,
        count_fn: CountFn | None | bool = None,
        save_fn_holds_weights: bool = False,
    ) -> None:
        self.config = config
        self.save_fn = save_fn
        self.save_fn_holds_weights = save_fn is not None and save_fn_holds_weights
        self._implicit_units = False  # the objective reads the step's denominators itself
        if count_fn is None and callable(getattr(model, "counts", None)):
            count_fn = model.counts  # the objective knows its units
            self._implicit_units = _positional_arity(loss_fn) < 3
        elif count_fn is False or count_fn is True:
            if count_fn is True:
                raise ArgumentTypeError(
                    "count_fn is a function, None (the model's counts) or False"
                )
            count_fn = None
        self.count_fn = count_fn
        self._count_keys: list[str] | None = None
        self.dist = dist or init_distributed(config.device)
        check_precision(config.precision, self.dist.device)
        self.scaler = grad_scaler(config.precision, self.dist.device)
        encoders = [m for m in model.modules() if isinstance(m, Encoder)]
        if config.checkpoint_activations and not encoders:
            raise InputError(
                "checkpoint_activations needs a model with an Encoder trunk; this "
                f"{type(model).__name__} has none"
            )
        for encoder in encoders:
            encoder.checkpoint_activations = config.checkpoint_activations
        self.model = model.to(self.dist.device)
        self.loss_fn, self.eval_fn = loss_fn, eval_fn
        self.source = as_batch_source(train_batches)
        self.wrapped: nn.Module = self.model
        # FSDP: an empty (meta) copy of the unsharded model, filled with gathered weights on
        # rank 0 for eval_fn and save_fn (which expect a plain module)
        self._template: nn.Module | None = None
        if self.dist.distributed and config.parallel == "fsdp":
            self._template = copy.deepcopy(self.model).to("meta")
            self.wrapped = shard_model(self.model, self.dist)
        elif self.dist.distributed:
            ids = [self.dist.device.index] if self.dist.device.type == "cuda" else None
            self.wrapped = nn.parallel.DistributedDataParallel(
                self.model, device_ids=ids, find_unused_parameters=config.find_unused_parameters
            )
        self.optimizer = build_optimizer(
            self.model,
            config.learning_rate,
            config.weight_decay,
            config.adam_betas,
            config.adam_eps,
        )
        self.scheduler = build_scheduler(
            self.optimizer,
            config.schedule,
            config.num_warmup_steps,
            config.max_steps,
            from_zero=config.transformers_warmup,
        )
        self.state = TrainState()
        self.output_dir = Path(config.output_dir)
        self._batches = None
        self._step_start: tuple[int, int, dict] | None = None

    def _prepare_run_directory(self) -> None:
        """Rank 0, before training: refuse a layout that cannot work (a directory where a file
        belongs or the reverse; a symbolic link where the run writes: the log would be appended
        through it, ``model/`` and ``best/`` swapped in over it) and remove stale temporaries
        of interrupted writes."""
        for name in (METRICS_FILE, *MODEL_DIRS):
            p = self.output_dir / name
            if p.is_symlink():
                raise RunDirectoryError(
                    f"{p} is a symbolic link (to {os.readlink(p)}); a run writes only inside "
                    f"{self.output_dir}: remove the link or give another output directory"
                )
        for name in (CHECKPOINT_FILE, METRICS_FILE, PLOT_FILE):
            p = self.output_dir / name
            if p.exists() and not p.is_file():
                raise RunDirectoryError(f"{p} is a directory, not a file; move it away")
        for name in MODEL_DIRS:
            p = self.output_dir / name
            if p.exists() and not p.is_dir():
                raise RunDirectoryError(f"{p} is a file, not a directory; move it away")
        clean_run_directory(self.output_dir, MODEL_DIRS)

    # ------------------------------------------------------------------ metrics

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        path = self.output_dir / METRICS_FILE
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:  # O_NOFOLLOW: a link in the log's place is refused, never appended through
            fd = os.open(path, flags, 0o666)
        except OSError as e:
            raise RunDirectoryError(
                f"cannot append to the metrics log {path}: {e.strerror}"
                + (" (it is a symbolic link; remove it)" if path.is_symlink() else "")
            ) from None
        with open(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def evaluate(self) -> dict[str, float]:
        """Run ``eval_fn`` on rank 0 (no grad, eval mode) and share the result with all ranks.
        Keys get an ``eval_`` prefix. Under FSDP every rank must call it: the shards are
        gathered into a plain copy of the model on rank 0, which ``eval_fn`` gets."""
        result: dict[str, float] = {}
        began = time.monotonic()
        model = self._plain_model() if self.eval_fn is not None else None
        if self.eval_fn is not None and self.dist.is_main:
            was_training = model.training
            model.eval()
            with (
                self._phase(f"evaluating at step {self.state.step}"),
                torch.no_grad(),
                self._autocast(),
            ):
                raw = self.eval_fn(model)
            model.train(was_training)
            result = {
                (k if k.startswith("eval_") else f"eval_{k}"): float(v) for k, v in raw.items()
            }
        result = broadcast_object(result)
        self._eval_s = time.monotonic() - began
        return result

    def reserve_s(self) -> float:
        """Seconds the end of a run needs after the loop, kept out of ``max_time_s``: the last
        evaluation's duration (measured; 0 before the first) for the loop's last evaluation
        and each of ``evals_after``, and
        writing the checkpoint and the model: 4 bytes of state a parameter byte (weights, two
        Adam moments, the saved model) at `SAVE_BYTES_PER_S`; `PLOT_S` for loss.png."""
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        evals = (self.eval_fn is not None) + self.config.evals_after
        evaluation = getattr(self, "_eval_s", 0.0) * evals
        return evaluation + 4 * weights / SAVE_BYTES_PER_S + PLOT_S

    def _autocast(self):
        return autocast(self.config.precision, self.dist.device)

    def _check_best(self, metrics: dict[str, float]) -> bool:
        """Update best/early-stopping state; True when training should stop."""
        name = self.config.metric_for_best
        if name is None:
            return False
        key = name if name.startswith("eval_") else f"eval_{name}"
        if key not in metrics:
            raise InputError(f"metric_for_best {name!r} not among eval metrics {sorted(metrics)}")
        value, best = metrics[key], self.state.best_metric
        better = best is None or (value > best if self.config.greater_is_better else value < best)
        if better:
            self.state.best_metric, self.state.best_step, self.state.bad_evals = (
                value,
                self.state.step,
                0,
            )
            self._save_model(self.output_dir / "best")
            return False
        self.state.bad_evals += 1
        patience = self.config.early_stopping_patience
        return patience is not None and self.state.bad_evals >= patience

    # ------------------------------------------------------------------ the loop

    def _next_batch(self) -> Any:
        """The next batch, moving to the next epoch when one runs out. Advances the data
        position in ``self.state``."""
        for _ in range(2):
            if self._batches is None:
                self._batches = iter(self.source(self.state.epoch, start=self.state.batch_in_epoch))
            try:
                batch = next(self._batches)
            except StopIteration:
                if self.state.batch_in_epoch == 0:
                    raise InputError(
                        f"the batch source yielded no batch for epoch {self.state.epoch}"
                    ) from None
                self.state.epoch += 1
                self.state.batch_in_epoch = 0
                self._batches = None
                continue
            self.state.batch_in_epoch += 1
            return batch
        raise InputError(f"the batch source yielded no batch for epoch {self.state.epoch}")

    def _denominators(self, batches: list[Any]) -> dict[str, float]:
        """``count_fn``'s units of the step's micro-batches, summed per term over them and over
        ranks, each (at least 1) divided by the number of ranks."""
        totals: dict[str, float] = {}
        for batch in batches:
            adapt_threads()
            counts = self.count_fn(batch)
            keys = sorted(counts)
            if self._count_keys is None:
                seen = all_gather_objects(keys)  # once: every rank must count the same terms
                if any(other != keys for other in seen):
                    raise InputError(f"count_fn gives different terms on different ranks: {seen}")
                self._count_keys = keys
            if keys != self._count_keys:
                raise InputError(
                    f"count_fn gave the terms {keys}, earlier batches {self._count_keys}"
                )
            for name, n in counts.items():
                n = int(n)
                if n < 0:
                    raise InputError(f"count_fn gave {n} units for {name!r}")
                totals[name] = totals.get(name, 0.0) + n
        totals = all_reduce_sum(totals, self.dist.device)
        world = self.dist.world_size
        return {name: max(n, 1.0) / world for name, n in totals.items()}

    def _train_step(self) -> dict[str, float]:
        """One optimizer step over ``grad_accum_steps`` micro-batches; returns the step's loss
        and components (this rank: the mean over micro-batches, or with ``count_fn`` the sum
        of their shares, which the mean over ranks turns into the global per-unit mean)."""
        adapt_threads()  # the thread governor's look between steps (a no-op without one)
        cfg, k = self.config, self.config.grad_accum_steps
        sums: dict[str, float] = {}
        self._step_start = (self.state.epoch, self.state.batch_in_epoch, _rng_state())
        if self.count_fn is not None:
            micro = [self._next_batch() for _ in range(k)]  # read the step's batches first
            denominators = self._denominators(micro)
            extra, divisor = (denominators,), 1
        else:
            micro, extra, divisor = None, (), k
        for i in range(k):
            raw = micro[i] if micro is not None else self._next_batch()
            batch = _to_device(raw, self.dist.device)
            with set_gradient_sync(self.wrapped, i == k - 1):
                with self._autocast(), denominators_of_step(extra[0] if extra else None):
                    if self._implicit_units:
                        loss, parts = self.loss_fn(self.wrapped, batch)
                    else:
                        loss, parts = self.loss_fn(self.wrapped, batch, *extra)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"loss is {loss.item()} at step {self.state.step}")
                self.scaler.scale(loss / divisor).backward()
            for name, v in {"loss": loss, **parts}.items():
                v = v.detach() if isinstance(v, torch.Tensor) else v
                sums[name] = sums.get(name, 0.0) + float(v) / divisor
        if cfg.max_grad_norm:
            self.scaler.unscale_(self.optimizer)  # fp16: clip the true gradients
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
            if hasattr(norm, "full_tensor"):  # FSDP: a replicated DTensor
                norm = norm.full_tensor()
            sums["grad_norm"] = float(norm)
        sums["lr"] = self.scheduler.get_last_lr()[0]
        self.scaler.step(self.optimizer)  # fp16: skipped when a gradient is inf/NaN
        self.scaler.update()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self._step_start = None
        return sums

    def train(self) -> dict[str, Any]:
        """Train until ``max_steps``, the time budget, early stopping or an interrupt.

        Returns:
            ``{"step", "stopped" ("max_steps" | "time" | "early_stopping" | "interrupted"),
            "elapsed_s", "train": last logged train metrics, "eval": last eval metrics,
            "best_metric", "best_step"}``.

        Raises:
            FloatingPointError: a non-finite loss.
            ValueError: an empty batch source or an unknown ``metric_for_best``.
            RunDirectoryError: (a ValueError) ``resume`` and an unusable ``checkpoint.pt`` (see
                `load_checkpoint`), a run directory whose layout cannot work, or one another
                run is writing (`run_lock`).
        """
        if not self.dist.is_main:
            return self._train()
        with run_lock(self.output_dir):  # a second run into this directory is refused
            return self._train()

    def _train(self) -> dict[str, Any]:
        cfg = self.config
        if self.dist.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self._prepare_run_directory()
        if cfg.resume and (self.checkpoint_path.exists() or self.checkpoint_path.is_symlink()):
            self.load_checkpoint()
        else:
            random.seed(cfg.seed + self.dist.rank)
            np.random.seed(cfg.seed + self.dist.rank)
            torch.manual_seed(cfg.seed + self.dist.rank)
        if self.dist.is_main:  # a torn last line, and the records of steps to be redone
            trim_metrics(self.output_dir / METRICS_FILE, self.state.step)
        self.wrapped.train()
        self._batches = None
        start, stopped = time.monotonic(), "max_steps"
        budget_start = cfg.budget_start if cfg.budget_start is not None else start
        if (
            cfg.eval_at_start
            and self.eval_fn is not None
            and cfg.metric_for_best is not None
            and self.state.step == 0
            and self.state.best_step is None
        ):
            self._eval_and_check()  # the starting model: the first "best"
        window: dict[str, float] = {}
        window_n, last_train = 0, {}
        previous = None
        if self.dist.is_main:
            with contextlib.suppress(ValueError):  # not the main thread: keep the default
                previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        bar = self._bar = self._progress()
        step0 = self.state.step
        first_done: float | None = None  # when this call's first step ended (its speed excluded)
        if self.state.planned_steps is not None:  # resumed: the plan of the earlier call
            self._plan_schedule(self.state.planned_steps)
        try:
            while self.state.step < cfg.max_steps:
                if cfg.max_time_s is not None and self._all_agree(
                    time.monotonic() - budget_start >= cfg.max_time_s - self.reserve_s()
                ):
                    stopped = "time"
                    break
                values = self._train_step()
                for name, v in values.items():
                    window[name] = window.get(name, 0.0) + v
                window_n += 1
                step = self.state.step
                if step - step0 == 1:
                    first_done = time.monotonic()
                elif step - step0 == PLAN_AFTER and cfg.max_time_s is not None:
                    self._plan_for_time(step, time.monotonic(), budget_start, first_done)
                if bar is not None:
                    bar[0].update(
                        bar[1],
                        completed=step,
                        total=budget_total(
                            step,
                            cfg.max_steps,
                            time.monotonic() - budget_start,
                            cfg.max_time_s and cfg.max_time_s - self.reserve_s(),
                            step0,
                        ),
                        description=f"loss {values['loss']:.4f}",
                    )
                if (cfg.log_every and step % cfg.log_every == 0) or step == cfg.max_steps:
                    means = all_reduce_mean(
                        {n: v / window_n for n, v in window.items()}, self.dist.device
                    )
                    last_train = means
                    self._log(
                        {
                            "step": step,
                            "split": "train",
                            "epoch": self.state.epoch,
                            "time_s": round(time.monotonic() - start, 3),
                            **means,
                        }
                    )
                    window, window_n = {}, 0
                if cfg.eval_every and step % cfg.eval_every == 0 and self.eval_fn is not None:
                    if self._eval_and_check():
                        stopped = "early_stopping"
                        break
                if cfg.save_every and step % cfg.save_every == 0:
                    self.save_checkpoint()
        except (KeyboardInterrupt, _Stop):
            stopped = "interrupted"
            logger.warning("interrupted at step %d; saving a checkpoint", self.state.step)
            self._finish_bar(bar)
            self._rewind_position()
            self.save_checkpoint(gather=False)
            return self._summary(stopped, start, last_train)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self._finish_bar(bar)
            self._bar = None
        if window_n:
            last_train = all_reduce_mean(
                {n: v / window_n for n, v in window.items()}, self.dist.device
            )
            self._log(
                {
                    "step": self.state.step,
                    "split": "train",
                    "epoch": self.state.epoch,
                    "time_s": round(time.monotonic() - start, 3),
                    **last_train,
                }
            )
        if self.eval_fn is not None and self.state.last_eval.get("step") != self.state.step:
            if stopped != "early_stopping":
                self._eval_and_check()
        with waiting(f"saving the checkpoint and the model to {self.output_dir}"):
            self.save_checkpoint()
            self._save_model(self.output_dir / "model")
        if self.dist.is_main:
            plot_metrics(self.output_dir / METRICS_FILE, self.output_dir / PLOT_FILE)
        if cfg.eval_at_start and self.state.best_step == 0 and self.state.step > 0:
            logger.warning(
                "the trained model evaluates worse than the starting model on the eval set "
                "(%s %.4g at step 0, never bettered): best/ keeps the starting model%s",
                cfg.metric_for_best,
                self.state.best_metric,
                ", which is the model loaded at the end" if cfg.load_best_at_end else "",
            )
        if cfg.load_best_at_end and self.state.best_step is not None:
            best_path = self.output_dir / "best" / MODEL_STATE_FILE
            self._load_model_state(load_tensor_file(best_path, "model state"), best_path)
            if self.save_fn_holds_weights:
                self._all_agree(True)  # a barrier: every rank has read it before it goes
                if self.dist.is_main:  # loaded: best/ keeps the one copy save_fn wrote
                    best_path.unlink(missing_ok=True)
        return self._summary(stopped, start, last_train)

    def _all_agree(self, flag: bool) -> bool:
        """True on every rank when it is True on any (so all ranks stop at the same step)."""
        if not self.dist.distributed:
            return flag
        t = torch.tensor([float(flag)], device=self.dist.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return bool(t.item())

    def _eval_and_check(self) -> bool:
        metrics = self.evaluate()
        stop = self._check_best(metrics)
        self.state.last_eval = {"step": self.state.step, **metrics}
        self._log({"step": self.state.step, "split": "eval", **metrics})
        return stop

    def _rewind_position(self) -> None:
        """After an interrupt inside a step, that step's micro-batches were read but not
        applied: point the data position and the RNG states back at the step's start and drop
        the gradients."""
        if self._step_start is not None:
            self.state.epoch, self.state.batch_in_epoch, rng = self._step_start
            _set_rng_state(rng)  # dropout of the abandoned micro-batches is drawn again
            self._step_start = None
        self.optimizer.zero_grad(set_to_none=True)

    def _plan_for_time(self, step: int, now: float, start: float, first_done: float) -> None:
        """With a time budget: plan the schedule for the steps that fit, at the speed of the
        steps after the first (the same plan on every rank: their mean speed)."""
        if self.state.planned_steps is not None:
            return
        cfg = self.config
        per_step = all_reduce_mean({"s": (now - first_done) / (PLAN_AFTER - 1)}, self.dist.device)[
            "s"
        ]
        left = cfg.max_time_s - self.reserve_s() - (now - start)
        fits = step + int(max(0.0, left) / max(per_step, 1e-9))
        if fits < cfg.max_steps:
            self._plan_schedule(max(fits, step))
            logger.info(
                "time budget %.0f s: the schedule is planned for %d steps (%.2f s a step), "
                "not max_steps=%d",
                cfg.max_time_s,
                self.state.planned_steps,
                per_step,
                cfg.max_steps,
            )

    def _plan_schedule(self, total: int) -> None:
        """Make the learning-rate schedule ``total`` steps long (warm-up: ``warmup_steps``,
        or ``warmup_ratio`` of ``total``), from the next step on."""
        cfg = self.config
        # warmup_steps as given (a run that stops in it says so), or warmup_ratio of the plan
        self._warmup = cfg.warmup_steps or warmup_of(cfg.warmup_ratio, total, cfg)
        factor = lr_factor(cfg.schedule, self._warmup, total, from_zero=cfg.transformers_warmup)
        sched = self.scheduler
        sched.lr_lambdas = [factor] * len(sched.lr_lambdas)
        now = factor(sched.last_epoch)  # the next step already trains at the new plan's rate
        for group, base in zip(self.optimizer.param_groups, sched.base_lrs):
            group["lr"] = base * now
        sched._last_lr = [g["lr"] for g in self.optimizer.param_groups]
        self.state.planned_steps = total

    def _summary(self, stopped: str, start: float, last_train: dict) -> dict[str, Any]:
        warmup = getattr(self, "_warmup", self.config.num_warmup_steps)
        notes = []
        if stopped in ("time", "interrupted") and self.state.step < warmup:
            notes.append(
                f"stopped at step {self.state.step}, before the learning-rate warm-up ended "
                f"(step {warmup}): the model trained at no more than "
                f"{self.state.step / max(warmup, 1):.0%} of the peak rate; give more time or "
                "fewer warm-up steps"
            )
            logger.warning(notes[-1])
        return {
            "planned_steps": self.state.planned_steps or self.config.max_steps,
            "notes": notes,
            "step": self.state.step,
            "stopped": stopped,
            "elapsed_s": round(time.monotonic() - start, 3),
            "train": last_train,
            "eval": {k: v for k, v in self.state.last_eval.items() if k != "step"},
            "best_metric": self.state.best_metric,
            "best_step": self.state.best_step,
        }

    def _on_sigterm(self, signum, frame) -> None:
        raise _Stop()
