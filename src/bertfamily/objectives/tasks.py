"""Task losses: the loss of one fine-tuning head on one batch.

The heads and their elementary losses (`sequence_loss`, `token_loss`, `span_loss`) live in
`bertfamily.heads.tasks`; `task_loss` picks the one that fits a head and checks the batch.
"""

from __future__ import annotations

import torch

from ..heads.tasks import TASK_HEADS, sequence_loss, span_loss, token_loss

__all__ = ["task_loss"]


def task_loss(
    task: str, output, batch: dict[str, torch.Tensor], problem_type: str | None = None
) -> torch.Tensor:
    """The loss of one task head on one batch: a 0-d float tensor.

    Args:
        task: one of ``TASK_HEADS``.
        output: the `ModelOutput` (``logits`` or ``start_logits``/``end_logits``).
        batch: holds ``labels`` ((B,) or (B, T); (B, C) 0/1 floats for multi-label), or
            ``start_positions``/``end_positions``.
        problem_type: the "classify" head's loss (one of ``config.PROBLEM_TYPES``: MSE,
            cross-entropy, binary cross-entropy); None infers it as transformers does
            (`heads.tasks.problem_type_of`). "choice" is always cross-entropy over the choices.

    Raises:
        ValueError: unknown task or the batch lacks the labels the task needs.
    """
    if task == "classify":
        return sequence_loss(output.logits, _need(batch, "labels"), problem_type)
    if task == "choice":
        return sequence_loss(output.logits, _need(batch, "labels"), "single_label_classification")
    if task == "tokens":
        return token_loss(output.logits, _need(batch, "labels"))
    if task == "qa":
        return span_loss(
            output.start_logits,
            output.end_logits,
            _need(batch, "start_positions"),
            _need(batch, "end_positions"),
        )
    raise ValueError(f"unknown task {task!r}; valid: {TASK_HEADS}")


def _need(batch: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in batch:
        raise ValueError(f"the batch has no {key!r} (keys: {sorted(batch)})")
    return batch[key]
