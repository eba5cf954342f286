"""Task losses: the loss of one fine-tuning head on one batch.

The elementary losses of the task heads (`sequence_loss`: regression, single- and multi-label
classification; `token_loss`; `span_loss`) and `task_loss`, which picks the one that fits a head
and checks the batch. The heads themselves are in `bertfamily.heads.task_heads`.

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

from ..config import PROBLEM_TYPES
from ..data.batching import IGNORE_INDEX
from .task_heads import TASK_HEADS

__all__ = [
    "task_loss",
    "task_counts",
    "sequence_loss",
    "token_loss",
    "span_loss",
    "problem_type_of",
]


def problem_type_of(num_outputs: int, labels: torch.Tensor, problem_type: str | None) -> str:
    """The problem type of a sequence-classification loss, as transformers chooses it: the
    configured one, else regression for one output, single-label for integer labels,
    multi-label otherwise (float labels over several outputs).

    Raises:
        ValueError: a problem type not in `PROBLEM_TYPES`.
    """
    if problem_type is not None:
        if problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type {problem_type!r} is not one of {PROBLEM_TYPES}")
        return problem_type
    if num_outputs == 1:
        return "regression"
    if not labels.dtype.is_floating_point:
        return "single_label_classification"
    return "multi_label_classification"


def sequence_loss(
    logits: torch.Tensor, labels: torch.Tensor, problem_type: str | None = None
) -> torch.Tensor:
    """The loss of a sequence-classification head (transformers' ``*ForSequenceClassification``).

    Args:
        logits: (B, C) float; C = 1 means regression.
        labels: (B,) int64 class ids (single-label), (B,) or (B, 1) float targets (regression),
            or (B, C) 0/1 floats (multi-label).
        problem_type: one of `PROBLEM_TYPES`, or None to infer it (`problem_type_of`).

    Returns:
        0-d float: mean squared error (regression), cross-entropy (single-label) or binary
        cross-entropy with logits averaged over B·C (multi-label).

    Raises:
        ValueError: labels whose shape does not fit the problem type.
    """
    kind = problem_type_of(logits.shape[-1], labels, problem_type)
    if kind == "regression":
        if logits.shape[-1] == 1:
            return F.mse_loss(logits.squeeze(-1), labels.reshape(-1).to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if kind == "single_label_classification":
        if labels.numel() != logits.shape[0]:
            raise ValueError(
                f"single-label classification takes (B,) labels; got {tuple(labels.shape)} "
                f"for logits {tuple(logits.shape)}"
            )
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(
            f"multi-label classification takes (B, C) labels like the logits "
            f"{tuple(logits.shape)}; got {tuple(labels.shape)}"
        )
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over tokens; positions labelled ``IGNORE_INDEX`` (-100) carry no loss.

    logits (B, T, C) float; labels (B, T) int64."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten().long(), ignore_index=IGNORE_INDEX)


def span_loss(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    start_positions: torch.Tensor,
    end_positions: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean of the start and end cross-entropies (Devlin et al. 2019 §4.2).

    start_logits/end_logits (B, T) float; positions (B,) or (B, 1) int64 token indices (0 =
    [CLS], the no-answer position of SQuAD 2.0). Positions outside [0, T) are clamped to T
    and carry no loss, as transformers' question-answering heads treat answers cut off by
    truncation. With ``attention_mask`` (B, T) 0/1, padding positions are no candidates
    (their logits are set to the dtype's minimum), so a row's loss does not depend on how much
    padding its batch has (transformers' heads keep them as candidates)."""
    T = start_logits.shape[1]
    if attention_mask is not None:
        pad = ~attention_mask.bool()
        start_logits = start_logits.masked_fill(pad, torch.finfo(start_logits.dtype).min)
        end_logits = end_logits.masked_fill(pad, torch.finfo(end_logits.dtype).min)
    start = start_positions.reshape(-1).long().clamp(0, T)
    end = end_positions.reshape(-1).long().clamp(0, T)
    return (
        F.cross_entropy(start_logits, start, ignore_index=T)
        + F.cross_entropy(end_logits, end, ignore_index=T)
    ) / 2


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
            (`problem_type_of`). "choice" is always cross-entropy over the choices.
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
