"""Adaptive early exit (FastBERT, Liu et al. 2020, §3.3): each sample leaves the encoder at the
first layer whose student classifier is sure enough — its normalised entropy below ``speed`` —
and the batch shrinks as samples leave (the remaining rows are re-planned as a forward of those
rows alone would plan them, `Encoder.keep_rows`).

``speed`` 0: no sample exits early and the logits are the full model's, bit for bit; ``speed``
1 (the maximum: the normalised entropy is at most 1): every sample exits after layer 1.

Shapes: B batch, T sequence, H hidden, C classes, L layer steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from ...errors import InputError
from ...heads.early_exit import StudentClassifiers, load_students, normalized_entropy
from ...inference.batches import TokenRows
from ...objectives.self_distillation import key_mask
from .classify import TextClassifier

__all__ = ["EarlyExitOutput", "early_exit_forward", "EarlyExitModel", "EarlyExitClassifier"]


@dataclass
class EarlyExitOutput:
    """Attributes:
    logits: (B, C) float32 logits of the classifier each row exited at.
    exit_layers: (B,) int64, the 1-based layer step each row left after (L: the teacher).
    uncertainty: (B,) float32 normalised entropy of the exiting classifier's distribution.
    """

    logits: torch.Tensor
    exit_layers: torch.Tensor
    uncertainty: torch.Tensor


def _check_speed(speed: float) -> float:
    speed = float(speed)
    if not 0.0 <= speed <= 1.0:
        raise InputError(f"speed must lie in [0, 1], got {speed}")
    return speed


@torch.no_grad()
def early_exit_forward(
    model,
    students: StudentClassifiers,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    *,
    speed: float,
) -> EarlyExitOutput:
    """Classify a batch, each row leaving at its first confident layer.

    After layer step l < L, student l scores the rows still running; a row whose normalised
    entropy (`normalized_entropy`) is below ``speed`` takes that student's logits and leaves
    the batch. The rows that reach layer L get the model's own task head (the teacher), run
    exactly as `Model.forward` runs it.

    Args:
        model: a `Model` with a "classify" head (eval mode), L ≥ 2 layer steps.
        students: its L - 1 `StudentClassifiers`.
        input_ids, attention_mask, token_type_ids, position_ids: as `Model.forward`
            (attention_mask may be a (B, T, T) visibility matrix).
        speed: the threshold in [0, 1].

    Raises:
        InputError: speed outside [0, 1]; a model without a classify head or students of
            another depth.
    """
    speed = _check_speed(speed)
    enc = model.encoder
    L = len(enc.schedule)
    if model.task != "classify":
        raise InputError(f"early exit needs a 'classify' head, the model has {model.heads}")
    if len(students) != L - 1:
        raise InputError(f"the model has {L} layer steps but {len(students)} students (need L-1)")
    extra = {}
    if model.default_inputs is not None:
        glob = model.default_inputs(input_ids, attention_mask).get("global_attention_mask")
        extra = {"global_attention_mask": glob} if glob is not None else {}
    run = enc.begin(input_ids, attention_mask, token_type_ids, position_ids, **extra)
    B = input_ids.shape[0]
    logits = torch.empty(B, model.config.num_labels, device=input_ids.device)
    exits = torch.full((B,), L, dtype=torch.long, device=input_ids.device)
    uncertainty = torch.empty(B, device=input_ids.device)
    rows = torch.arange(B, device=input_ids.device)  # batch rows still running
    for step in range(L - 1):
        enc.step(run)
        scores = students.students[step](run.hidden(), key_mask(run.attention_mask))  # (b, C)
        u = normalized_entropy(scores.float().softmax(-1))  # (b,)
        done = torch.ones_like(u, dtype=torch.bool) if speed >= 1.0 else u < speed
        if bool(done.any()):
            logits[rows[done]] = scores[done].float()
            exits[rows[done]], uncertainty[rows[done]] = step + 1, u[done]
            if bool(done.all()):
                return EarlyExitOutput(logits, exits, uncertainty)
            keep = (~done).nonzero()[:, 0]
            rows, run = rows[keep], enc.keep_rows(run, keep)
    enc.step(run)
    hidden = run.hidden()  # (b, T, H)
    pooled = enc.pooler(hidden) if enc.pooler is not None else None
    scores = model.task_head(hidden, pooled).float()  # (b, C): the teacher
    logits[rows] = scores
    uncertainty[rows] = normalized_entropy(scores.softmax(-1))
    return EarlyExitOutput(logits, exits, uncertainty)


class EarlyExitModel(nn.Module):
    """A classify model and its students called like the model: ``runner(**batch)`` →
    ``logits`` (B, C) and ``exit_layers`` (B,), for code that forwards rows through a model
    (`data.task_data.forward_rows`, `TaskData.evaluate`). It counts the exits it made.

    Args:
        model: a `Model` with a "classify" head; students: its `StudentClassifiers`;
        speed: the threshold in [0, 1].
    """

    def __init__(self, model, students: StudentClassifiers, speed: float) -> None:
        super().__init__()
        self.model, self.students, self.speed = model, students, _check_speed(speed)
        self.exits: list[int] = []

    def forward(self, **batch: torch.Tensor) -> SimpleNamespace:
        """The batch's early-exit logits (B, C) and exit layers (B,)."""
        out = early_exit_forward(self.model, self.students, **batch, speed=self.speed)
        self.exits.extend(out.exit_layers.tolist())
        return SimpleNamespace(
            logits=out.logits, exit_layers=out.exit_layers, start_logits=None, end_logits=None
        )

    def mean_exit_layer(self) -> float:
        """The mean exit layer over every row run so far (nan before any)."""
        return sum(self.exits) / len(self.exits) if self.exits else float("nan")


class EarlyExitClassifier(TextClassifier):
    """A self-distilled classifier directory (`TextClassifier` plus ``early_exit.*``, written
    by ``bertfamily finetune --self-distill``): raw text → labels, each text leaving the
    encoder at its first confident layer. Every label dict also carries ``exit_layer`` (the
    1-based layer the text left after).

    Args:
        path, max_length, device, dtype: as `TextClassifier`.
        speed: the default threshold in [0, 1] (0: the full model; higher: faster).

    Raises:
        ModelDirectoryError: the directory holds no students.
    """

    def __init__(
        self,
        path: str | Path,
        max_length: int | None = None,
        *,
        speed: float = 0.5,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype | None = "auto",
    ) -> None:
        super().__init__(path, max_length, device=device, dtype=dtype)
        self.speed = _check_speed(speed)
        self.students = load_students(self.directory).to(self.device)
        self.num_layers = len(self.model.encoder.schedule)

    def run_tokenized(
        self,
        tokens: TokenRows,
        *,
        speed: float | None = None,
        top_k: int | None = 1,
        function_to_apply: str = "default",
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
    ) -> list[list[dict]]:
        """As `TextClassifier.run_tokenized`, each row leaving at its first confident layer;
        ``speed`` overrides the default threshold for this call (the instance is not changed,
        so concurrent calls with different speeds do not mix).

        Raises:
            InputError: ``speed`` outside [0, 1], or as `TextClassifier.run_tokenized`.
        """
        speed = self.speed if speed is None else _check_speed(speed)

        def logits_of(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[dict]]:
            return self._exit_logits(batch, speed)

        return self._labelled(
            tokens, logits_of, top_k, function_to_apply, batch_size, max_batch_tokens
        )

    def __call__(
        self,
        texts: str | Sequence[str],
        text_pairs: str | Sequence[str] | None = None,
        *,
        speed: float | None = None,
        top_k: int | None = 1,
        function_to_apply: str = "default",
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        truncation_side: str = "right",
    ) -> list[list[dict]]:
        """As `TextClassifier.__call__` (`run_tokenized` of `tokenize`); ``speed`` overrides
        the default for this call.

        Raises:
            InputError: ``speed`` outside [0, 1] (before any tokenization), or as
                `TextClassifier.__call__`.
        """
        if speed is not None:
            _check_speed(speed)
        self._score_options(top_k, function_to_apply)
        tokens = self.tokenize(texts, text_pairs, truncation_side=truncation_side)
        return self.run_tokenized(
            tokens,
            speed=speed,
            top_k=top_k,
            function_to_apply=function_to_apply,
            batch_size=batch_size,
            max_batch_tokens=max_batch_tokens,
        )

    def _logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[dict]]:
        return self._exit_logits(batch, self.speed)

    def _exit_logits(
        self, batch: dict[str, torch.Tensor], speed: float
    ) -> tuple[torch.Tensor, list[dict]]:
        """A padded batch → ((B, C) float32 logits on the CPU, per row ``{"exit_layer"}``)."""
        out = early_exit_forward(self.model, self.students, **batch, speed=speed)
        return out.logits.cpu(), [{"exit_layer": int(e)} for e in out.exit_layers.tolist()]
