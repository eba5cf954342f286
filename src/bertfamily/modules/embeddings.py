"""Input embeddings: token + (segment) + (learned position) lookups, LayerNorm, optional E→H."""

from __future__ import annotations

import torch
from torch import nn

from .norms import call_norm


class Embeddings(nn.Module):
    """Sum of lookups in E dimensions, normalised, then (ALBERT) projected to H.

    Args:
        vocab_size: V.
        embedding_size: E (= H except for ALBERT's factorised embedding, E=128).
        max_positions: rows of the learned position table (0 = no absolute positions).
        type_vocab_size: rows of the segment table (0 = no segment embedding, DistilBERT).
        norm: the LayerNorm over E (or a Conditional LayerNorm, which then needs ``condition``).
        hidden_size: H; when it differs from E a projection E→H follows the norm (ALBERT,
            Lan et al. 2020 §3.1 "factorized embedding parameterization").
        dropout: dropout probability after the norm.
        pad_token_id: row of the token table used for padding.
        add_positions: add the position table (DeBERTa keeps one without adding it).
        task_types: rows of ERNIE's task-type table (0 = none); its row 0 is added to every
            token, as transformers does when no task_type_ids are given.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        max_positions: int,
        type_vocab_size: int,
        norm: nn.Module,
        hidden_size: int,
        dropout: float,
        pad_token_id: int = 0,
        add_positions: bool = True,
        task_types: int = 0,
    ) -> None:
        super().__init__()
        self.token = nn.Embedding(vocab_size, embedding_size, padding_idx=pad_token_id)
        self.task_type = nn.Embedding(task_types, embedding_size) if task_types else None
        self.segment = nn.Embedding(type_vocab_size, embedding_size) if type_vocab_size else None
        self.position = nn.Embedding(max_positions, embedding_size) if max_positions else None
        self.add_positions = add_positions  # DeBERTa keeps the table but does not add it
        self.norm = norm
        self.dropout = nn.Dropout(dropout)
        self.projection = (
            nn.Linear(embedding_size, hidden_size) if hidden_size != embedding_size else None
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        condition: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Embed a batch.

        Args:
            input_ids: (B, T) int64 token ids.
            position_ids: (B, T) or (1, T) int64 rows of the position table.
            token_type_ids: (B, T) int64 segment ids; None = all zeros (ignored without a table).
            condition: (B, C) or (B, T, C) float, for a conditional norm; else unused.

        Returns:
            (B, T, H) float embeddings.
        """
        x = self.token(input_ids)  # (B, T, E)
        if self.position is not None and self.add_positions:
            x = x + self.position(position_ids)
        if self.segment is not None:
            if token_type_ids is None:
                x = x + self.segment.weight[0]
            else:
                x = x + self.segment(token_type_ids)
        if self.task_type is not None:
            x = x + self.task_type.weight[0]
        x = self.dropout(call_norm(self.norm, x, condition))
        if self.projection is not None:
            x = self.projection(x)  # (B, T, E) -> (B, T, H)
        return x
