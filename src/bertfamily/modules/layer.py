"""One encoder layer: attention and feed-forward sub-blocks, each wrapped post-LN."""

from __future__ import annotations

import torch
from torch import nn

from .attention import AttentionOutput
from .context import AttentionContext
from .norms import call_norm


class EncoderLayer(nn.Module):
    """Post-LN transformer layer (Vaswani et al. 2017 §3.1; Devlin et al. 2019 §3).

    The layer receives its components; it does not know which family it belongs to::

        x ─► attention ─► dropout ─► (+) ─► attention_norm ─► ffn ─► dropout ─► (+) ─► ffn_norm ─►
        │                             ▲                    │                     ▲
        └─────────────────────────────┘                    └─────────────────────┘
    """

    def __init__(
        self,
        attention: nn.Module,
        attention_norm: nn.Module,
        ffn: nn.Module,
        ffn_norm: nn.Module,
        dropout: float,
    ) -> None:
        super().__init__()
        self.attention = attention
        self.attention_norm = attention_norm
        self.ffn = ffn
        self.ffn_norm = ffn_norm
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, ctx: AttentionContext
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """x: (B, T, H) → ((B, T, H), the attention's output with optional weights)."""
        att = self.attention(x, ctx)
        x = call_norm(self.attention_norm, x + self.dropout(att.hidden), ctx.condition)
        x = call_norm(self.ffn_norm, x + self.dropout(self.ffn(x)), ctx.condition)
        return x, att
