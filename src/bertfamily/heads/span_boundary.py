"""Span boundary objective head (SpanBERT, Joshi et al. 2020 §3.2)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class SpanBoundaryHead(nn.Module):
    """Predict each token x_i of a masked span (s..e) from the boundary hidden states
    x_{s-1}, x_{e+1} and a relative position embedding p_{i-s}:

        h0 = [x_{s-1}; x_{e+1}; p_{i-s}]            (M, 2H + P)
        h1 = LayerNorm(GeLU(W1 h0))                  (M, H)
        y  = LayerNorm(GeLU(W2 h1))                  (M, E)
        logits = y Eᵀ + b                            (M, V), E the tied token embedding

    (Joshi et al. 2020, Eq. 1-2; the decoder is tied to the input embedding as for MLM.)

    Args:
        hidden_size: H; embedding_size: E; position_size: P; max_positions: relative
            positions 0..max_positions-1 (longer spans reuse the last).
        act: activation (GELU); norm1 over H, norm2 over E.
        decoder_weight_owner: the token embedding whose (V, E) weight is the decoder.
    """

    def __init__(
        self,
        hidden_size: int,
        embedding_size: int,
        position_size: int,
        max_positions: int,
        act: nn.Module,
        norm1: nn.Module,
        norm2: nn.Module,
        decoder_weight_owner: nn.Embedding,
    ) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.position = nn.Embedding(max_positions, position_size)
        self.dense1 = nn.Linear(2 * hidden_size + position_size, hidden_size)
        self.norm1 = norm1
        self.dense2 = nn.Linear(hidden_size, embedding_size)
        self.norm2 = norm2
        self.act = act
        self.bias = nn.Parameter(torch.zeros(decoder_weight_owner.num_embeddings))
        self._embedding = [decoder_weight_owner]  # tied, not a parameter of this head

    def forward(
        self,
        hidden: torch.Tensor,
        batch_index: torch.Tensor,
        left: torch.Tensor,
        right: torch.Tensor,
        relative: torch.Tensor,
    ) -> torch.Tensor:
        """hidden (B, T, H) float; batch_index, left, right, relative (M,) int64 (row, left
        boundary position s-1, right boundary position e+1, i - s) → logits (M, V)."""
        rel = relative.clamp(0, self.max_positions - 1)
        h0 = torch.cat(
            [hidden[batch_index, left], hidden[batch_index, right], self.position(rel)], dim=-1
        )  # (M, 2H + P)
        h1 = self.norm1(self.act(self.dense1(h0)))  # (M, H)
        y = self.norm2(self.act(self.dense2(h1)))  # (M, E)
        return F.linear(y, self._embedding[0].weight, self.bias)  # (M, V)
