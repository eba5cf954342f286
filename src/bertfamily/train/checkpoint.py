"""Checkpoints of a training run: ``checkpoint.pt`` (model, optimizer, scheduler, gradient scaler,
counters, every rank's RNG state; read with ``torch.load(weights_only=True)``) and the
``model/``/``best/`` directories, written atomically. `CheckpointMixin` holds the `Trainer`'s
methods that write and read them."""

from __future__ import annotations

import copy
import dataclasses
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import ModelDirectoryError
from ..files import atomic_directory, atomic_write
from ..modules.stored import check_stored_tensors
from .config import (
    _CHECKPOINT_KEYS,
    CHECKPOINT_FILE,
    CHECKPOINT_FORMAT,
    MODEL_STATE_FILE,
    TrainState,
)
from .distributed import (
    all_gather_objects,
    full_state_dicts,
    load_full_state_dicts,
)
from .rundir import RunDirectoryError, load_tensor_file

logger = logging.getLogger(__name__)


def _rng_state() -> dict[str, Any]:
    """The RNG states of python, numpy and torch as plain values (tensors, ints, floats, lists):
    loadable with ``weights_only=True``."""
    version, internal, gauss = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = {
        "python": [version, list(internal), gauss],
        "numpy": {
            "bit_generator": str(name),
            "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `_rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    n = state["numpy"]
    key = n["key"].numpy().astype(np.uint32)
    np.random.set_state((n["bit_generator"], key, n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


_COUNTERS = ("step", "epoch", "batch_in_epoch", "bad_evals")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_counters(payload: dict[str, Any], path: Path) -> None:
    """Refuse a checkpoint whose counters cannot be those of a run: negative or non-integer
    step/epoch/position, a best step after the step, a schedule or optimizer at another step,
    or optimizer moments that do not fit the saved weights (`RunDirectoryError` naming
    ``path`` and the entry)."""
    state = payload["state"]
    if not isinstance(state, dict):
        raise RunDirectoryError(f"{path}: the counters ('state') are a {type(state).__name__}")
    known = {f.name for f in dataclasses.fields(TrainState)}
    unknown = sorted(map(str, set(state) - known))
    if unknown:
        raise RunDirectoryError(f"{path}: unknown counters {unknown} in 'state'")
    for name in _COUNTERS:
        if name in state and not _count(state[name]):
            raise RunDirectoryError(
                f"{path}: counter state.{name} is {state[name]!r}; it must be an integer >= 0"
            )
    step = state.get("step", 0)
    best_step = state.get("best_step")
    if best_step is not None and not (_count(best_step) and best_step <= step):
        raise RunDirectoryError(
            f"{path}: state.best_step is {best_step!r}; it must be an integer between 0 and "
            f"the step ({step})"
        )
    best = state.get("best_metric")
    if best is not None and not (
        isinstance(best, (int, float)) and not isinstance(best, bool) and np.isfinite(best)
    ):
        raise RunDirectoryError(f"{path}: state.best_metric is {best!r}, not a finite number")
    if not isinstance(state.get("last_eval", {}), dict):
        raise RunDirectoryError(f"{path}: state.last_eval is not a dict")
    scheduler = payload["scheduler"]
    last = scheduler.get("last_epoch") if isinstance(scheduler, dict) else None
    if last is not None and last != step:
        raise RunDirectoryError(
            f"{path}: the learning-rate schedule is at step {last!r} but the counters at step "
            f"{step}; the file was edited or mixes two runs"
        )
    optim = payload["optimizer"]
    moments = optim.get("state") if isinstance(optim, dict) else None
    if not isinstance(moments, dict):
        raise RunDirectoryError(f"{path}: the optimizer state has no 'state' dict")
    weights = payload["model"]
    for name, entry in moments.items():
        if not isinstance(entry, dict):
            raise RunDirectoryError(f"{path}: optimizer state of {name!r} is not a dict")
        done = entry.get("step")
        done = float(done) if isinstance(done, (torch.Tensor, int, float)) else None
        if done is None or not (np.isfinite(done) and 0 <= done <= step):
            raise RunDirectoryError(
                f"{path}: optimizer step of {name!r} is {entry.get('step')!r}; it must be "
                f"between 0 and the step ({step})"
            )
        weight = weights.get(name) if isinstance(name, str) else None
        for key, value in entry.items():
            if key == "step" or not isinstance(value, torch.Tensor):
                continue
            if weight is not None and tuple(value.shape) != tuple(weight.shape):
                raise RunDirectoryError(
                    f"{path}: optimizer {key} of {name!r} has shape {tuple(value.shape)}, the "
                    f"weight {tuple(weight.shape)}"
                )
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise RunDirectoryError(f"{path}: optimizer {key} of {name!r} is not finite")


class CheckpointMixin:
    """The `Trainer`'s checkpoint methods (they use its ``model``, ``optimizer``, ``scheduler``,
    ``scaler``, ``state``, ``config``, ``dist``, ``output_dir``, ``save_fn`` and ``_template``)."""

    @property
    def checkpoint_path(self) -> Path:
        """``output_dir / checkpoint.pt``."""
        return self.output_dir / CHECKPOINT_FILE

    def save_checkpoint(self, gather: bool = True) -> None:
        """Write ``checkpoint.pt`` atomically (rank 0). ``gather``: collect every rank's RNG
        state (a collective call; False on interrupt, when other ranks may be gone)."""
        rngs = all_gather_objects(_rng_state()) if gather else [_rng_state()]
        if not gather and self._template is not None:
            # gathering FSDP shards needs every rank, which an interrupt may have stopped
            logger.warning(
                "interrupted FSDP run: no checkpoint written at step %d", self.state.step
            )
            return
        model_state, optim_state = full_state_dicts(self.model, self.optimizer)
        if not self.dist.is_main:
            return
        payload = {
            "format": CHECKPOINT_FORMAT,
            "model": model_state,
            "optimizer": optim_state,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "state": dataclasses.asdict(self.state),
            "rng": rngs,
            "config": self.config.to_dict(),
        }
        atomic_write(self.checkpoint_path, lambda tmp: torch.save(payload, tmp))
        logger.info("checkpoint at step %d -> %s", self.state.step, self.checkpoint_path)

    def load_checkpoint(self, path: str | Path | None = None) -> None:
        """Restore everything `save_checkpoint` wrote (each rank takes its own RNG state;
        with a different number of processes, rank r takes state r mod saved ranks).

        The file is loaded with ``torch.load(weights_only=True)``: it can hold nothing but
        tensors and plain values, so loading it runs no code.

        Raises:
            RunDirectoryError: the file is missing, a directory, empty, truncated or corrupt,
                refused (it holds other Python objects), not a checkpoint of this trainer's
                format, or from another model (parameter names or shapes differ) or optimizer.
                The model is unchanged unless the error is raised while restoring the
                optimizer, scheduler or RNG state.
        """
        path = Path(path) if path else self.checkpoint_path
        payload = load_tensor_file(path, "checkpoint")
        if not isinstance(payload, dict) or any(k not in payload for k in _CHECKPOINT_KEYS):
            got = sorted(map(str, payload)) if isinstance(payload, dict) else type(payload).__name__
            raise RunDirectoryError(
                f"{path} is not a training checkpoint: expected the entries "
                f"{list(_CHECKPOINT_KEYS)}, found {got}"
            )
        if payload.get("format") != CHECKPOINT_FORMAT:
            raise RunDirectoryError(
                f"{path} has checkpoint format {payload.get('format')!r}; this version reads "
                f"format {CHECKPOINT_FORMAT} only"
            )
        self._check_model_state(payload["model"], path)
        _check_counters(payload, path)
        rngs = payload["rng"]
        try:
            load_full_state_dicts(
                self.model, payload["model"], self.optimizer, payload["optimizer"]
            )
            self.scheduler.load_state_dict(payload["scheduler"])
            if payload.get("scaler"):  # fp16 runs; empty for fp32/bf16
                self.scaler.load_state_dict(payload["scaler"])
            state = TrainState(**payload["state"])
            _set_rng_state(rngs[self.dist.rank % len(rngs)])
        except (ValueError, KeyError, TypeError, IndexError, RuntimeError, ZeroDivisionError) as e:
            raise RunDirectoryError(
                f"{path} does not match this run (optimizer, schedule, counters or RNG state): "
                f"{type(e).__name__}: {e}"
            ) from None
        self.state = state
        logger.info("resumed from %s at step %d", path, self.state.step)

    def _load_model_state(self, saved: Any, path: Path) -> None:
        """Load ``saved`` (read from ``path``) into the model after `_check_model_state`."""
        self._check_model_state(saved, path)
        load_full_state_dicts(self.model, saved)

    def _check_model_state(self, saved: Any, path: Path) -> None:
        """Check that ``saved`` (read from ``path``) names the model's tensors with the same
        (full, unsharded) shapes, and that they pass the one check of stored weights that model
        directories pass too (`modules.stored.check_stored_tensors`: stored dtypes, every value
        finite); raises `RunDirectoryError` otherwise."""
        if not isinstance(saved, dict):
            raise RunDirectoryError(f"{path}: the model state is a {type(saved).__name__}")
        odd = [k for k, v in saved.items() if not isinstance(v, torch.Tensor)]
        if odd:
            raise RunDirectoryError(
                f"{path}: model state entry {odd[0]!r} is a {type(saved[odd[0]]).__name__}, "
                "not a tensor; the checkpoint is corrupt, it is not loaded"
            )
        # every tensor, integers included (an int64 weight is refused, not cast); a half-precision
        # model's own weights are widened here (exact) so the check does not warn about them
        halves = (torch.float16, torch.bfloat16)
        tensors = {k: v.float() if v.dtype in halves else v for k, v in saved.items()}
        try:
            check_stored_tensors(tensors, path)  # the finite and dtype check, nothing converted
        except ModelDirectoryError as e:
            raise RunDirectoryError(str(e)) from e
        own = self.model.state_dict()
        missing = [k for k in own if k not in saved]
        unexpected = [k for k in saved if k not in own]
        shapes = [
            f"{k}: saved {tuple(saved[k].shape) if isinstance(saved[k], torch.Tensor) else '?'}"
            f", model {tuple(v.shape)}"
            for k, v in own.items()
            if k in saved and not (isinstance(saved[k], torch.Tensor) and saved[k].shape == v.shape)
        ]
        if missing or unexpected or shapes:
            problems = []
            for what, names in (("missing", missing), ("unexpected", unexpected)):
                if names:
                    problems.append(f"{len(names)} {what} (e.g. {', '.join(map(str, names[:3]))})")
            if shapes:
                problems.append(f"{len(shapes)} of another shape (e.g. {'; '.join(shapes[:2])})")
            raise RunDirectoryError(
                f"{path} holds the weights of another model: tensors {', '.join(problems)}"
            )

    def _plain_model(self) -> nn.Module | None:
        """The model with all its weights, for ``eval_fn`` and ``save_fn``: the model itself,
        or under FSDP (a collective call) a rank-0 copy filled with the gathered weights (None
        on the other ranks)."""
        if self._template is None:
            return self.model
        state, _ = full_state_dicts(self.model)
        if not self.dist.is_main:
            return None
        plain = copy.deepcopy(self._template).to_empty(device=self.dist.device)
        plain.load_state_dict(state)
        return plain.train(self.model.training)

    def _save_model(self, directory: Path) -> None:
        """Write ``directory`` (``model/`` or ``best/``) all-or-nothing: ``model_state.pt`` and
        what ``save_fn`` writes go into a sibling temporary directory that is swapped in. Call
        it on every rank (FSDP gathers the weights); rank 0 writes."""
        model = self._plain_model()
        if not self.dist.is_main:
            return
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        # a save_fn that writes the weights itself leaves model_state.pt out of its directories
        # (one copy each), but for ``best/`` while the run may still load it back at the end
        keep = not self.save_fn_holds_weights or (
            directory.name == "best" and self.config.load_best_at_end
        )
        with atomic_directory(directory, keep_existing=False, inside=self.output_dir) as tmp:
            if keep:
                atomic_write(tmp / MODEL_STATE_FILE, lambda t: torch.save(state, t))
            if self.save_fn is not None:
                self.save_fn(model, tmp)
