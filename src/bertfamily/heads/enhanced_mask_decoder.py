"""DeBERTa's enhanced mask decoder (EMD), the pretraining decoder in front of the MLM head."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from ..modules.context import AttentionContext


class EnhancedMaskDecoder(nn.Module):
    """Absolute positions enter just before the MLM softmax (He et al. 2021 §3.3, Figure 2).

    The trunk sees relative positions only; to tell "a new *store* opened beside the new *mall*"
    apart the decoder adds the absolute position embeddings P to the input of the last layer
    and runs that layer again ``num_steps`` times (the original code: 2, weights shared with the
    encoder's last layer, so the decoder has no parameters besides the position table)::

        query₀ = H_{L-1} + P          keys/values = H_{L-1} (fixed)
        query_{n+1} = layer_L(query_n, keys/values)        → MLM head reads query_{num_steps}

    The position table is the encoder's absolute position embedding (kept, but not added at the
    input, when ``position_biased_input`` is False), whose checkpoint key is
    ``deberta.embeddings.position_embeddings.weight``.

    Args:
        num_steps: how many times the last layer is re-applied (``EncoderConfig.emd_layers``).
        position: the encoder's absolute position table (an ``nn.Embedding``).
        layer: the encoder's last layer.

    Both are the encoder's own modules, wired in by `bertfamily.build.build_model`; they are held
    outside the module tree (so their parameters are stored and counted once, by the encoder).
    """

    def __init__(self, num_steps: int, position: nn.Module, layer: nn.Module) -> None:
        super().__init__()
        self.num_steps = num_steps
        self._shared = (position, layer)  # a tuple: not registered as submodules

    def forward(
        self,
        hidden_states: tuple[torch.Tensor, ...],
        ctx: AttentionContext,
        position_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Decode.

        Args:
            hidden_states: the encoder's L + 1 hidden states, each (B, T, H); the input of the
                last layer (``hidden_states[-2]``) is used.
            ctx: the batch's `AttentionContext` (mask, relative embeddings).
            position_ids: (B, T) or (1, T) int64 absolute positions.

        Returns:
            (B, T, H) float, the states the MLM head reads.
        """
        position, layer = self._shared
        keys = hidden_states[-2]  # (B, T, H)
        ctx = dataclasses.replace(ctx, key_value_states=keys)
        query = keys + position(position_ids)  # (B, T, H)
        for _ in range(self.num_steps):
            query, _ = layer(query, ctx)
        return query
