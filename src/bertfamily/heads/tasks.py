"""Fine-tuning heads: sequence classification, token classification, extractive QA,
multiple choice; and the loss that goes with each.

Every head is one small component; which variant a family uses is data
(`EncoderConfig.classifier_pooling`, `choice_pooling`, `classifier_activation`), set by presets
and key tables, never by a family name:

* ``"pooler"`` — the encoder's pooled [CLS] (dense + tanh, Devlin et al. 2019 §4.1), dropout,
  then one linear layer (BERT, ALBERT; RoBERTa/Longformer multiple choice).
* ``"first_token_dense"`` — the first token's hidden state through the head's own dense layer
  H→H and an activation, dropout, then one linear layer: RoBERTa's classification head
  (tanh), DistilBERT's pre-classifier (ReLU), DeBERTa's context pooler (GELU).

Shapes: B batch, T sequence, H hidden, C classes (labels), K choices.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..config import PROBLEM_TYPES

TASK_HEADS = ("classify", "tokens", "qa", "choice")
POOLINGS = ("pooler", "first_token_dense")
IGNORE_INDEX = -100  # label of positions that carry no loss (sub-tokens, special tokens)


class SequenceHead(nn.Module):
    """(B, T, H) hidden states (and (B, H) pooled output) → (B, C) scores.

    Args:
        hidden_size: H.
        num_outputs: C (1 for regression and for multiple choice, where each choice gets one
            score).
        pooling: ``"pooler"`` (use the encoder's pooled output) or ``"first_token_dense"``
            (the first token through ``dense`` H→H and ``act``).
        act: activation after ``dense`` (``first_token_dense`` only).
        dropout: dropout probability before ``dense`` and before ``out``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_outputs: int,
        pooling: str,
        act: nn.Module | None,
        dropout: float,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling {pooling!r} is not one of {POOLINGS}")
        self.pooling = pooling
        self.dropout = nn.Dropout(dropout)
        if pooling == "first_token_dense":
            self.dense = nn.Linear(hidden_size, hidden_size)
            self.act = act if act is not None else nn.Tanh()
        self.out = nn.Linear(hidden_size, num_outputs)

    def forward(self, hidden: torch.Tensor, pooled: torch.Tensor | None) -> torch.Tensor:
        """hidden (B, T, H), pooled (B, H) or None → (B, C) float."""
        if self.pooling == "pooler":
            if pooled is None:
                raise ValueError(
                    "this head classifies from the pooled output, but the encoder "
                    "has no pooler (use_pooler=False)"
                )
            x = pooled  # (B, H)
        else:
            x = self.act(self.dense(self.dropout(hidden[:, 0])))  # (B, H)
        return self.out(self.dropout(x))  # (B, C)


class TokenHead(nn.Module):
    """(B, T, H) → (B, T, C): one linear layer on every token after dropout (NER tagging)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) float → (B, T, C) float logits; ``pooled`` is unused."""
        return self.out(self.dropout(hidden))  # (B, T, C)


class SpanHead(nn.Module):
    """(B, T, H) → (B, T, 2): start and end scores of every token (Devlin et al. 2019 §4.2:
    a start vector S and an end vector E dotted with each token's hidden state)."""

    def __init__(self, hidden_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, 2)

    def forward(self, hidden: torch.Tensor, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) float → (B, T, 2) float start and end logits; ``pooled`` is unused."""
        return self.out(self.dropout(hidden))  # (B, T, 2)


# --- losses ---------------------------------------------------------------------------------
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
