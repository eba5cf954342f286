"""DeBERTa-v2's convolution beside the first layer (the microsoft/DeBERTa code,
``DeBERTa/deberta/conv.py`` ``ConvLayer``; transformers' ``modeling_deberta_v2.ConvLayer``).

The first layer sees each token with its neighbours only through attention; this branch adds
an n-gram view of the embeddings to that layer's output::

    embeddings ──► Conv1d(k, groups) ──► zero at padding ──► act ──┐
                                                                   ▼
    first layer output ───────────────────────────────────────► (+) ──► norm ──► × mask
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .context import AttentionContext


class ConvolutionBranch(nn.Module):
    """A 1-D convolution over the embeddings, added to the first layer's output.

    Args:
        hidden_size: H.
        kernel_size: k (odd: the output keeps T positions, padding (k - 1) / 2 each side).
        groups: convolution groups (a divisor of H).
        act: the activation after the convolution (``conv_act``).
        norm: the norm over H after the sum.
        dropout: dropout on the convolution output (before ``act``, as the reference).
    """

    def __init__(
        self,
        hidden_size: int,
        kernel_size: int,
        groups: int,
        act: nn.Module,
        norm: nn.Module,
        dropout: float,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(
            hidden_size, hidden_size, kernel_size, padding=(kernel_size - 1) // 2, groups=groups
        )
        self.act = act
        self.norm = norm
        self.dropout = dropout

    def forward(
        self, embedded: torch.Tensor, hidden: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """Combine the branch with the first layer's output.

        Args:
            embedded: (B, T, H) the embeddings (the first layer's input).
            hidden: (B, T, H) the first layer's output.
            ctx: the batch's context; ``ctx.mask`` (B, T) bool, True = real token.

        Returns:
            (B, T, H), zero at padding positions.
        """
        keep = ctx.mask[..., None].to(hidden.dtype)  # (B, T, 1)
        # The reference convolves embeddings that are zero at padding: a real token beside
        # padding then sees the same zeros as at the sequence's edge (batched = alone).
        out = self.conv((embedded * keep).transpose(1, 2)).transpose(1, 2)  # (B, T, H)
        out = self.act(F.dropout(out * keep, self.dropout, self.training))
        return self.norm(hidden + out) * keep  # (B, T, H)
