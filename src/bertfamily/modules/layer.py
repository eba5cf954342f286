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

    With ``pre_norm`` each norm precedes its sub-block instead:
    x + attention(attention_norm(x)), then x + ffn(ffn_norm(x)).
    """

    def __init__(
        self,
        attention: nn.Module,
        attention_norm: nn.Module,
        ffn: nn.Module,
        ffn_norm: nn.Module,
        dropout: float,
        pre_norm: bool = False,
    ) -> None:
        super().__init__()
        # pre-LN (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"):
        # each norm is applied to its sub-block's input and the residual stream stays
        # unnormalised (ModernBERT; the encoder then ends with a final norm)
        self.pre_norm = pre_norm
        self.attention = attention
        self.attention_norm = attention_norm
        self.ffn = ffn
        self.ffn_norm = ffn_norm
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, ctx: AttentionContext
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """x: (B, T, H) → ((B, T, H), the attention's output with optional weights)."""
        if self.pre_norm:
            att = self.attention(call_norm(self.attention_norm, x, ctx.condition), ctx)
            x = x + self.dropout(att.hidden)
            x = x + self.dropout(self.ffn(call_norm(self.ffn_norm, x, ctx.condition)))
            return x, att
        att = self.attention(x, ctx)
        x = call_norm(self.attention_norm, x + self.dropout(att.hidden), ctx.condition)
        x = call_norm(self.ffn_norm, x + self.dropout(self.ffn(x)), ctx.condition)
        return x, att
