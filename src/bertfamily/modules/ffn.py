"""Position-wise feed-forward block."""

from __future__ import annotations

import torch
from torch import nn


class FeedForward(nn.Module):
    """H → I → activation → H (Vaswani et al. 2017, eq. 2; BERT uses GELU, Devlin et al. 2019 §3).

    Input and output (..., H) float; dropout is applied by the layer, after this block.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, act: nn.Module) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, intermediate_size)
        self.act = act
        self.down = nn.Linear(intermediate_size, hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., H) float → (..., H) float: dense to I → activation → dense to H."""
        return self.down(self.act(self.up(x)))  # (.., H) -> (.., I) -> (.., H)
