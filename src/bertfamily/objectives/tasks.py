"""Task losses: the loss of one fine-tuning head on one batch.

The heads and their elementary losses (`sequence_loss`, `token_loss`, `span_loss`) live in
`bertfamily.heads.tasks`; `task_loss` picks the one that fits a head and checks the batch.

Gradient accumulation: `task_counts` gives the units of a batch's loss terms (``sequences``
for sequence-level heads, ``tokens`` for labelled tokens, ``start``/``end`` for answer
positions); pass ``lambda b: task_counts(task, b)`` to the `Trainer` as ``count_fn`` and call
``task_loss(task, output, batch, denominators=...)``: the loss is then summed over its units and
divided by ``denominators``, so an accumulated step equals one merged batch (see
`bertfamily.train.loop`).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..heads.tasks import IGNORE_INDEX, TASK_HEADS, sequence_loss, span_loss, token_loss

__all__ = ["task_loss", "task_counts"]


def task_counts(task: str, batch: dict[str, torch.Tensor]) -> dict[str, int]:
    """The units of the loss of ``task`` in ``batch`` (the `Trainer`'s ``count_fn``):
    ``sequences`` (rows: "classify", "choice"), ``tokens`` (labelled tokens: "tokens"), or
    ``start``/``end`` (answer positions inside the batch's sequence length: "qa").

    Raises:
        ValueError: unknown task or the batch lacks the labels the task needs.
    """
    if task in ("classify", "choice"):
        return {"sequences": int(_need(batch, "labels").shape[0])}
    if task == "tokens":
        return {"tokens": int((_need(batch, "labels") != IGNORE_INDEX).sum())}
    if task == "qa":
        T = _need(batch, "input_ids").shape[-1]
        return {
            "start": int((_need(batch, "start_positions").reshape(-1) < T).sum()),
            "end": int((_need(batch, "end_positions").reshape(-1) < T).sum()),
        }
    raise ValueError(f"unknown task {task!r}; valid: {TASK_HEADS}")


def task_loss(
    task: str,
    output,
    batch: dict[str, torch.Tensor],
    problem_type: str | None = None,
    denominators: dict[str, float] | None = None,
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
        denominators: None (the mean over the batch's units), or the keys of `task_counts`:
            the loss summed over the batch's units and divided by them (the per-unit loss of
            a sequence-level head is its mean over the outputs, as in `sequence_loss`; a QA
            loss is the half sum of the start and end terms).

    Raises:
        ValueError: unknown task or the batch lacks the labels the task needs.
    """
    if task in ("classify", "choice"):
        kind = problem_type if task == "classify" else "single_label_classification"
        loss = sequence_loss(output.logits, _need(batch, "labels"), kind)
        if denominators is None:
            return loss
        # the mean over B rows (× C outputs, fixed) times B: the sum over rows
        return loss * (output.logits.shape[0] / denominators["sequences"])
    if task == "tokens":
        if denominators is None:
            return token_loss(output.logits, _need(batch, "labels"))
        logits, labels = output.logits.flatten(0, 1), _need(batch, "labels").flatten().long()
        summed = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
        return summed / denominators["tokens"]
    if task == "qa":
        start, end = _need(batch, "start_positions"), _need(batch, "end_positions")
        if denominators is None:
            return span_loss(output.start_logits, output.end_logits, start, end)
        T = output.start_logits.shape[1]

        def summed(logits: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            target = positions.reshape(-1).long().clamp(0, T)  # as `span_loss`: T is ignored
            return F.cross_entropy(logits, target, ignore_index=T, reduction="sum")

        return (
            summed(output.start_logits, start) / denominators["start"]
            + summed(output.end_logits, end) / denominators["end"]
        ) / 2
    raise ValueError(f"unknown task {task!r}; valid: {TASK_HEADS}")


def _need(batch: dict[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in batch:
        raise ValueError(f"the batch has no {key!r} (keys: {sorted(batch)})")
    return batch[key]
