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

from ..errors import InputError

TASK_HEADS = ("classify", "tokens", "qa", "choice")
POOLINGS = ("pooler", "first_token_dense", "first_token")


class PredictionTransform(nn.Module):
    """dense H→H, activation, norm: ModernBERT's prediction head, applied before a task head's
    output layer (config ``task_transform``)."""

    def __init__(self, hidden_size: int, act: nn.Module, norm: nn.Module, bias: bool = True):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.act = act
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) float → (..., H) float."""
        return self.norm(self.act(self.dense(x)))


def _transformed(transform: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    return transform(x) if transform is not None else x


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
        transform: a `PredictionTransform` applied to the pooled vector, or None
            (``"first_token"`` pooling reads the first token as is).
    """

    def __init__(
        self,
        hidden_size: int,
        num_outputs: int,
        pooling: str,
        act: nn.Module | None,
        dropout: float,
        transform: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.transform = transform
        if pooling not in POOLINGS:
            raise InputError(f"pooling {pooling!r} is not one of {POOLINGS}")
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
                raise InputError(
                    "this head classifies from the pooled output, but the encoder "
                    "has no pooler (use_pooler=False)"
                )
            x = pooled  # (B, H)
        elif self.pooling == "first_token":
            x = hidden[:, 0]  # (B, H)
        else:
            x = self.act(self.dense(self.dropout(hidden[:, 0])))  # (B, H)
        return self.out(self.dropout(_transformed(self.transform, x)))  # (B, C)


class TokenHead(nn.Module):
    """(B, T, H) → (B, T, C): one linear layer on every token after dropout (NER tagging)."""

    def __init__(
        self, hidden_size: int, num_labels: int, dropout: float, transform: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.transform = transform
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) float → (B, T, C) float logits; ``pooled`` is unused."""
        return self.out(self.dropout(_transformed(self.transform, hidden)))  # (B, T, C)


class SpanHead(nn.Module):
    """(B, T, H) → (B, T, 2): start and end scores of every token (Devlin et al. 2019 §4.2:
    a start vector S and an end vector E dotted with each token's hidden state)."""

    def __init__(
        self, hidden_size: int, dropout: float = 0.0, transform: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.transform = transform
        self.dropout = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, 2)

    def forward(self, hidden: torch.Tensor, pooled: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) float → (B, T, 2) float start and end logits; ``pooled`` is unused."""
        return self.out(self.dropout(_transformed(self.transform, hidden)))  # (B, T, 2)


# --- losses ---------------------------------------------------------------------------------
